//! Grants on ZooKeeper: the lock recipe of ephemeral sequential znodes, tried once.
//!
//! 1. Read what is there: a seat retired or held refuses at once, before a session is
//!    made (the common refusal costs two reads).
//! 2. A new session with the hold's TTL as its timeout ([`ZooKeeperStore`]).
//! 3. One `multi` on that session: per seat, check the seat is not retired (its version is
//!    0) and create `h-<owner>-` ephemeral sequential under it, and the holder's entry;
//!    with a per-holder limit, a `setData` of the holder's folder at the version counted
//!    (another grant to the same holder meanwhile fails it: counted again); with an
//!    on-sale, check its opening znode exists. All or none, one zxid: one fencing token.
//! 4. Read every seat's children on that session: the grant holds if its znode is the
//!    lowest under every seat. If not, another contender created first: ours are deleted
//!    and the grant is refused, [`LeaseError::Held`] by the lowest's holder.
//!
//! Holds are try-once (a buyer who finds a seat taken is told so, not queued), so no
//! waiter watches its predecessor: the recipe's queue is only the order that settles a
//! race. A refused contender's znode lives the few milliseconds between steps 3 and 4;
//! a grant that reads it as the lowest then is refused too (both refused, never both
//! granted).

use std::time::Duration;

use zookeeper_client::{Acls, Client, CreateMode, MultiWriteError, MultiWriteResult};

use super::{
    HoldData, ZK_TTL_LIMITS, ZooKeeperStore, group_path, held_by_entry, held_by_path, now_ms,
    seat_path,
};
use crate::error::LeaseError;
use crate::lease::{Grant, Lease, granted};
use crate::store::check_grant_without_room;
use crate::token::{FencingToken, OwnerToken};

/// Operations per seat in the grant's `multi`: the retirement check, the hold, the
/// holder's entry.
const OPS_PER_SEAT: usize = 3;

/// [`crate::LeaseStore::acquire_all`] on ZooKeeper (see the module docs). ZooKeeper
/// keeps no waiting room, so a grant with an admission is refused before anything is
/// sent.
pub(super) async fn acquire_all(
    store: &ZooKeeperStore,
    grant: &Grant,
) -> Result<Vec<Lease>, LeaseError> {
    check_grant_without_room(grant, "zookeeper", ZK_TTL_LIMITS)?;
    let (keys, ttl, holder) = (&grant.keys, grant.ttl, grant.holder.as_str());
    let group = keys[0].group();
    let seats: Vec<String> = keys.iter().map(seat_path).collect();
    refuse_if_taken(store, &seats).await?;
    let held_by = held_by_path(group, holder);
    loop {
        let client = store.client().await?;
        let (live, version) = holder_entries(store, &client, &held_by).await?;
        if let Some(limit) = grant.limit
            && live + keys.len() as u64 > limit.max(1)
        {
            return Err(LeaseError::OverLimit {
                held: live,
                limit: limit.max(1),
            });
        }
        let opening = match grant.not_before_ms {
            Some(ms) => Some(open(store, &client, group, ms).await?),
            None => None,
        };
        let owner = OwnerToken::random();
        let session = store.hold_session(ttl).await?;
        let sent_at = tokio::time::Instant::now();
        let now = now_ms();
        let data = HoldData {
            owner: owner.clone(),
            expires_at_ms: now + ttl.as_millis() as u64,
            granted_at_ms: now,
            extensions: 0,
            holder: holder.to_owned(),
        };
        let mut writer = session.new_multi_writer();
        let ephemeral_sequential = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        for (key, seat) in keys.iter().zip(&seats) {
            writer.add_check_version(seat, 0)?;
            let prefix = format!("{seat}/h-{}-", owner.as_str());
            writer.add_create(&prefix, &data.to_bytes(), &ephemeral_sequential)?;
            writer.add_create(&held_by_entry(key, holder, &owner), b"", &ephemeral)?;
        }
        if grant.limit.is_some() {
            writer.add_set_data(&held_by, b"", Some(version))?;
        }
        if let Some(opening) = &opening {
            writer.add_check_version(opening, -1)?;
        }
        let created = match store.within_multi_raw(writer.commit()).await? {
            Ok(results) => results,
            Err(MultiWriteError::OperationFailed { index, source }) => {
                if index < keys.len() * OPS_PER_SEAT
                    && index % OPS_PER_SEAT == 0
                    && source == zookeeper_client::Error::BadVersion
                {
                    return Err(LeaseError::Retired);
                }
                // The holder's folder changed since counted (another grant to the same
                // holder), or a seat or folder was removed: count and create again.
                continue;
            }
            Err(MultiWriteError::RequestFailed { source }) => return Err(source.into()),
        };
        let ours: Vec<(String, zookeeper_client::Stat)> = created
            .into_iter()
            .skip(1)
            .step_by(OPS_PER_SEAT)
            .take(keys.len())
            .filter_map(|result| match result {
                MultiWriteResult::Create { path, stat } => Some((path, stat)),
                _ => None,
            })
            .collect();
        let paths: Vec<String> = ours.iter().map(|(path, _)| path.clone()).collect();
        if paths.len() != keys.len() {
            return Err(LeaseError::ZooKeeper(
                zookeeper_client::Error::UnexpectedError(format!(
                    "a grant's multi created {} holds for {} seats",
                    paths.len(),
                    keys.len()
                )),
            ));
        }
        // Ours lowest under every seat: held. Else the winner's hold names the refusal.
        let lowest = store.lowest_on(&session, &seats).await?;
        if lowest
            .iter()
            .zip(&paths)
            .any(|(low, ours)| low.as_ref() != Some(ours))
        {
            let holds = store.read_holds_on(&session, &seats).await?;
            let winner = holds
                .iter()
                .zip(&paths)
                .find_map(|(hold, path)| match hold {
                    Some(hold) if hold.path == *path => None,
                    other => Some(other.clone()),
                })
                .flatten();
            withdraw(store, &session, &paths, keys, holder, &owner).await?;
            return Err(held(winner.as_ref()));
        }
        // The create's stat carries the zxid; a server that answers a multi's create
        // without one (ZOOKEEPER-4026) is asked.
        let czxid = match ours.first() {
            Some((_, stat)) if !stat.is_invalid() => stat.czxid,
            _ => {
                let stat = store.within(session.check_stat(&paths[0])).await?;
                stat.map_or(0, |stat| stat.czxid)
            }
        };
        let fencing_token = FencingToken(czxid as u64);
        store.keep_session(&owner, session.session().clone(), ttl);
        return Ok(granted(
            keys,
            &owner,
            fencing_token,
            ttl,
            data.expires_at_ms,
            sent_at,
        ));
    }
}

