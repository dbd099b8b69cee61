-- Browser sessions moved to Redis (src/sessions.rs): one key per session under the
-- server's lease namespace, expired by Redis's TTL, so a hold and a release no longer
-- touch Postgres. Nothing reads or writes tower_sessions any more; its sessions are not
-- carried over (buyers are anonymous: an old cookie simply starts a new guest session).
-- Apply once no server of an older version runs against this database (those still
-- keep their sessions here).
DROP SCHEMA IF EXISTS tower_sessions CASCADE;
