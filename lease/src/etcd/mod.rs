//! The etcd lease store: [`EtcdStore`], a [`LeaseStore`] on an etcd cluster, where every
//! grant is committed by a majority of the members before it is acknowledged (the
//! article's step 5, "a store that survives", done by consensus instead of a ledger).
//!
//! | what | etcd |
//! |---|---|
//! | a hold | an etcd lease (whole seconds, [`ETCD_TTL_LIMITS`]) plus a create-if-absent txn on the seat's key, attached to that lease |
//! | owner token | a random [`OwnerToken`] in the key's value; the etcd lease id is derived from it and the resource name (FNV-1a of both), so only the owner can name its lease |
//! | fencing token | the key's create revision: global, durable, strictly increasing (etcd's own docs call the revision a fencing token); no ledger |
//! | group hold | one etcd lease per resource, all keys created in one txn (one revision: one fencing token for all) |
//! | release | revoke of the owner's etcd lease, which deletes the key attached to it (the owner check: only the owner can name that lease) |
//! | renew | keep-alive of the owner's lease, then an owner-checked rewrite of the recorded expiry |
//! | extend ("Need more time?") | one read, one txn comparing each hold's etcd lease and revision and its extension record, then a keep-alive of each (`extend.rs`) |
//! | retire | owner-checked delete plus a `~retired:<name>` key without lease, which every grant's txn requires absent |
//! | not before (an on-sale) | the group's `~on-sale` key, which a grant's txn requires to hold that time; the first process whose own clock passed it writes it (`grant.rs`) |
//! | changes | a watch on the groups' key prefix; a lapse is a delete by etcd |
//!
//! Keys: `lease:{group}:<name>` (value `"<owner token> <expires_at_ms> <holder label>"`),
//! `lease:{group}:~retired:<name>`, and with a per-holder limit
//! `lease:{group}:~held-by:<hex holder>:<name>` on the same etcd lease as the hold.
//!
//! Clocks: etcd has no clock API. `expires_at_ms` is this process's clock at the grant
//! or renewal plus the TTL (the etcd lease itself is timed by the leader; after a leader
//! change etcd restarts each lease's TTL in full, so a hold can outlast `expires_at_ms`,
//! never end before it).
//!
//! Round trips: acquire 2 (the lease grants, sent concurrently, then the txn; 3 with a
//! limit, which first counts the holder's keys), release 1 (revoke), renew 3
//! (keep-alive, read, txn), retire 2, holders 1, owned_by 1, is_held 1, remaining 2,
//! extend_all 2 plus one keep-alive per hold.

mod extend;
mod grant;
mod watch;

use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    AlarmAction, AlarmType, Client, Compare, CompareOp, ConnectOptions, GetOptions, KeyValue, Txn,
    TxnOp,
};

use crate::error::LeaseError;
use crate::keys::LeaseKey;
use crate::lease::{Extended, Extension, Grant, GroupSnapshot, Holding, Lease, TtlLimits};
use crate::store::{LeaseChanges, LeaseStore, record_renewal};
use crate::token::{FencingToken, OwnerToken};

/// How often an idle connection to etcd is pinged (HTTP/2 keep-alive), so a member that
/// stopped answering is noticed within this plus the store timeout. Not less than etcd's
/// `--grpc-keepalive-min-time` (5 s by default): a client that pings more often is sent
/// `GOAWAY` (`too_many_pings`) and its connection closed, which ends every watch on it
/// (with 1 s pings, the change stream ended every ~4 s).
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(6);

/// etcd lease TTLs: whole seconds, at least 2 s. etcd raises a shorter lease to its
/// minimum (1.5 × the election timeout, rounded up: 2 s with the default 1 s), so a
/// shorter TTL would silently last longer than asked.
pub const ETCD_TTL_LIMITS: TtlLimits = TtlLimits {
    min: Duration::from_secs(2),
    step: Duration::from_secs(1),
};

/// The most seats (resources) one group hold takes on etcd: its txn compares two keys
/// per resource plus one for the holder limit and one for the on-sale (128 in all), and
/// etcd refuses a txn of more than 128 operations in any of its lists (its default
/// `--max-txn-ops`).
pub const ETCD_MAX_KEYS_PER_HOLD: usize = 63;

