//! Grants on etcd: one etcd lease per resource, then one txn that creates every key of
//! the hold if none exists (create-if-absent: `create_revision == 0`), none is retired,
//! and, under a per-holder limit, the holder's limited holds did not change since they
//! were counted. The txn's revision is every key's create revision: the fencing token.
//!
//! A grant with a time before which nothing is granted (`Grant::not_before_ms`, an
//! event's on-sale) also compares the group's opening key `lease:{group}:~on-sale` in the
//! txn: it must hold that time. etcd has no clock to ask, so the key is the clock: the
//! first process whose own clock has passed the time writes it, and from then on every
//! grant of every process finds the sale open; before it, every one is refused.

use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, GetOptions, LeaseGrantOptions, PutOptions, Txn, TxnOp, TxnOpResponse,
};
use futures_util::future::try_join_all;

use super::{
    ETCD_MAX_KEYS_PER_HOLD, ETCD_TTL_LIMITS, EtcdStore, held_by_prefix, hold_value, lease_id,
    now_ms, parse_hold, retired_key,
};
use crate::error::LeaseError;
use crate::lease::{self, Grant, Lease, TtlLimits};
use crate::store::check_grant_without_room;
use crate::token::{FencingToken, OwnerToken};

/// [`crate::LeaseStore::acquire_all`] on etcd (see the module docs). The etcd leases
/// granted for a refused request are revoked before it returns. etcd keeps no waiting
/// room, so a grant with an admission is refused before anything is sent.
pub(super) async fn acquire_all(
    store: &EtcdStore,
    grant: &Grant,
) -> Result<Vec<Lease>, LeaseError> {
    check_grant_without_room(grant, "etcd", ETCD_TTL_LIMITS)?;
    let (keys, ttl) = (&grant.keys, grant.ttl);
    if keys.len() > ETCD_MAX_KEYS_PER_HOLD {
        return Err(LeaseError::TooManyKeys {
            keys: keys.len(),
            limit: ETCD_MAX_KEYS_PER_HOLD,
        });
    }
    let owner = OwnerToken::random();
    let ids: Vec<i64> = keys
        .iter()
        .map(|key| lease_id(&owner, key.name()))
        .collect();
    let sent_at = tokio::time::Instant::now();
    let grants = ids.iter().map(|&id| async move {
        let granted = store
            .call(|mut client| async move {
                let options = LeaseGrantOptions::new().with_id(id);
                client
                    .lease_grant(ttl.as_secs() as i64, Some(options))
                    .await
            })
            .await;
        match granted {
            // A grant sent again after its answer was lost.
            Err(etcd_client::Error::GRpcStatus(status))
                if status.message().contains("lease already exists") =>
            {
                Ok(None)
            }
            other => other.map(|granted| Some(granted.ttl())),
        }
    });
    let granted = try_join_all(grants).await?;
    // etcd lengthens a lease below its minimum and says so only in the reply's TTL.
    if let Some(refused) = granted
        .into_iter()
        .flatten()
        .find_map(|secs| granted_as_asked(ttl, secs).err())
    {
        for id in ids {
            store.revoke(id).await?;
        }
        return Err(refused);
    }
    let expires_at_ms = now_ms() + ttl.as_millis() as u64;
    let answer = create_all(store, grant, &ids, &owner, expires_at_ms).await;
    let Ok(fencing_token) = answer else {
        for id in ids {
            store.revoke(id).await?;
        }
        return Err(answer.unwrap_err());
    };
    Ok(lease::granted(
        keys,
        &owner,
        fencing_token,
        ttl,
        expires_at_ms,
        sent_at,
    ))
}

/// `Ok` when etcd granted `granted_secs` for a lease asked for `ttl`; else
/// [`LeaseError::TtlNotExpressible`], the granted TTL as etcd's minimum (etcd#6025: it
/// follows the election timeout).
pub(super) fn granted_as_asked(ttl: Duration, granted_secs: i64) -> Result<(), LeaseError> {
    if granted_secs <= ttl.as_secs() as i64 {
        return Ok(());
    }
    Err(LeaseError::TtlNotExpressible {
        store: "etcd",
        ttl,
        limits: TtlLimits {
            min: Duration::from_secs(granted_secs as u64),
            step: ETCD_TTL_LIMITS.step,
        },
    })
}

