//! "Need more time?" on etcd ([`crate::LeaseStore::extend_all`]): one read, one txn, then
//! a keep-alive of each hold's etcd lease.
//!
//! The read takes each hold and its extension record `lease:{group}:~extended:<name>`
//! (`"<fencing token> <granted_at_ms> <extensions>"`, on the hold's etcd lease, so it
//! lapses with it). The budget is judged here. The txn then writes every new expiry and
//! record, all or none, only if each hold is still on its owner's etcd lease and neither
//! it nor its record changed since the read. That compare is the owner check, and it
//! never recreates a hold: a lapsed key fails it. The keep-alives come after the txn, so a
//! refused extension extends nothing. A keep-alive restarts the etcd lease's granted TTL,
//! so on etcd `Extension::ttl` must be the grant's TTL (an expiry capped by
//! `Extension::max_life` is recorded as capped; the hold may outlast it, never end
//! before it, as after a leader change).
//!
//! Round trips: 2 plus one keep-alive per hold (sent together).

use etcd_client::{Compare, CompareOp, KeyValue, PutOptions, Txn, TxnOp};
use futures_util::future::try_join_all;

use super::grant::found;
use super::{EtcdStore, hold_value, lease_id, now_ms, parse_hold};
use crate::error::LeaseError;
use crate::lease::{Extended, Extension, Lease, extended};
use crate::store::check_one_group;

/// How many times the txn is tried when a hold or record changed between the read and the
/// txn (another extension of the same holds racing this one).
const ATTEMPTS: usize = 3;

/// The most holds one extension takes: its txn compares three keys per hold, and etcd
/// refuses more than 128 operations in a list (`--max-txn-ops`).
const MAX_HOLDS: usize = 42;

/// One hold's planned extension: its new value and record.
struct Plan {
    expires_at_ms: u64,
    extensions: u32,
    compares: [Compare; 3],
    puts: [TxnOp; 2],
}

/// [`crate::LeaseStore::extend_all`] on etcd (see the module docs). etcd keeps no waiting
/// room, so an extension with an admission is refused before anything is sent.
pub(super) async fn extend_all(
    store: &EtcdStore,
    leases: &[Lease],
    extension: &Extension,
) -> Result<Extended, LeaseError> {
    if extension.admission.is_some() {
        return Err(LeaseError::AdmissionUnchecked { store: "etcd" });
    }
    let keys: Vec<_> = leases.iter().map(|l| l.key().clone()).collect();
    check_one_group(&keys)?;
    if leases.len() > MAX_HOLDS {
        return Err(LeaseError::TooManyKeys {
            keys: leases.len(),
            limit: MAX_HOLDS,
        });
    }
    let mut attempt = 0;
    loop {
        attempt += 1;
        // Read every hold and its record in one txn without a compare.
        let reads = leases
            .iter()
            .flat_map(|l| {
                [
                    TxnOp::get(l.key().lease_key(), None),
                    TxnOp::get(l.key().extension_key(), None),
                ]
            })
            .collect::<Vec<_>>();
        let read = store.txn(Txn::new().and_then(reads)).await?;
        let read = read.op_responses();
        let now = now_ms();
        let mut plans = Vec::with_capacity(leases.len());
        for (i, lease) in leases.iter().enumerate() {
            let record = found(&read, 2 * i + 1);
            plans.push(plan(lease, extension, found(&read, 2 * i), record, now)?);
        }
        let (mut when, mut then) = (Vec::new(), Vec::new());
        for plan in &plans {
            when.extend(plan.compares.iter().cloned());
            then.extend(plan.puts.iter().cloned());
        }
        if !store
            .txn(Txn::new().when(when).and_then(then))
            .await?
            .succeeded()
        {
            // A hold changed since the read: read again. The next read finds a lapse.
            if attempt < ATTEMPTS {
                continue;
            }
            return Err(LeaseError::Expired {
                name: leases[0].key().name().to_owned(),
            });
        }
        // Restart each etcd lease's TTL. One that is gone lapsed after the txn.
        try_join_all(leases.iter().map(|lease| keep_alive(store, lease))).await?;
        let expiries: Vec<u64> = plans.iter().map(|p| p.expires_at_ms).collect();
        return Ok(Extended {
            leases: extended(leases, extension, &expiries),
            extensions: plans.iter().map(|p| p.extensions).max().unwrap_or(0),
        });
    }
}

