//! [`LeaseError`]: why a lease operation failed, whichever store backs it.

use std::time::Duration;

use crate::lease::TtlLimits;

/// Why a lease operation failed. Callers usually map `Held` to "try again later",
/// `Retired` to "gone for good" (seatlock: sold), and `Unavailable`/`Ledger` to
/// "service unavailable". A lease that is gone is no error: `renew`, `release` and
/// `is_held` answer `false`, and a watchdog reports [`crate::WatchdogEvent::Lost`].
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Another holder has the lease. `holder` is the public label it gave (empty if the
    /// store no longer knows it), `remaining` the lease's remaining time (Redis `PTTL`).
    #[error("lease is held by {holder:?} for another {remaining:?}")]
    Held {
        /// Public label of the current holder.
        holder: String,
        /// Time left on the current holder's lease.
        remaining: Duration,
    },
    /// Redis did not answer or answered with an error: guarded work must stop.
    #[error("lease store unavailable: {0}")]
    Unavailable(#[source] redis::RedisError),
    /// Redis refused a write with `NOREPLICAS`: fewer replicas than its
    /// `min-replicas-to-write` are in sync with it (a primary cut off from its replicas,
    /// which a failover may be replacing). Nothing was written; the caller may try again
    /// once the replicas, or the Sentinels' new primary, are back (redis/redis#1083).
    #[error("Redis refused the write: too few replicas in sync (min-replicas-to-write): {0}")]
    TooFewReplicas(#[source] redis::RedisError),
    /// Redis answered, and refused the request or answered what this crate cannot read:
    /// `NOPERM` (the account's ACL forbids a command the store sends, such as `FCALL` or
    /// `FUNCTION LOAD`), or a reply of the wrong shape (another program registered a
    /// function under this crate's name). A setting to fix, not an outage to wait out.
    /// Nothing was written by this crate's scripts.
    #[error("Redis refused the request (its ACL, or a function of another program): {0}")]
    RedisRefused(#[source] redis::RedisError),
    /// The durable fence ledger could not reserve a block of tokens. Carries the
    /// ledger's own error ([`FenceLedger::Error`](crate::FenceLedger::Error)) as the source.
    #[error("fence ledger unavailable: {0}")]
    Ledger(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The resource was retired for good ([`LeaseStore::retire`](crate::LeaseStore::retire)): no lease on it is
    /// granted again. Nothing was written.
    #[error("the resource is retired: no lease on it is granted again")]
    Retired,
    /// `name`'s lease lapsed while a confirm was paying for it
    /// ([`LeaseStore::owned_by_paying`](crate::LeaseStore::owned_by_paying)): the resource
    /// *cools*, and nobody is granted it for `remaining` more, or until that confirm ends
    /// ([`LeaseStore::end_paying`](crate::LeaseStore::end_paying)). Nothing was granted
    /// or written. Redis only (`docs/time-to-pay.md`).
    #[error(
        "{name} is cooling: a payment for its lapsed lease is in flight for another {remaining:?}"
    )]
    Cooling {
        /// The resource that cools.
        name: String,
        /// The most it cools for from now (the marker's `until_ms` less the Redis time).
        remaining: Duration,
    },
    /// A holder limit passed to [`LeaseStore::acquire_all`](crate::LeaseStore::acquire_all) would be exceeded: the
    /// holder has `held` live leases in the group, and the request's keys on top of them
    /// would make more than `limit`. Nothing was granted or written.
    #[error("the holder has {held} leases in this group; the limit is {limit}")]
    OverLimit {
        /// The holder's live leases in the group, counted by Redis in the refusing script.
        held: u64,
        /// The limit asked for.
        limit: u64,
    },
    /// The grant named an admission that is not live in the group's waiting room
    /// ([`crate::room`]). It was never admitted, or it lapsed or ended. Nothing was
    /// granted or written.
    #[error("the holder has no live admission to this group's waiting room")]
    NotAdmitted,
    /// The grant asked for nothing before `not_before_ms` ([`Grant::not_before_ms`](crate::Grant::not_before_ms)),
    /// and the store's clock says it is earlier (on etcd: the group's opening key is not
    /// written yet, and this process's clock says it is too early to write it). Nothing
    /// was granted or written.
    #[error("nothing is granted before {not_before_ms} (Unix ms)")]
    NotYet {
        /// The time asked for, Unix milliseconds.
        not_before_ms: u64,
    },
    /// The grant named an admission, and this store cannot check one: only the Redis
    /// store keeps waiting rooms. Nothing was sent.
    #[error("the {store} lease store cannot check a waiting room's admission")]
    AdmissionUnchecked {
        /// The store's name (`"etcd"`).
        store: &'static str,
    },
    /// [`LeaseStore::acquire_all`](crate::LeaseStore::acquire_all) was given no key, keys of several groups, or one
    /// name twice: a group hold is over distinct resources of one group (one Redis slot).
    /// Nothing was sent.
    #[error("a group hold needs at least one key, all of one group, no name twice")]
    NotOneGroup,
    /// The ledger's next ceiling is above [`MAX_FENCING_TOKEN`](crate::MAX_FENCING_TOKEN): the group has used up
    /// the tokens a Lua number can count exactly. Nothing was granted or written.
    #[error("fencing tokens of this group are exhausted (ceiling {ceiling} > 2^53 - 1)")]
    TokensExhausted {
        /// The ceiling the ledger returned.
        ceiling: u64,
    },
    /// etcd did not answer, or answered with an error ([`crate::etcd::EtcdStore`]): guarded
    /// work must stop.
    #[cfg(feature = "etcd")]
    #[error("lease store unavailable (etcd): {0}")]
    Etcd(#[source] etcd_client::Error),
    /// etcd is past its backend quota (`--quota-backend-bytes`; its NOSPACE alarm is
    /// raised): it accepts only reads and deletes until it is compacted, defragmented and
    /// the alarm disarmed (etcd-io/etcd#8207). Carries etcd's words. Nothing was written.
    #[error("etcd is out of space (past its backend quota): {0}")]
    EtcdNoSpace(String),
    /// etcd answered and refused the request for another reason than being unreachable
    /// or out of space (an invalid argument, a failed precondition, too many operations
    /// in a txn): "code: message", etcd's words. Nothing was written.
    #[error("etcd refused the request: {0}")]
    EtcdRefused(String),
    /// ZooKeeper did not answer, or answered with an error
    /// ([`crate::zookeeper::ZooKeeperStore`]): guarded work must stop.
    #[cfg(feature = "zookeeper")]
    #[error("lease store unavailable (ZooKeeper): {0}")]
    ZooKeeper(#[source] zookeeper_client::Error),
    /// The store granted another TTL than asked: ZooKeeper negotiates each session's
    /// timeout within its server's `minSessionTimeout`..`maxSessionTimeout`, and a hold's
    /// session is its lease. Nothing is held.
    #[error(
        "{store} granted a {granted:?} session for a {ttl:?} lease: its server's \
         minSessionTimeout..maxSessionTimeout does not take that TTL"
    )]
    TtlNotGranted {
        /// The store's name (`"zookeeper"`).
        store: &'static str,
        /// The TTL asked for.
        ttl: Duration,
        /// The session timeout the server negotiated instead.
        granted: Duration,
    },
    /// A ZooKeeper hold can be renewed or extended only by the process that granted it:
    /// its session's password is kept there and nowhere else. Nothing was changed; the
    /// hold lasts until its TTL.
    #[error("the hold on {name} was granted by another process, which alone can renew its session")]
    SessionElsewhere {
        /// The resource whose hold was asked to be renewed.
        name: String,
    },
    /// A group hold of more resources than the store takes in one step
    /// ([`LeaseStore::max_keys_per_hold`](crate::LeaseStore::max_keys_per_hold); etcd: its
    /// operations per transaction). Nothing was sent.
    #[error("a hold of {keys} resources is more than the store takes at once ({limit})")]
    TooManyKeys {
        /// The resources asked for.
        keys: usize,
        /// The most the store takes.
        limit: usize,
    },
    /// An extension ([`LeaseStore::extend_all`](crate::LeaseStore::extend_all)) found
    /// the lease on `name` lapsed, released, or another owner's. Nothing was extended,
    /// and no key was recreated.
    #[error("the lease on {name} has expired: nothing was extended")]
    Expired {
        /// The resource whose lease is gone.
        name: String,
    },
    /// An extension found the lease on `name` already extended `limit` times
    /// ([`Extension::max_extensions`](crate::Extension::max_extensions)). Nothing was
    /// extended.
    #[error("the lease on {name} was extended {limit} times, the most allowed")]
    ExtensionLimit {
        /// The resource whose extensions are used up.
        name: String,
        /// The most extensions of one lease.
        limit: u32,
    },
    /// An extension found the lease on `name` already lasting to its grant plus
    /// `max_life` ([`Extension::max_life`](crate::Extension::max_life)). Nothing was
    /// extended.
    #[error("the lease on {name} already lasts {max_life:?} from its grant, the longest allowed")]
    LifeLimit {
        /// The resource whose life is used up.
        name: String,
        /// The longest a lease may last from its grant.
        max_life: Duration,
    },
    /// The store cannot express `ttl` ([`LeaseStore::ttl_limits`](crate::LeaseStore::ttl_limits); etcd: whole seconds,
    /// at least 2 s). Nothing was sent.
    #[error(
        "{store} cannot hold a lease for {ttl:?}: its TTLs are whole multiples of {:?}, at least {:?}",
        limits.step,
        limits.min
    )]
    TtlNotExpressible {
        /// The store's name (`"etcd"`).
        store: &'static str,
        /// The TTL asked for.
        ttl: Duration,
        /// What the store can express.
        limits: TtlLimits,
    },
}