/// How many request attempts fit in the store timeout: each attempt may take this share
/// of it ([`EtcdStore::call`]). The client spreads requests over the members and keeps
/// sending some to a member that hangs (a stopped process: its port accepts, nothing is
/// answered), where an attempt waits its whole timeout; a quarter leaves time to send
/// the request again to another member within the caller's timeout.
const ATTEMPTS_PER_TIMEOUT: u32 = 4;

/// A [`LeaseStore`] on an etcd cluster (etcd v3 API, 3.4 or later). Cheap to share
/// behind an `Arc`; every method is `&self`.
#[derive(Clone)]
pub struct EtcdStore {
    client: Client,
    /// How long a request is sent again while etcd is unreachable or electing a leader
    /// ([`EtcdStore::call`]): the `timeout` given to [`EtcdStore::connect`].
    retry_for: Duration,
}

impl EtcdStore {
    /// Connects to the cluster named by `url`, `etcd://host:port,host:port,…` (one
    /// member or several: requests go to any member, which forwards writes to the
    /// leader). Members are connected lazily: with none reachable, the store is made and
    /// its requests fail ([`LeaseStore::ping`] says so). `timeout` bounds connecting, and
    /// how long a request is sent again while etcd is unavailable or a member does not
    /// answer; each attempt may take `timeout / ATTEMPTS_PER_TIMEOUT` (4).
    /// Errors: [`LeaseError::Etcd`] for a malformed URL.
    pub async fn connect(url: &str, timeout: Duration) -> Result<Self, LeaseError> {
        let endpoints = endpoints(url)?;
        let options = ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_timeout(timeout / ATTEMPTS_PER_TIMEOUT)
            .with_keep_alive(KEEP_ALIVE_INTERVAL, timeout)
            .with_require_leader(true);
        let client = Client::connect(endpoints, Some(options)).await?;
        Ok(EtcdStore {
            client,
            retry_for: timeout,
        })
    }

    /// The etcd client, for callers that want to run requests of their own on it.
    pub fn client(&self) -> Client {
        self.client.clone()
    }
}

/// The endpoints (`http://host:port`) of an `etcd://host:port,host:port` URL. Errors:
/// another scheme, or no host.
pub fn endpoints(url: &str) -> Result<Vec<String>, LeaseError> {
    let invalid = || {
        LeaseError::Etcd(etcd_client::Error::InvalidArgs(format!(
            "{url:?} is not an etcd URL: expected etcd://host:port[,host:port…]"
        )))
    };
    let hosts = url.strip_prefix("etcd://").ok_or_else(invalid)?;
    let endpoints: Vec<String> = hosts
        .trim_end_matches('/')
        .split(',')
        .filter(|host| !host.is_empty())
        .map(|host| format!("http://{host}"))
        .collect();
    if endpoints.is_empty() {
        return Err(invalid());
    }
    Ok(endpoints)
}