/// The extension of one hold as read (`hold`, `record`), judged against its budget at
/// `now` (Unix ms, this process's clock). Errors: [`LeaseError::Expired`],
/// [`LeaseError::ExtensionLimit`], [`LeaseError::LifeLimit`].
fn plan(
    lease: &Lease,
    extension: &Extension,
    hold: Option<KeyValue>,
    record: Option<KeyValue>,
    now: u64,
) -> Result<Plan, LeaseError> {
    let key = lease.key();
    let name = key.name().to_owned();
    let id = lease_id(lease.owner(), key.name());
    // The owner check: the hold is on the owner's etcd lease, under the holder's label.
    let Some((hold, owner, holding)) = hold.and_then(|kv| {
        let (owner, _, holding) = parse_hold(&kv)?;
        Some((kv, owner, holding))
    }) else {
        return Err(LeaseError::Expired { name });
    };
    if owner != *lease.owner() || hold.lease() != id || holding.holder != extension.holder {
        return Err(LeaseError::Expired { name });
    }
    let ttl_ms = extension.ttl.as_millis() as u64;
    let token = holding.fencing_token.0;
    // The record of this grant, or none yet: the grant was its first expiry less the TTL.
    let recorded = record
        .as_ref()
        .and_then(|kv| kv.value_str().ok())
        .and_then(parse_record)
        .filter(|&(for_token, _, _)| for_token == token);
    let (granted_at, extensions) = recorded.map_or(
        (holding.expires_at_ms.saturating_sub(ttl_ms), 0),
        |(_, granted_at, extensions)| (granted_at, extensions),
    );
    if extensions >= extension.max_extensions {
        return Err(LeaseError::ExtensionLimit {
            name,
            limit: extension.max_extensions,
        });
    }
    // A TTL from now, never past the grant's last moment, never sooner than now.
    let last = granted_at + extension.max_life.as_millis() as u64;
    if last <= holding.expires_at_ms {
        return Err(LeaseError::LifeLimit {
            name,
            max_life: extension.max_life,
        });
    }
    let expires_at_ms = (now + ttl_ms).min(last).max(holding.expires_at_ms);
    let record_key = key.extension_key();
    let record_compare = match &record {
        Some(kv) => Compare::mod_revision(record_key.clone(), CompareOp::Equal, kv.mod_revision()),
        None => Compare::version(record_key.clone(), CompareOp::Equal, 0),
    };
    let value = hold_value(lease.owner(), expires_at_ms, &holding.holder);
    let record_value = format!("{token} {granted_at} {}", extensions + 1);
    Ok(Plan {
        expires_at_ms,
        extensions: extensions + 1,
        compares: [
            Compare::lease(key.lease_key(), CompareOp::Equal, id),
            Compare::mod_revision(key.lease_key(), CompareOp::Equal, hold.mod_revision()),
            record_compare,
        ],
        puts: [
            TxnOp::put(
                key.lease_key(),
                value,
                Some(PutOptions::new().with_ignore_lease()),
            ),
            TxnOp::put(
                record_key,
                record_value,
                Some(PutOptions::new().with_lease(id)),
            ),
        ],
    })
}

/// An extension record, `"<fencing token> <granted_at_ms> <extensions>"`.
fn parse_record(value: &str) -> Option<(u64, u64, u32)> {
    let mut parts = value.split(' ');
    let token = parts.next()?.parse().ok()?;
    let granted_at = parts.next()?.parse().ok()?;
    let extensions = parts.next()?.parse().ok()?;
    Some((token, granted_at, extensions))
}

/// Restarts `lease`'s etcd lease at its granted TTL. [`LeaseError::Expired`] if etcd
/// says it is gone.
async fn keep_alive(store: &EtcdStore, lease: &Lease) -> Result<(), LeaseError> {
    let id = lease_id(lease.owner(), lease.key().name());
    let kept = store
        .call(|mut client| async move { client.lease_keep_alive(id).await })
        .await;
    match kept {
        Ok(_) => Ok(()),
        Err(etcd_client::Error::LeaseKeepAliveError(_)) => Err(LeaseError::Expired {
            name: lease.key().name().to_owned(),
        }),
        Err(err) => Err(err.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_parse_back() {
        assert_eq!(
            parse_record("41 1700000000000 3"),
            Some((41, 1_700_000_000_000, 3))
        );
        assert_eq!(parse_record("41 x 3"), None);
    }
}
