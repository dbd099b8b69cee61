-- Browser sessions (tower-sessions-sqlx-store's PostgresStore, default schema and table
-- names). Buyers are anonymous: the session holds a public buyer id, a display name and
-- the owner tokens of the buyer's current holds, which never leave the server.
CREATE SCHEMA IF NOT EXISTS tower_sessions;
CREATE TABLE IF NOT EXISTS tower_sessions.session (
    id          text        PRIMARY KEY NOT NULL,
    data        bytea       NOT NULL,
    expiry_date timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS session_expiry ON tower_sessions.session (expiry_date);
