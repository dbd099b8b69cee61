//! Where browser sessions live: in Redis (next to the leases when Redis is the lease
//! store, `--lease-store-url`), on a healing connection of their own
//! ([`lease::RedisStore`]). A session is one string key,
//! `<namespace>:session:<id>` ([`crate::config::LeaseNamespace::session_key`]), whose
//! value is the tower-sessions record in MessagePack and whose TTL is the session's
//! expiry. Keeping sessions out of Postgres is what lets a hold and a release touch
//! Postgres zero times (see `docs/performance.md`).
//!
//! * **Create never overwrites, save never resurrects.** tower-sessions creates a session
//!   with `create` and writes it back with `save`. Create is `SET … NX PX` (a fresh id is
//!   drawn if the id is taken); save is `SET … XX PX`, which writes only over a key that
//!   still exists. A request still in flight when the buyer renames themselves (the
//!   session id is rotated: the old key deleted, a new one created) therefore cannot write
//!   the old session back under the old id, and the old cookie, perhaps planted by
//!   someone else, stays worthless; nor can a save bring back a session that expired
//!   meanwhile. Delete is `DEL`.
//! * **Redis expires them.** Every create and save sets the key's TTL to the record's
//!   expiry (one day of inactivity, [`crate::app::router`]), so an abandoned session goes
//!   away by itself: there is no sweeper.
//! * **One round trip per call, repaired and timed.** Each call is one command through
//!   [`lease::RedisStore::query`], timed as a Redis round trip
//!   (`lease_redis_round_trip_seconds`, `op` = `session_load`, `session_save`,
//!   `session_create`, `session_delete`) and sent once more after a dropped connection.
//!   Each is safe to send twice: `GET` reads, `SET XX` and `DEL` repeat themselves; a
//!   `SET NX` that had succeeded finds its own key and creates the session again under
//!   another id, leaving an unreferenced copy to expire.
//!
//! The owner tokens of a buyer's holds are in the session, so they never leave the server.
//! What this costs: a Redis that loses its data loses the sessions with the holds (every
//! buyer becomes a new guest, whose forms served before are refused until the page is
//! reloaded, their CSRF tokens being bound to the lost session; orders stay in Postgres
//! under the old buyer id), and while Redis is down no page is served (503 naming Redis).

use redis::Cmd;
use time::OffsetDateTime;
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{self, SessionStore};

use crate::config::LeaseNamespace;
use crate::state::SessionRedis;

/// The name of the session cookie; its value is the session id, nothing else.
pub const SESSION_COOKIE: &str = "seatlock.sid";

/// The store sessions live in, as named in a 503 page when it fails.
pub const STORE: &str = crate::http::error::SESSION_STORE;

/// The session store of the application: see the module docs.
#[derive(Clone)]
pub struct Sessions {
    redis: SessionRedis,
    namespace: LeaseNamespace,
}

impl Sessions {
    /// Sessions in `redis`, under `namespace`.
    pub fn new(redis: SessionRedis, namespace: LeaseNamespace) -> Self {
        Sessions { redis, namespace }
    }

    fn key(&self, id: &Id) -> String {
        self.namespace.session_key(&id.to_string())
    }

    /// Writes `record` under its id with the TTL of its expiry, only if the key is absent
    /// (`NX`) or only if it exists (`XX`); returns whether it was written.
    async fn set(
        &self,
        op: &'static str,
        record: &Record,
        condition: &str,
    ) -> session_store::Result<bool> {
        let data = rmp_serde::to_vec(record)
            .map_err(|err| session_store::Error::Encode(err.to_string()))?;
        let mut set = Cmd::set(self.key(&record.id), data);
        set.arg(condition).arg("PX").arg(ttl_ms(record.expiry_date));
        let reply: Option<String> = self.query(op, &set).await?;
        Ok(reply.is_some())
    }

    async fn query<T: redis::FromRedisValue>(
        &self,
        op: &'static str,
        command: &Cmd,
    ) -> session_store::Result<T> {
        self.redis
            .query(op, command)
            .await
            .map_err(|err| session_store::Error::Backend(err.to_string()))
    }
}

/// Milliseconds from now to `expiry`, at least 1 (Redis refuses a TTL of 0 or less; a
/// session past its expiry is written to vanish at once).
fn ttl_ms(expiry: OffsetDateTime) -> u64 {
    let left = (expiry - OffsetDateTime::now_utc()).whole_milliseconds();
    left.clamp(1, i128::from(u64::MAX)) as u64
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("keys", &self.namespace.session_key("*"))
            .finish()
    }
}

#[async_trait::async_trait]
impl SessionStore for Sessions {
    /// Writes a new session, drawing another id while the one given is taken.
    async fn create(&self, record: &mut Record) -> session_store::Result<()> {
        while !self.set("session_create", record, "NX").await? {
            record.id = Id::default();
        }
        Ok(())
    }

    /// Writes `record` over the key of its id if that key still exists; a session
    /// rotated, deleted or expired meanwhile is not brought back.
    async fn save(&self, record: &Record) -> session_store::Result<()> {
        self.set("session_save", record, "XX").await.map(drop)
    }

    async fn load(&self, id: &Id) -> session_store::Result<Option<Record>> {
        let get = Cmd::get(self.key(id));
        let data: Option<Vec<u8>> = self.query("session_load", &get).await?;
        data.map(|bytes| {
            rmp_serde::from_slice(&bytes)
                .map_err(|err| session_store::Error::Decode(err.to_string()))
        })
        .transpose()
    }

    async fn delete(&self, id: &Id) -> session_store::Result<()> {
        self.query("session_delete", &Cmd::del(self.key(id))).await
    }
}

#[cfg(test)]
mod tests {
    use super::ttl_ms;
    use time::{Duration, OffsetDateTime};

    #[test]
    fn a_ttl_is_the_time_to_the_expiry_and_never_below_one_millisecond() {
        let in_a_day = ttl_ms(OffsetDateTime::now_utc() + Duration::days(1));
        assert!((86_399_000..=86_400_000).contains(&in_a_day), "{in_a_day}");
        assert_eq!(ttl_ms(OffsetDateTime::now_utc() - Duration::minutes(1)), 1);
    }
}