impl From<redis::RedisError> for LeaseError {
    /// [`LeaseError::TooFewReplicas`] for a `NOREPLICAS` refusal,
    /// [`LeaseError::RedisRefused`] for `NOPERM` or a reply this crate cannot read, else
    /// [`LeaseError::Unavailable`].
    fn from(err: redis::RedisError) -> Self {
        let unreadable = matches!(
            err.kind(),
            redis::ErrorKind::UnexpectedReturnType | redis::ErrorKind::Parse
        );
        if err.code() == Some("NOREPLICAS") {
            LeaseError::TooFewReplicas(err)
        } else if err.code() == Some("NOPERM") || unreadable {
            LeaseError::RedisRefused(err)
        } else {
            LeaseError::Unavailable(err)
        }
    }
}

#[cfg(feature = "etcd")]
impl From<etcd_client::Error> for LeaseError {
    /// [`LeaseError::EtcdNoSpace`] for etcd's "database space exceeded" (gRPC
    /// RESOURCE_EXHAUSTED), [`LeaseError::EtcdRefused`] for any other answer that is an
    /// error, [`LeaseError::Etcd`] for no answer (unreachable, no leader, timed out).
    fn from(err: etcd_client::Error) -> Self {
        use tonic::Code;
        match &err {
            etcd_client::Error::GRpcStatus(status)
                if status.code() == Code::ResourceExhausted
                    && status.message().contains("space exceeded") =>
            {
                LeaseError::EtcdNoSpace(status.message().to_owned())
            }
            etcd_client::Error::GRpcStatus(status)
                if !matches!(
                    status.code(),
                    Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown
                ) =>
            {
                LeaseError::EtcdRefused(format!("{:?}: {}", status.code(), status.message()))
            }
            _ => LeaseError::Etcd(err),
        }
    }
}

#[cfg(feature = "zookeeper")]
impl From<zookeeper_client::Error> for LeaseError {
    /// [`LeaseError::ZooKeeper`], whatever ZooKeeper answered: a refusal this crate does
    /// not expect is an answer it cannot act on.
    fn from(err: zookeeper_client::Error) -> Self {
        LeaseError::ZooKeeper(err)
    }
}