/// The etcd lease id of `owner`'s hold on resource `name`: FNV-1a (64 bit) of both,
/// made positive and non-zero (etcd's 0 means "pick one"). Derived, not stored, so a
/// [`Lease`] rebuilt from its parts can still renew and release; only the owner token's
/// holder can compute it.
pub(crate) fn lease_id(owner: &OwnerToken, name: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in owner.as_str().bytes().chain([0]).chain(name.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    ((hash >> 1) | 1) as i64
}

/// `lease:{group}:~retired:<name>`: present once the resource is retired for good.
fn retired_key(key: &LeaseKey) -> String {
    format!("lease:{{{}}}:~retired:{}", key.group(), key.name())
}

/// `lease:{group}:~held-by:<hex holder>:`: the prefix of `holder`'s limited holds in the
/// group (hex, so that no label is a prefix of another's keys).
fn held_by_prefix(group: &str, holder: &str) -> String {
    let hex: String = holder.bytes().map(|b| format!("{b:02x}")).collect();
    format!("lease:{{{group}}}:~held-by:{hex}:")
}

/// `lease:{group}:`: every key of a group.
fn group_prefix(group: &str) -> String {
    format!("lease:{{{group}}}:")
}

/// This process's clock, Unix milliseconds.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A hold's value: `"<owner token> <expires_at_ms> <holder label>"`.
fn hold_value(owner: &OwnerToken, expires_at_ms: u64, holder: &str) -> String {
    format!("{} {expires_at_ms} {holder}", owner.as_str())
}

/// A hold read back: its owner token and its [`Holding`] (the fencing token is the key's
/// create revision). `None` for a key that is not a hold or a value that does not parse.
fn parse_hold(kv: &KeyValue) -> Option<(OwnerToken, LeaseKey, Holding)> {
    let key = LeaseKey::from_lease_key(kv.key_str().ok()?)?;
    let mut parts = kv.value_str().ok()?.splitn(3, ' ');
    let owner = OwnerToken::from_string(parts.next()?.to_owned());
    let expires_at_ms = parts.next()?.parse().ok()?;
    let holding = Holding {
        name: key.name().to_owned(),
        holder: parts.next().unwrap_or_default().to_owned(),
        fencing_token: FencingToken(kv.create_revision() as u64),
        expires_at_ms,
    };
    Some((owner, key, holding))
}

/// Whether `err` means the request may not have reached a member that could serve it:
/// gRPC UNAVAILABLE (a member that is gone, or no leader: "etcdserver: no leader"), the
/// attempt's own timeout (tonic's CANCELLED "Timeout expired": a member that hangs), or
/// a transport failure.
fn unavailable(err: &etcd_client::Error) -> bool {
    match err {
        etcd_client::Error::GRpcStatus(status) => {
            status.code() == tonic::Code::Unavailable
                || (status.code() == tonic::Code::Cancelled
                    && status.message() == "Timeout expired")
        }
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        _ => false,
    }
}

impl EtcdStore {
    /// Runs `request` on a client handle, and again every 50 ms while etcd is
    /// [`unavailable`], for at most `retry_for`: after a member dies the client's balanced
    /// channel still sends some requests to it until it notices, it keeps sending some to
    /// a member that hangs (each then times out, [`ATTEMPTS_PER_TIMEOUT`]), and a new
    /// leader takes about a second to be elected. Every request here is safe to send twice: a grant
    /// finds its own hold (`grant.rs`), an owner-checked delete or rewrite does nothing
    /// the second time (release and retire then answer `false`: a retried release
    /// cannot tell its own delete from a lapse).
    async fn call<T, F, Fut>(&self, request: F) -> Result<T, etcd_client::Error>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        let deadline = tokio::time::Instant::now() + self.retry_for;
        loop {
            match request(self.client.clone()).await {
                Err(err) if unavailable(&err) && tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                answer => return answer,
            }
        }
    }

    /// Runs `txn` ([`EtcdStore::call`]).
    async fn txn(&self, txn: Txn) -> Result<etcd_client::TxnResponse, etcd_client::Error> {
        self.call(|mut client| {
            let txn = txn.clone();
            async move { client.txn(txn).await }
        })
        .await
    }

    /// Reads `key` ([`EtcdStore::call`]).
    async fn get(
        &self,
        key: String,
        options: Option<GetOptions>,
    ) -> Result<etcd_client::GetResponse, etcd_client::Error> {
        self.call(|mut client| {
            let (key, options) = (key.clone(), options.clone());
            async move { client.get(key, options).await }
        })
        .await
    }

    /// The hold on `key` as stored, if any.
    async fn read_hold(
        &self,
        key: &LeaseKey,
    ) -> Result<Option<(OwnerToken, Holding, i64)>, LeaseError> {
        let reply = self.get(key.lease_key(), None).await?;
        Ok(reply
            .kvs()
            .first()
            .and_then(|kv| parse_hold(kv).map(|(owner, _, holding)| (owner, holding, kv.lease()))))
    }

    /// Revokes the etcd lease `id`, deleting whatever is still attached to it, in one
    /// raft entry. Returns whether it was there: a lease that is already gone (it
    /// lapsed, or was revoked) is `false`, not an error.
    async fn revoke(&self, id: i64) -> Result<bool, LeaseError> {
        let revoked = self
            .call(|mut client| async move { client.lease_revoke(id).await })
            .await;
        match revoked {
            Ok(_) => Ok(true),
            // etcd's answer for a lease that no longer exists (gRPC NOT_FOUND).
            Err(etcd_client::Error::GRpcStatus(status))
                if status.message().contains("lease not found") =>
            {
                Ok(false)
            }
            Err(err) => Err(err.into()),
        }
    }

    /// Owner-checked delete of `lease`'s key (and its holder-limit entry), with `also`
    /// run in the same txn whether or not the caller owned it; then revokes the owner's
    /// etcd lease. Returns whether the key was the caller's.
    async fn delete_owned(&self, lease: &Lease, also: Vec<TxnOp>) -> Result<bool, LeaseError> {
        let key = lease.key();
        let id = lease_id(lease.owner(), key.name());
        let mut owned = vec![TxnOp::delete(key.lease_key(), None)];
        owned.extend(also.iter().cloned());
        let txn = Txn::new()
            .when([Compare::lease(key.lease_key(), CompareOp::Equal, id)])
            .and_then(owned)
            .or_else(also);
        let deleted = self.txn(txn).await?.succeeded();
        self.revoke(id).await?;
        Ok(deleted)
    }
}