/// The create-if-absent txn, retried while only the holder's limited holds changed under
/// it (another grant to the same holder raced this one; the count is read again).
async fn create_all(
    store: &EtcdStore,
    grant: &Grant,
    ids: &[i64],
    owner: &OwnerToken,
    expires_at_ms: u64,
) -> Result<FencingToken, LeaseError> {
    let (keys, holder, limit) = (&grant.keys, grant.holder.as_str(), grant.limit);
    let group = keys[0].group();
    let value = hold_value(owner, expires_at_ms, holder);
    let opening = grant
        .not_before_ms
        .map(|ms| (opening_key(group), ms.to_string()));
    loop {
        let mut when = Vec::new();
        let mut then = Vec::new();
        let mut otherwise = Vec::new();
        for (key, &id) in keys.iter().zip(ids) {
            when.push(Compare::create_revision(
                key.lease_key(),
                CompareOp::Equal,
                0,
            ));
            when.push(Compare::create_revision(
                retired_key(key),
                CompareOp::Equal,
                0,
            ));
            then.push(TxnOp::put(
                key.lease_key(),
                value.clone(),
                Some(PutOptions::new().with_lease(id)),
            ));
            otherwise.push(TxnOp::get(key.lease_key(), None));
            otherwise.push(TxnOp::get(retired_key(key), None));
        }
        if let Some(limit) = limit {
            let prefix = held_by_prefix(group, holder);
            let options = GetOptions::new().with_prefix().with_count_only();
            let counted = store.get(prefix.clone(), Some(options)).await?;
            let held = counted.count() as u64;
            if held + keys.len() as u64 > limit.max(1) {
                return Err(LeaseError::OverLimit {
                    held,
                    limit: limit.max(1),
                });
            }
            let read_at = counted.header().map_or(0, |h| h.revision());
            // A hold of this holder created or changed since the count fails the txn.
            when.push(
                Compare::mod_revision(prefix.clone(), CompareOp::Less, read_at + 1).with_prefix(),
            );
            for (key, &id) in keys.iter().zip(ids) {
                let entry = format!("{prefix}{}", key.name());
                then.push(TxnOp::put(
                    entry,
                    "",
                    Some(PutOptions::new().with_lease(id)),
                ));
            }
        }
        if let Some((key, at)) = &opening {
            when.push(Compare::value(key.clone(), CompareOp::Equal, at.clone()));
            otherwise.push(TxnOp::get(key.clone(), None));
        }
        let reply = store
            .txn(Txn::new().when(when).and_then(then).or_else(otherwise))
            .await?;
        if reply.succeeded() {
            let revision = reply.header().map_or(0, |h| h.revision());
            return Ok(FencingToken(revision as u64));
        }
        let reads = reply.op_responses();
        if let Some((key, at)) = &opening
            && found(&reads, 2 * keys.len()).is_none_or(|kv| kv.value() != at.as_bytes())
        {
            let not_before_ms = grant.not_before_ms.unwrap_or_default();
            if now_ms() < not_before_ms {
                return Err(LeaseError::NotYet { not_before_ms });
            }
            // This process's clock says the sale is open: open it for every process.
            store
                .txn(Txn::new().and_then([TxnOp::put(key.clone(), at.clone(), None)]))
                .await?;
            continue;
        }
        if let Some(granted) = refusal(&reads[..2 * keys.len()], owner)? {
            return Ok(granted);
        }
    }
}

/// `lease:{group}:~on-sale`: the group's opening key, holding the time (Unix ms) before
/// which nothing is granted once a process's clock has passed it (see the module docs).
fn opening_key(group: &str) -> String {
    format!("lease:{{{group}}}:~on-sale")
}

/// The key-value the txn's `or_else` read number `i` found, if any.
pub(super) fn found(reads: &[TxnOpResponse], i: usize) -> Option<etcd_client::KeyValue> {
    match reads.get(i) {
        Some(TxnOpResponse::Get(get)) => get.kvs().first().cloned(),
        _ => None,
    }
}

/// Why the txn was refused, from its `or_else` reads (per key: the hold, the retirement):
/// [`LeaseError::Retired`] or [`LeaseError::Held`]. `Ok(Some(token))` when the hold found
/// is the caller's own (`owner`): the txn was sent again after its first answer was lost
/// ([`EtcdStore::call`]), and the first one granted it. `Ok(None)` when neither, i.e.
/// only the holder's limited holds changed.
fn refusal(
    reads: &[TxnOpResponse],
    owner: &OwnerToken,
) -> Result<Option<FencingToken>, LeaseError> {
    for pair in 0..reads.len() / 2 {
        if let Some(kv) = found(reads, 2 * pair)
            && let Some((holds, _, holding)) = parse_hold(&kv)
        {
            if holds == *owner {
                return Ok(Some(holding.fencing_token));
            }
            return Err(LeaseError::Held {
                holder: holding.holder,
                remaining: Duration::from_millis(holding.expires_at_ms.saturating_sub(now_ms())),
            });
        }
        if found(reads, 2 * pair + 1).is_some() {
            return Err(LeaseError::Retired);
        }
    }
    Ok(None)
}
