//! Lease changes on etcd: one watch on the groups' key prefix, with the previous value of
//! each deleted key. A created key is a grant; a rewritten one a renewal (not
//! reported); a deleted one a release or a lapse, told apart by the expiry the hold
//! recorded (etcd deletes a lapsed hold's key itself, at or after that time).

use etcd_client::{Event, EventType, WatchOptions};
use futures_util::StreamExt;

use super::{EtcdStore, now_ms, parse_hold};
use crate::changes::LeaseChange;
use crate::error::LeaseError;
use crate::store::LeaseChanges;

/// A delete this close to the hold's recorded expiry (or later) is reported as a lapse.
const LAPSE_SLACK_MS: u64 = 500;

/// [`crate::LeaseStore::changes`] on etcd: returns once etcd confirmed the watch.
pub(super) async fn changes(
    store: &EtcdStore,
    group_prefix: &str,
) -> Result<LeaseChanges, LeaseError> {
    let options = WatchOptions::new().with_prefix().with_prev_key();
    let mut watch = store
        .client()
        .watch(format!("lease:{{{group_prefix}"), Some(options))
        .await?;
    match watch.message().await? {
        Some(reply) if reply.created() => {}
        _ => {
            return Err(LeaseError::Etcd(etcd_client::Error::WatchError(
                "etcd did not confirm the watch".into(),
            )));
        }
    }
    let events = watch
        .take_while(|reply| {
            let live = matches!(reply, Ok(reply) if !reply.canceled());
            async move { live }
        })
        .flat_map(|reply| {
            let events: Vec<LeaseChange> = reply
                .map(|reply| reply.events().iter().filter_map(lease_change).collect())
                .unwrap_or_default();
            futures_util::stream::iter(events)
        });
    Ok(Box::pin(events))
}

/// The lease event of one etcd event, if it is about a hold (not a retirement, a holder
/// limit entry or a renewal).
fn lease_change(event: &Event) -> Option<LeaseChange> {
    match event.event_type() {
        EventType::Put => {
            let kv = event.kv()?;
            if kv.create_revision() != kv.mod_revision() {
                return None;
            }
            let (_, key, holding) = parse_hold(kv)?;
            Some(LeaseChange::Acquired {
                key,
                holder: holding.holder,
                fencing_token: holding.fencing_token,
                expires_at_ms: holding.expires_at_ms,
            })
        }
        EventType::Delete => {
            let (_, key, holding) = parse_hold(event.prev_kv()?)?;
            if now_ms() + LAPSE_SLACK_MS >= holding.expires_at_ms {
                Some(LeaseChange::Expired { key })
            } else {
                Some(LeaseChange::Released { key })
            }
        }
    }
}
