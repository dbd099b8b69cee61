//! The ZooKeeper lease store: [`ZooKeeperStore`], a [`LeaseStore`] on a ZooKeeper
//! ensemble (the article's step 5 as ZooKeeper's own lock recipe: ephemeral sequential
//! znodes, the session as the lease, the creation zxid as the fencing token).
//!
//! | what | ZooKeeper |
//! |---|---|
//! | a hold | an ephemeral sequential znode `h-<owner token>-<seq>` under the seat's znode, created by a session of its own whose timeout is the hold's TTL ([`ZK_TTL_LIMITS`]); held if it is the lowest there (`grant.rs`) |
//! | the lease | that session: detached from any connection once the grant is made, so it expires one TTL later unless renewed, and ZooKeeper deletes its znodes then |
//! | owner token | a random [`OwnerToken`] in the znode's name and data; the session's password stays in the granting process ([`ZooKeeperStore`]) |
//! | fencing token | the znode's creation zxid (`czxid`): global, durable, strictly increasing, across leader changes too (its high 32 bits are the leader's epoch); no ledger |
//! | group hold | one session, one `multi` creating a znode under every seat (one zxid: one fencing token for all) |
//! | release | a `multi` deleting our znode (at the version read) and its holder entry; the owner check is the owner token in the znode's name and data |
//! | renew, extend | reattach the hold's session (its timeout restarts), then an owner-checked `setData` of the recorded expiry at the version read (`extend.rs`) |
//! | retire | the seat znode's data set (version 1): every grant's `multi` checks version 0 |
//! | not before (an on-sale) | the group's `~on-sale-<ms>` znode, which a grant's `multi` checks exists; the first process whose own clock passed it creates it |
//! | changes | a persistent recursive watch on the store's root (`watch.rs`); a lapse is a delete by ZooKeeper at session expiry |
//!
//! Znodes, under `/seatlock/lease`: `<group>/<name>` (persistent; data `retired` once
//! retired), `<group>/<name>/h-<owner>-<seq>` (the hold; data `"<owner> <expires_at_ms>
//! <granted_at_ms> <extensions> <holder label>"`), `<group>/~held-by/<hex holder>/<name>-<owner>`
//! (ephemeral, the same session: one per hold, for a per-holder limit), `<group>/~on-sale-<ms>`.
//!
//! **A hold does not outlive its session.** The session is the lease: a ten-minute hold
//! is a ten-minute session. ZooKeeper clamps a session's timeout to its server's
//! `minSessionTimeout`..`maxSessionTimeout` (by default 2 and 20 ticks: 4 s to 40 s with
//! `tickTime=2000`), so the server must be configured for the holds it carries (seatlock's
//! run 1 s to 15 minutes); a grant whose session is negotiated to another timeout is
//! refused ([`LeaseError::TtlNotGranted`]) and the server refuses to start with such a TTL.
//! Nothing connects to a hold's session between grant and renewal: it is a timer on the
//! leader, expired on a tick boundary (a hold lasts its TTL and at most one tick more), and
//! restarted in full by a new leader (as etcd does with its leases). The cost: only the
//! process that granted a hold can renew or extend it (its session's password is not
//! written anywhere), answered [`LeaseError::SessionElsewhere`] elsewhere.
//!
//! Clocks: ZooKeeper has no clock to ask; `expires_at_ms` is this process's clock at the
//! grant or renewal plus the TTL.

mod extend;
mod grant;
mod watch;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use zookeeper_client::{Acls, Client, CreateMode, MultiReadResult, SessionInfo, Stat};

use crate::error::LeaseError;
use crate::keys::LeaseKey;
use crate::lease::{Extended, Extension, Grant, GroupSnapshot, Holding, Lease, TtlLimits};
use crate::store::{LeaseChanges, LeaseStore, record_renewal};
use crate::token::{FencingToken, OwnerToken};

/// ZooKeeper session timeouts as this store asks for them: milliseconds, at least 1 s.
/// The server narrows them further (its `minSessionTimeout` and `maxSessionTimeout`),
/// which [`LeaseStore::check_ttl`] and every grant check.
pub const ZK_TTL_LIMITS: TtlLimits = TtlLimits {
    min: Duration::from_secs(1),
    step: Duration::from_millis(1),
};

/// The root of every znode of this store.
const ROOT: &str = "/seatlock/lease";

/// The most znodes one `multi-read` asks for: its answer must stay under ZooKeeper's
/// `jute.maxbuffer` (1 MB by default).
const READ_BATCH: usize = 500;

