//! The Redis connection of a [`crate::LeaseClient`]: redis-rs's multiplexed, reconnecting
//! `ConnectionManager`, plus the two repairs it does not make by itself.
//!
//! * **A connection the server closed** (the idle timeout of a managed Redis, a NAT or a
//!   proxy): the next request fails with a dropped connection while the manager
//!   reconnects. Such a request is sent once more on the new connection. Every script of
//!   this crate is safe to run twice: acquire is idempotent for its owner token, release
//!   and renew are compare-and-something, retire adds to a set and compares-and-deletes,
//!   an install whose marker is gone is refused, the rest are reads.
//! * **A connection that stopped answering without closing** (a dropped flow, a suspended
//!   host: half-open): each request times out and the manager keeps the dead connection,
//!   so every later request would time out too. After a timeout the connection is
//!   replaced by a new one (whether the timed-out request ran is unknown: it is not sent
//!   again).

use std::future::Future;
use std::sync::RwLock;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Cmd, FromRedisValue, RedisResult, ScriptInvocation};

use crate::telemetry;

/// One logical Redis connection that heals: see the module docs.
pub struct RedisStore {
    client: Client,
    config: ConnectionManagerConfig,
    current: RwLock<ConnectionManager>,
}

impl RedisStore {
    /// A store over the Redis at `url` (`redis://host:port/db`), connected lazily:
    /// nothing is sent until the first request. `timeout` bounds connecting and every
    /// response. Errors: a malformed URL.
    pub fn open(url: &str, timeout: Duration) -> RedisResult<Self> {
        let client = Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let current = ConnectionManager::new_lazy_with_config(client.clone(), config.clone())?;
        Ok(RedisStore {
            client,
            config,
            current: RwLock::new(current),
        })
    }

    /// The client the store connects with, for connections of the caller's own (a
    /// pub/sub subscription: [`crate::LeaseStore::changes`]).
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The current connection (a cheap handle), for commands of the caller's own.
    pub fn connection(&self) -> ConnectionManager {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Runs one request (`request` is given a connection and may be called twice),
    /// records its latency under `op`, and repairs the connection as the module docs
    /// say: once more after a dropped connection, a new connection after a timeout.
    pub(crate) async fn round_trip<T, F, Fut>(&self, op: &'static str, request: F) -> RedisResult<T>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let first = telemetry::redis_round_trip(op, request(self.connection())).await;
        match first {
            Err(err) if err.is_connection_dropped() => {
                metrics::counter!(telemetry::REDIS_REPAIRS_TOTAL, "repair" => "resent")
                    .increment(1);
                telemetry::redis_round_trip(op, request(self.connection())).await
            }
            Err(err) if err.is_timeout() => {
                self.replace();
                Err(err)
            }
            other => other,
        }
    }

    /// Runs `script` as one [`RedisStore::round_trip`].
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        op: &'static str,
        script: &ScriptInvocation<'_>,
    ) -> RedisResult<T> {
        self.round_trip(op, |mut conn| async move {
            script.invoke_async(&mut conn).await
        })
        .await
    }

    /// Runs `command` as one round trip, repaired as the module docs say (sent once more
    /// after a dropped connection, so give it only a command that is safe to run twice;
    /// a new connection after a timeout) and timed under `op` in
    /// [`telemetry::REDIS_ROUND_TRIP_SECONDS`]. Errors: Redis's, or the timeout.
    pub async fn query<T: FromRedisValue>(
        &self,
        op: &'static str,
        command: &Cmd,
    ) -> RedisResult<T> {
        self.round_trip(op, |mut conn| async move {
            command.query_async(&mut conn).await
        })
        .await
    }

    /// Replaces the current connection with a new, lazily connected one.
    fn replace(&self) {
        // Only a malformed client config fails here, and it was built once already: on
        // failure keep the old connection; the next timeout tries again.
        if let Ok(fresh) =
            ConnectionManager::new_lazy_with_config(self.client.clone(), self.config.clone())
        {
            metrics::counter!(telemetry::REDIS_REPAIRS_TOTAL, "repair" => "replaced").increment(1);
            *self.current.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        }
    }
}