#[async_trait]
impl LeaseStore for EtcdStore {
    fn name(&self) -> &'static str {
        "etcd"
    }

    fn ttl_limits(&self) -> TtlLimits {
        ETCD_TTL_LIMITS
    }

    async fn check_ttl(&self, ttl: Duration) -> Result<(), LeaseError> {
        ETCD_TTL_LIMITS.check("etcd", ttl)?;
        // One lease asked for and revoked at once: what etcd makes of the TTL.
        let granted = self
            .call(|mut client| async move { client.lease_grant(ttl.as_secs() as i64, None).await })
            .await;
        let Ok(granted) = granted else {
            return Ok(()); // not answering: each grant checks again
        };
        self.revoke(granted.id()).await?;
        grant::granted_as_asked(ttl, granted.ttl())
    }

    fn max_keys_per_hold(&self) -> Option<usize> {
        Some(ETCD_MAX_KEYS_PER_HOLD)
    }

    fn one_clock(&self) -> bool {
        false
    }

    async fn acquire_all(&self, grant: &Grant) -> Result<Vec<Lease>, LeaseError> {
        grant::acquire_all(self, grant).await
    }

    async fn release(&self, lease: &Lease) -> Result<bool, LeaseError> {
        // The compare-and-delete is the revoke itself: the etcd lease's id is derived from
        // the owner token, and revoking it deletes the keys attached to it (the hold, its
        // holder-limit entry) and no others. One raft write, where a txn then a revoke
        // were two.
        self.revoke(lease_id(lease.owner(), lease.key().name()))
            .await
    }

    async fn renew(&self, lease: &mut Lease) -> Result<bool, LeaseError> {
        let key = lease.key().clone();
        let id = lease_id(lease.owner(), key.name());
        let sent_at = tokio::time::Instant::now();
        // The client reads the first keep-alive answer itself and fails when etcd says
        // the lease is gone; the lease then has its granted TTL again.
        let kept = self
            .call(|mut client| async move { client.lease_keep_alive(id).await })
            .await;
        match kept {
            Ok(_) => {}
            Err(etcd_client::Error::LeaseKeepAliveError(_)) => return Ok(false),
            Err(err) => return Err(err.into()),
        }
        let Some((_, holding, _)) = self.read_hold(&key).await? else {
            return Ok(false);
        };
        // `ttl` is the granted TTL, or less for a lease recovered by `owned_by` (its
        // remaining time then): the recorded expiry is never later than etcd's.
        let expires_at_ms = now_ms() + lease.ttl.as_millis() as u64;
        let value = hold_value(lease.owner(), expires_at_ms, &holding.holder);
        let rewrite = TxnOp::put(
            key.lease_key(),
            value,
            Some(etcd_client::PutOptions::new().with_ignore_lease()),
        );
        let txn = Txn::new()
            .when([Compare::lease(key.lease_key(), CompareOp::Equal, id)])
            .and_then([rewrite]);
        let renewed = self.txn(txn).await?.succeeded();
        Ok(record_renewal(lease, renewed, expires_at_ms, sent_at))
    }

    async fn extend_all(
        &self,
        leases: &[Lease],
        extension: &Extension,
    ) -> Result<Extended, LeaseError> {
        extend::extend_all(self, leases, extension).await
    }

    async fn retire(&self, lease: &Lease) -> Result<bool, LeaseError> {
        let retire = TxnOp::put(retired_key(lease.key()), "", None);
        self.delete_owned(lease, vec![retire]).await
    }

    async fn holders(&self, group: &str) -> Result<GroupSnapshot, LeaseError> {
        let options = GetOptions::new().with_prefix();
        let reply = self.get(group_prefix(group), Some(options)).await?;
        Ok(GroupSnapshot {
            now_ms: now_ms(),
            holdings: reply
                .kvs()
                .iter()
                .filter_map(parse_hold)
                .map(|(_, _, holding)| holding)
                .collect(),
        })
    }

    async fn owned_by(&self, key: &LeaseKey, holder: &str) -> Result<Option<Lease>, LeaseError> {
        let sent_at = tokio::time::Instant::now();
        let now = now_ms();
        Ok(self
            .read_hold(key)
            .await?
            .filter(|(_, holding, _)| holding.holder == holder)
            .map(|(owner, holding, _)| Lease {
                key: key.clone(),
                owner,
                fencing_token: holding.fencing_token,
                ttl: Duration::from_millis(holding.expires_at_ms.saturating_sub(now)),
                expires_at_ms: holding.expires_at_ms,
                sent_at: Some(sent_at),
            }))
    }

    async fn is_held(&self, lease: &Lease) -> Result<bool, LeaseError> {
        let id = lease_id(lease.owner(), lease.key().name());
        Ok(self
            .read_hold(lease.key())
            .await?
            .is_some_and(|(owner, _, lease_id)| owner == *lease.owner() && lease_id == id))
    }

    async fn remaining(&self, key: &LeaseKey) -> Result<Option<Duration>, LeaseError> {
        let Some((_, _, id)) = self.read_hold(key).await? else {
            return Ok(None);
        };
        let reply = self
            .call(|mut client| async move { client.lease_time_to_live(id, None).await })
            .await?;
        Ok((reply.ttl() >= 0).then(|| Duration::from_secs(reply.ttl() as u64)))
    }

    /// A linearizable read of nothing (count only): it needs a leader and a quorum, as a
    /// grant does; sent again as every request is (`EtcdStore::call`), so a hung member
    /// the client happened to pick does not make the cluster look down. Then the
    /// cluster's alarms: a read answers while etcd is past its quota and refuses every
    /// write (etcd-io/etcd#8207), so a raised NOSPACE alarm is
    /// [`LeaseError::EtcdNoSpace`].
    async fn ping(&self) -> Result<(), LeaseError> {
        let options = GetOptions::new().with_count_only();
        self.get("lease:~ping".to_owned(), Some(options)).await?;
        let alarms = self
            .call(|mut client| async move {
                client.alarm(AlarmAction::Get, AlarmType::None, None).await
            })
            .await?;
        match alarms
            .alarms()
            .iter()
            .find(|alarm| alarm.alarm() == AlarmType::Nospace)
        {
            Some(alarm) => Err(LeaseError::EtcdNoSpace(format!(
                "member {:x} raised the NOSPACE alarm",
                alarm.member_id()
            ))),
            None => Ok(()),
        }
    }

    async fn changes(&self, group_prefix: &str) -> Result<LeaseChanges, LeaseError> {
        watch::changes(self, group_prefix).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_one_or_more_members() {
        assert_eq!(
            endpoints("etcd://127.0.0.1:2379,127.0.0.1:2380/").unwrap(),
            ["http://127.0.0.1:2379", "http://127.0.0.1:2380"]
        );
        assert!(endpoints("redis://127.0.0.1:6379/").is_err());
        assert!(endpoints("etcd://").is_err());
    }

    #[test]
    fn lease_ids_are_positive_and_differ_by_owner_and_resource() {
        let owner = OwnerToken::random();
        let other = OwnerToken::random();
        for id in [
            lease_id(&owner, "1"),
            lease_id(&owner, "2"),
            lease_id(&other, "1"),
        ] {
            assert!(id > 0);
        }
        assert_ne!(lease_id(&owner, "1"), lease_id(&owner, "2"));
        assert_ne!(lease_id(&owner, "1"), lease_id(&other, "1"));
        assert_eq!(lease_id(&owner, "1"), lease_id(&owner.clone(), "1"));
    }

    #[test]
    fn ttls_are_whole_seconds_from_two() {
        let check = |ms| {
            ETCD_TTL_LIMITS
                .check("etcd", Duration::from_millis(ms))
                .is_ok()
        };
        assert!(check(2_000) && check(600_000));
        assert!(!check(1_000) && !check(2_500) && !check(300));
    }
}
