//! [`LeaseStore`] for the Redis [`LeaseClient`]: thin delegation to its own methods (one
//! Lua script or command each, see the crate docs), plus [`LeaseStore::changes`] over a
//! pub/sub connection of its own ([`crate::events`]).

use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;

use crate::{
    FenceLedger, GroupSnapshot, Lease, LeaseChanges, LeaseClient, LeaseError, LeaseKey, LeaseStore,
    TtlLimits, events,
};

/// Redis counts TTLs in milliseconds (`PX`), from 1 ms.
const REDIS_TTL_LIMITS: TtlLimits = TtlLimits {
    min: Duration::from_millis(1),
    step: Duration::from_millis(1),
};

#[async_trait]
impl<L: FenceLedger + 'static> LeaseStore for LeaseClient<L> {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn ttl_limits(&self) -> TtlLimits {
        REDIS_TTL_LIMITS
    }

    async fn acquire_all(
        &self,
        keys: &[LeaseKey],
        holder: &str,
        ttl: Duration,
        limit: Option<u64>,
    ) -> Result<Vec<Lease>, LeaseError> {
        LeaseClient::acquire_all(self, keys, holder, ttl, limit).await
    }

    async fn release(&self, lease: &Lease) -> Result<bool, LeaseError> {
        LeaseClient::release(self, lease).await
    }

    async fn renew(&self, lease: &mut Lease) -> Result<bool, LeaseError> {
        LeaseClient::renew(self, lease).await
    }

    async fn retire(&self, lease: &Lease) -> Result<bool, LeaseError> {
        LeaseClient::retire(self, lease).await
    }

    async fn holders(&self, group: &str) -> Result<GroupSnapshot, LeaseError> {
        LeaseClient::holders(self, group).await
    }

    async fn owned_by(&self, key: &LeaseKey, holder: &str) -> Result<Option<Lease>, LeaseError> {
        LeaseClient::owned_by(self, key, holder).await
    }

    async fn is_held(&self, lease: &Lease) -> Result<bool, LeaseError> {
        LeaseClient::is_held(self, lease).await
    }

    async fn remaining(&self, key: &LeaseKey) -> Result<Option<Duration>, LeaseError> {
        LeaseClient::remaining(self, key).await
    }

    async fn ping(&self) -> Result<(), LeaseError> {
        LeaseClient::ping(self).await
    }

    /// `PSUBSCRIBE` to the groups' event channels and the expiry notifications
    /// ([`events::patterns`]), after turning those on
    /// ([`events::enable_expiry_notifications`]; refused by a Redis that refuses `CONFIG`:
    /// lapses are then not reported). Redis finds lapsed keys by sampling, so a lapse is
    /// reported up to about a second late unless someone reads the key.
    async fn changes(&self, group_prefix: &str) -> Result<LeaseChanges, LeaseError> {
        // Refused by a managed Redis: the stream then reports grants and releases only
        // (the application's live feed checks and reports this itself).
        let _ = events::enable_expiry_notifications(&mut self.redis()).await;
        let mut pubsub = self.store().client().get_async_pubsub().await?;
        for pattern in events::patterns(&format!("{group_prefix}*")) {
            pubsub.psubscribe(pattern).await?;
        }
        // Expiry notifications name every key of the server: keep the groups asked for.
        let prefix = group_prefix.to_owned();
        Ok(Box::pin(pubsub.into_on_message().flat_map(move |msg| {
            let payload: String = msg.get_payload().unwrap_or_default();
            let mut changes = events::parse(msg.get_channel_name(), &payload);
            changes.retain(|change| change.key().group().starts_with(&prefix));
            futures_util::stream::iter(changes)
        })))
    }
}