/// Step 1: [`LeaseError::Retired`] or [`LeaseError::Held`] if any seat is; creates the
/// seats' znodes that do not exist yet (persistent: a retirement stays).
async fn refuse_if_taken(store: &ZooKeeperStore, seats: &[String]) -> Result<(), LeaseError> {
    let client = store.client().await?;
    let mut reader = client.new_multi_reader();
    for seat in seats {
        reader.add_get_data(seat)?;
    }
    let anyone = CreateMode::Persistent.with_acls(Acls::anyone_all());
    for (seat, read) in seats.iter().zip(store.within(reader.commit()).await?) {
        match read {
            zookeeper_client::MultiReadResult::Data { stat, .. } if stat.version > 0 => {
                return Err(LeaseError::Retired);
            }
            zookeeper_client::MultiReadResult::Data { .. } => {}
            _ => store.within(client.mkdir(seat, &anyone)).await?,
        }
    }
    if let Some(hold) = store
        .read_holds_on(&client, seats)
        .await?
        .into_iter()
        .flatten()
        .next()
    {
        return Err(held(Some(&hold)));
    }
    Ok(())
}

/// How many live holds the holder's folder lists, and its data version (made if
/// absent).
async fn holder_entries(
    store: &ZooKeeperStore,
    client: &Client,
    held_by: &str,
) -> Result<(u64, i32), LeaseError> {
    match store.within(client.get_children(held_by)).await {
        Ok((children, stat)) => Ok((children.len() as u64, stat.version)),
        Err(LeaseError::ZooKeeper(zookeeper_client::Error::NoNode)) => {
            let anyone = CreateMode::Persistent.with_acls(Acls::anyone_all());
            store.within(client.mkdir(held_by, &anyone)).await?;
            Ok((0, 0))
        }
        Err(err) => Err(err),
    }
}

/// The group's opening znode for `not_before_ms`, made by the first process whose own
/// clock has passed it. [`LeaseError::NotYet`] before then, if nobody opened it yet.
async fn open(
    store: &ZooKeeperStore,
    client: &Client,
    group: &str,
    not_before_ms: u64,
) -> Result<String, LeaseError> {
    let opening = format!("{}/~on-sale-{not_before_ms}", group_path(group));
    if store.within(client.check_stat(&opening)).await?.is_some() {
        return Ok(opening);
    }
    if now_ms() < not_before_ms {
        return Err(LeaseError::NotYet { not_before_ms });
    }
    let anyone = CreateMode::Persistent.with_acls(Acls::anyone_all());
    store.within(client.mkdir(&opening, &anyone)).await?;
    Ok(opening)
}

/// Deletes a refused grant's znodes (its holds and holder entries), on its session.
async fn withdraw(
    store: &ZooKeeperStore,
    session: &Client,
    ours: &[String],
    keys: &[crate::keys::LeaseKey],
    holder: &str,
    owner: &OwnerToken,
) -> Result<(), LeaseError> {
    let mut writer = session.new_multi_writer();
    for (path, key) in ours.iter().zip(keys) {
        writer.add_delete(path, None)?;
        writer.add_delete(&held_by_entry(key, holder, owner), None)?;
    }
    store
        .within_multi_raw(writer.commit())
        .await?
        .map_err(zookeeper_client::Error::from)?;
    Ok(())
}

/// The refusal for a seat held by `winner` (or by a contender whose hold was gone by
/// the time it was read: no label, no time).
fn held(winner: Option<&super::Hold>) -> LeaseError {
    match winner {
        Some(hold) => LeaseError::Held {
            holder: hold.data.holder.clone(),
            remaining: Duration::from_millis(hold.data.expires_at_ms.saturating_sub(now_ms())),
        },
        None => LeaseError::Held {
            holder: String::new(),
            remaining: Duration::ZERO,
        },
    }
}