/// A [`LeaseStore`] on a ZooKeeper ensemble (3.6 or later: `multi-read`, persistent
/// recursive watches). Cheap to share: clones share the connection and the sessions of
/// the holds this process granted.
#[derive(Clone)]
pub struct ZooKeeperStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// `host:port,host:port`: ZooKeeper's connect string.
    hosts: String,
    /// How long a connection is waited for and a request may take.
    timeout: Duration,
    /// The store's own session, for reads, deletes and checks; replaced when it expires.
    client: tokio::sync::RwLock<Client>,
    /// The session of each hold this process granted, by owner token.
    sessions: Mutex<HashMap<OwnerToken, HoldSession>>,
}

/// A hold's session, kept to renew it: its id and password, and its timeout.
#[derive(Clone)]
struct HoldSession {
    session: SessionInfo,
    ttl: Duration,
    /// When it lapses unless renewed (this process's clock), to forget lapsed ones.
    until: tokio::time::Instant,
}

impl ZooKeeperStore {
    /// Connects to the ensemble named by `url`, `zk://host:port,host:port,…` (one member
    /// or several), and makes the store's root znode. `timeout` bounds connecting and
    /// each request. Errors: [`LeaseError::ZooKeeper`] for a malformed URL or no member
    /// answering in time.
    pub async fn connect(url: &str, timeout: Duration) -> Result<Self, LeaseError> {
        let hosts = hosts(url)?;
        let client = own_session(&hosts, timeout).await?;
        let anyone = CreateMode::Persistent.with_acls(Acls::anyone_all());
        within(timeout, client.mkdir(ROOT, &anyone)).await?;
        Ok(ZooKeeperStore {
            inner: Arc::new(Inner {
                hosts,
                timeout,
                client: tokio::sync::RwLock::new(client),
                sessions: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The store's session, connected again if it expired or was closed.
    async fn client(&self) -> Result<Client, LeaseError> {
        let client = self.inner.client.read().await.clone();
        if !client.state().is_terminated() {
            return Ok(client);
        }
        let mut current = self.inner.client.write().await;
        if current.state().is_terminated() {
            *current = own_session(&self.inner.hosts, self.inner.timeout).await?;
        }
        Ok(current.clone())
    }

    /// `request` within the store's timeout.
    async fn within<T>(
        &self,
        request: impl Future<Output = Result<T, zookeeper_client::Error>>,
    ) -> Result<T, LeaseError> {
        within(self.inner.timeout, request).await
    }

    /// A new session for a hold of `ttl`, detached: dropping the client leaves it to
    /// expire one `ttl` later (with its znodes). Errors: [`LeaseError::TtlNotGranted`]
    /// when the server negotiates another timeout (the session, empty, then lapses).
    async fn hold_session(&self, ttl: Duration) -> Result<Client, LeaseError> {
        let connector = Client::connector()
            .with_session_timeout(ttl)
            .with_connection_timeout(self.inner.timeout)
            .with_detached();
        let client = within(self.inner.timeout, connector.connect(&self.inner.hosts)).await?;
        if client.session_timeout() != ttl {
            return Err(LeaseError::TtlNotGranted {
                store: "zookeeper",
                ttl,
                granted: client.session_timeout(),
            });
        }
        Ok(client)
    }

    /// Reattaches a hold's session, which restarts its timeout, detached again when the
    /// client is dropped. Errors: `SessionExpired` once it expired.
    async fn reattach(&self, session: SessionInfo, ttl: Duration) -> Result<Client, LeaseError> {
        let connector = Client::connector()
            .with_session(session)
            .with_session_timeout(ttl)
            .with_connection_timeout(self.inner.timeout)
            .with_detached();
        within(self.inner.timeout, connector.connect(&self.inner.hosts)).await
    }

    /// Keeps a granted hold's session, to renew it, and forgets those long lapsed.
    fn keep_session(&self, owner: &OwnerToken, session: SessionInfo, ttl: Duration) {
        let now = tokio::time::Instant::now();
        let mut sessions = self.inner.sessions.lock().expect("not poisoned");
        sessions.retain(|_, kept| kept.until > now);
        sessions.insert(
            owner.clone(),
            HoldSession {
                session,
                ttl,
                until: now + ttl,
            },
        );
    }

    /// Restarts the timeout of `owner`'s hold session. `Ok(false)` if it expired.
    /// Errors: [`LeaseError::SessionElsewhere`] when this process did not grant it.
    async fn touch(&self, owner: &OwnerToken, name: &str) -> Result<bool, LeaseError> {
        let kept = self
            .inner
            .sessions
            .lock()
            .expect("not poisoned")
            .get(owner)
            .cloned();
        let Some(kept) = kept else {
            return Err(LeaseError::SessionElsewhere {
                name: name.to_owned(),
            });
        };
        match self.reattach(kept.session.clone(), kept.ttl).await {
            Ok(client) => {
                drop(client);
                let mut sessions = self.inner.sessions.lock().expect("not poisoned");
                if let Some(entry) = sessions.get_mut(owner) {
                    entry.until = tokio::time::Instant::now() + kept.ttl;
                }
                Ok(true)
            }
            Err(LeaseError::ZooKeeper(zookeeper_client::Error::SessionExpired)) => {
                self.forget(owner);
                Ok(false)
            }
            Err(err) => Err(err),
        }
    }

    /// Forgets `owner`'s hold session (released or expired).
    fn forget(&self, owner: &OwnerToken) {
        self.inner
            .sessions
            .lock()
            .expect("not poisoned")
            .remove(owner);
    }
}

/// The store's own session: a short timeout of its own (the store's timeout, at least
/// ZooKeeper's usual 2 s floor), closed when the store is dropped.
async fn own_session(hosts: &str, timeout: Duration) -> Result<Client, LeaseError> {
    let connector = Client::connector()
        .with_session_timeout(timeout.max(Duration::from_secs(2)) * 3)
        .with_connection_timeout(timeout);
    within(timeout * 2, connector.connect(hosts)).await
}

/// `request`, or [`zookeeper_client::Error::Timeout`] after `timeout`.
async fn within<T>(
    timeout: Duration,
    request: impl Future<Output = Result<T, zookeeper_client::Error>>,
) -> Result<T, LeaseError> {
    match tokio::time::timeout(timeout, request).await {
        Ok(answer) => Ok(answer?),
        Err(_) => Err(LeaseError::ZooKeeper(zookeeper_client::Error::Timeout)),
    }
}

/// The connect string (`host:port,host:port`) of a `zk://host:port,host:port` URL.
/// Errors: another scheme, or no host.
pub fn hosts(url: &str) -> Result<String, LeaseError> {
    let hosts: Vec<&str> = url
        .strip_prefix("zk://")
        .unwrap_or_default()
        .trim_end_matches('/')
        .split(',')
        .filter(|host| !host.is_empty())
        .collect();
    if !url.starts_with("zk://") || hosts.is_empty() {
        return Err(LeaseError::ZooKeeper(
            zookeeper_client::Error::BadArguments(
                &"not a ZooKeeper URL: expected zk://host:port[,host:port…]",
            ),
        ));
    }
    Ok(hosts.join(","))
}

/// A path component for a group or resource name: `/` and `%` escaped (a znode name
/// cannot hold `/`), and `.`, `..` (which ZooKeeper refuses as names).
fn component(part: &str) -> String {
    let escaped = part.replace('%', "%25").replace('/', "%2F");
    if escaped == "." || escaped == ".." {
        escaped.replace('.', "%2E")
    } else {
        escaped
    }
}

/// The name a [`component`] stands for.
fn uncomponent(part: &str) -> String {
    part.replace("%2E", ".")
        .replace("%2F", "/")
        .replace("%25", "%")
}

/// `/seatlock/lease/<group>`.
fn group_path(group: &str) -> String {
    format!("{ROOT}/{}", component(group))
}

/// `/seatlock/lease/<group>/<name>`: the seat's znode, parent of its holds.
fn seat_path(key: &LeaseKey) -> String {
    format!("{}/{}", group_path(key.group()), component(key.name()))
}

/// `…/<group>/~held-by/<hex holder>`: one entry per live hold of `holder` (hex, so that
/// any label is one znode name).
fn held_by_path(group: &str, holder: &str) -> String {
    let hex: String = holder.bytes().map(|b| format!("{b:02x}")).collect();
    format!("{}/~held-by/{hex}", group_path(group))
}

/// The holder entry of `owner`'s hold on `key` under `holder`'s [`held_by_path`].
fn held_by_entry(key: &LeaseKey, holder: &str, owner: &OwnerToken) -> String {
    format!(
        "{}/{}-{}",
        held_by_path(key.group(), holder),
        component(key.name()),
        owner.as_str()
    )
}

/// This process's clock, Unix milliseconds.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What a hold's znode records: `"<owner> <expires_at_ms> <granted_at_ms> <extensions>
/// <holder label>"`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct HoldData {
    owner: OwnerToken,
    expires_at_ms: u64,
    granted_at_ms: u64,
    extensions: u32,
    holder: String,
}

impl HoldData {
    fn to_bytes(&self) -> Vec<u8> {
        format!(
            "{} {} {} {} {}",
            self.owner.as_str(),
            self.expires_at_ms,
            self.granted_at_ms,
            self.extensions,
            self.holder
        )
        .into_bytes()
    }

    fn parse(data: &[u8]) -> Option<HoldData> {
        let mut parts = std::str::from_utf8(data).ok()?.splitn(5, ' ');
        Some(HoldData {
            owner: OwnerToken::from_string(parts.next()?.to_owned()),
            expires_at_ms: parts.next()?.parse().ok()?,
            granted_at_ms: parts.next()?.parse().ok()?,
            extensions: parts.next()?.parse().ok()?,
            holder: parts.next().unwrap_or_default().to_owned(),
        })
    }
}

/// The live hold on a seat: the lowest of its hold znodes.
#[derive(Clone, Debug)]
struct Hold {
    path: String,
    data: HoldData,
    stat: Stat,
}

impl Hold {
    fn holding(&self, name: &str) -> Holding {
        Holding {
            name: name.to_owned(),
            holder: self.data.holder.clone(),
            fencing_token: FencingToken(self.stat.czxid as u64),
            expires_at_ms: self.data.expires_at_ms,
        }
    }
}

/// The sequence number of a hold znode's name (`h-<owner>-<seq>`), or `None` for
/// another name.
fn sequence(child: &str) -> Option<u64> {
    child.strip_prefix("h-")?.rsplit_once('-')?.1.parse().ok()
}

/// The lowest hold znode among a seat's children: the one that holds (the recipe's
/// "lowest sequence number wins").
fn lowest(children: &[String]) -> Option<&String> {
    children
        .iter()
        .filter_map(|c| Some((sequence(c)?, c)))
        .min()
        .map(|(_, c)| c)
}

impl ZooKeeperStore {
    /// The live holds of `keys`' seats, in their order, in two `multi-read`s: every
    /// seat's children, then the lowest one's data. A hold deleted between the reads is
    /// no hold.
    async fn read_holds(&self, seats: &[String]) -> Result<Vec<Option<Hold>>, LeaseError> {
        self.read_holds_on(&self.client().await?, seats).await
    }

    /// [`ZooKeeperStore::read_holds`] on `client`'s session: a session reads its own
    /// writes, where another session's member may not have applied them yet.
    async fn read_holds_on(
        &self,
        client: &Client,
        seats: &[String],
    ) -> Result<Vec<Option<Hold>>, LeaseError> {
        let mut holds = Vec::with_capacity(seats.len());
        for batch in seats.chunks(READ_BATCH) {
            let lowest = self.lowest_on(client, batch).await?;
            let mut reader = client.new_multi_reader();
            for path in lowest.iter().flatten() {
                reader.add_get_data(path)?;
            }
            let mut data = self.within(reader.commit()).await?.into_iter();
            for path in lowest {
                let hold = match path {
                    Some(path) => match data.next() {
                        Some(MultiReadResult::Data { data, stat }) => {
                            HoldData::parse(&data).map(|data| Hold { path, data, stat })
                        }
                        _ => None,
                    },
                    None => None,
                };
                holds.push(hold);
            }
        }
        Ok(holds)
    }

    /// The path of the lowest hold znode under each of `seats` (at most [`READ_BATCH`]),
    /// in their order, in one `multi-read` on `client`'s session.
    async fn lowest_on(
        &self,
        client: &Client,
        seats: &[String],
    ) -> Result<Vec<Option<String>>, LeaseError> {
        let mut reader = client.new_multi_reader();
        for seat in seats {
            reader.add_get_children(seat)?;
        }
        Ok(self
            .within(reader.commit())
            .await?
            .into_iter()
            .zip(seats)
            .map(|(answer, seat)| match answer {
                MultiReadResult::Children { children } => {
                    lowest(&children).map(|c| format!("{seat}/{c}"))
                }
                _ => None,
            })
            .collect())
    }

    /// The live hold on `key`, if any.
    async fn read_hold(&self, key: &LeaseKey) -> Result<Option<Hold>, LeaseError> {
        Ok(self.read_holds(&[seat_path(key)]).await?.remove(0))
    }

    /// `lease`'s own hold znode if it is still the live hold (the owner check: its
    /// owner token). After a `sync`: the store's member has then applied every write the
    /// leader committed before, the grant's included (made through another member).
    async fn own_hold(&self, lease: &Lease) -> Result<Option<Hold>, LeaseError> {
        let client = self.client().await?;
        let seat = seat_path(lease.key());
        self.within(client.sync(&seat)).await?;
        Ok(self
            .read_holds_on(&client, &[seat])
            .await?
            .remove(0)
            .filter(|hold| hold.data.owner == *lease.owner()))
    }

    /// Deletes `hold` (at the version read) and its holder entry, with `also` in the same
    /// `multi`. `false` when the hold changed or went meanwhile (nothing is then done).
    async fn delete_hold(
        &self,
        key: &LeaseKey,
        hold: &Hold,
        also: Option<(&str, &[u8])>,
    ) -> Result<bool, LeaseError> {
        let client = self.client().await?;
        let mut writer = client.new_multi_writer();
        writer.add_delete(&hold.path, Some(hold.stat.version))?;
        writer.add_delete(
            &held_by_entry(key, &hold.data.holder, &hold.data.owner),
            None,
        )?;
        if let Some((path, data)) = also {
            writer.add_set_data(path, data, None)?;
        }
        match self
            .within_multi_raw(writer.commit())
            .await?
            .map_err(zookeeper_client::Error::from)
        {
            Ok(_) => Ok(true),
            Err(zookeeper_client::Error::NoNode | zookeeper_client::Error::BadVersion) => Ok(false),
            Err(err) => Err(err.into()),
        }
    }

    /// A `multi` within the store's timeout: the timeout is the outer error, ZooKeeper's
    /// answer (which operation failed) the inner.
    async fn within_multi_raw<T>(
        &self,
        multi: impl Future<Output = Result<T, zookeeper_client::MultiWriteError>>,
    ) -> Result<Result<T, zookeeper_client::MultiWriteError>, LeaseError> {
        tokio::time::timeout(self.inner.timeout, multi)
            .await
            .map_err(|_| LeaseError::ZooKeeper(zookeeper_client::Error::Timeout))
    }
}

#[async_trait]
impl LeaseStore for ZooKeeperStore {
    fn name(&self) -> &'static str {
        "zookeeper"
    }

    fn ttl_limits(&self) -> TtlLimits {
        ZK_TTL_LIMITS
    }

    /// The limits, then one session asked for with `ttl` and closed at once: what the
    /// server negotiates (its `minSessionTimeout`..`maxSessionTimeout`).
    async fn check_ttl(&self, ttl: Duration) -> Result<(), LeaseError> {
        ZK_TTL_LIMITS.check("zookeeper", ttl)?;
        let connector = Client::connector()
            .with_session_timeout(ttl)
            .with_connection_timeout(self.inner.timeout);
        let Ok(Ok(probe)) =
            tokio::time::timeout(self.inner.timeout, connector.connect(&self.inner.hosts)).await
        else {
            return Ok(()); // not answering: each grant checks again
        };
        let granted = probe.session_timeout();
        drop(probe); // not detached: closed
        if granted == ttl {
            Ok(())
        } else {
            Err(LeaseError::TtlNotGranted {
                store: "zookeeper",
                ttl,
                granted,
            })
        }
    }

    fn one_clock(&self) -> bool {
        false
    }

    async fn acquire_all(&self, grant: &Grant) -> Result<Vec<Lease>, LeaseError> {
        grant::acquire_all(self, grant).await
    }

    async fn release(&self, lease: &Lease) -> Result<bool, LeaseError> {
        let Some(hold) = self.own_hold(lease).await? else {
            return Ok(false);
        };
        let deleted = self.delete_hold(lease.key(), &hold, None).await?;
        Ok(deleted)
    }

    async fn renew(&self, lease: &mut Lease) -> Result<bool, LeaseError> {
        let sent_at = tokio::time::Instant::now();
        let Some(hold) = self.own_hold(lease).await? else {
            return Ok(false);
        };
        if !self.touch(lease.owner(), lease.key().name()).await? {
            return Ok(false);
        }
        // The recorded expiry, rewritten only at the version read: the owner check.
        let expires_at_ms = now_ms() + lease.ttl.as_millis() as u64;
        let data = HoldData {
            expires_at_ms,
            ..hold.data.clone()
        };
        let client = self.client().await?;
        let written = self
            .within(client.set_data(&hold.path, &data.to_bytes(), Some(hold.stat.version)))
            .await;
        let renewed = match written {
            Ok(_) => true,
            Err(LeaseError::ZooKeeper(
                zookeeper_client::Error::NoNode | zookeeper_client::Error::BadVersion,
            )) => false,
            Err(err) => return Err(err),
        };
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
        let seat = seat_path(lease.key());
        let retired: &[u8] = b"retired";
        if let Some(hold) = self.own_hold(lease).await?
            && self
                .delete_hold(lease.key(), &hold, Some((&seat, retired)))
                .await?
        {
            return Ok(true);
        }
        let client = self.client().await?;
        self.within(client.set_data(&seat, retired, None)).await?;
        Ok(false)
    }

    async fn holders(&self, group: &str) -> Result<GroupSnapshot, LeaseError> {
        let client = self.client().await?;
        let group_path = group_path(group);
        let names = match self.within(client.list_children(&group_path)).await {
            Ok(names) => names,
            Err(LeaseError::ZooKeeper(zookeeper_client::Error::NoNode)) => Vec::new(),
            Err(err) => return Err(err),
        };
        let names: Vec<String> = names.into_iter().filter(|n| !n.starts_with('~')).collect();
        let seats: Vec<String> = names.iter().map(|n| format!("{group_path}/{n}")).collect();
        let holds = self.read_holds(&seats).await?;
        Ok(GroupSnapshot {
            now_ms: now_ms(),
            holdings: names
                .iter()
                .zip(holds)
                .filter_map(|(name, hold)| Some(hold?.holding(&uncomponent(name))))
                .collect(),
        })
    }

    async fn owned_by(&self, key: &LeaseKey, holder: &str) -> Result<Option<Lease>, LeaseError> {
        let sent_at = tokio::time::Instant::now();
        let now = now_ms();
        Ok(self
            .read_hold(key)
            .await?
            .filter(|hold| hold.data.holder == holder)
            .map(|hold| Lease {
                key: key.clone(),
                owner: hold.data.owner.clone(),
                fencing_token: FencingToken(hold.stat.czxid as u64),
                ttl: Duration::from_millis(hold.data.expires_at_ms.saturating_sub(now)),
                expires_at_ms: hold.data.expires_at_ms,
                sent_at: Some(sent_at),
            }))
    }

    async fn is_held(&self, lease: &Lease) -> Result<bool, LeaseError> {
        Ok(self.own_hold(lease).await?.is_some())
    }

    /// The recorded expiry less this process's clock: ZooKeeper tells no session's
    /// remaining time. A hold past its expiry and not yet deleted (at most a tick) has
    /// zero left.
    async fn remaining(&self, key: &LeaseKey) -> Result<Option<Duration>, LeaseError> {
        Ok(self
            .read_hold(key)
            .await?
            .map(|hold| Duration::from_millis(hold.data.expires_at_ms.saturating_sub(now_ms()))))
    }

    /// A `sync` (it goes through the leader: it needs a quorum, as a grant does), then a
    /// read of the root.
    async fn ping(&self) -> Result<(), LeaseError> {
        let client = self.client().await?;
        self.within(client.sync(ROOT)).await?;
        self.within(client.check_stat(ROOT)).await?;
        Ok(())
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
            hosts("zk://127.0.0.1:2181,127.0.0.1:2182/").unwrap(),
            "127.0.0.1:2181,127.0.0.1:2182"
        );
        assert!(hosts("etcd://127.0.0.1:2379").is_err());
        assert!(hosts("zk://").is_err());
    }

    #[test]
    fn names_become_one_znode_name_and_back() {
        for name in ["14C", "a/b", "50%", ".", "..", "x.y", "%2F", "%2E"] {
            let part = component(name);
            assert!(!part.contains('/') && part != "." && part != "..");
            assert_eq!(uncomponent(&part), name);
        }
    }

    #[test]
    fn the_lowest_sequence_holds() {
        let children = [
            "h-bb-0000000012".to_owned(),
            "h-aa-0000000003".to_owned(),
            "other".to_owned(),
        ];
        assert_eq!(lowest(&children).unwrap(), "h-aa-0000000003");
        assert_eq!(lowest(&[]), None);
    }

    #[test]
    fn hold_data_parses_back_with_spaces_in_the_label() {
        let data = HoldData {
            owner: OwnerToken::random(),
            expires_at_ms: 1_700_000_002_000,
            granted_at_ms: 1_700_000_000_000,
            extensions: 3,
            holder: "buyer one".into(),
        };
        assert_eq!(HoldData::parse(&data.to_bytes()), Some(data));
    }
}
