//! "Need more time?" on ZooKeeper ([`crate::LeaseStore::extend_all`]): one read, one
//! `multi`, then the holds' sessions reattached.
//!
//! The read takes each live hold (its znode's data records the grant's time and the
//! extensions so far). The budget is judged here. The `multi` then rewrites every hold's
//! expiry and count, all or none, each at the version read: that is the owner check, and
//! it never recreates a hold (a lapsed znode is gone, the `setData` fails). The sessions
//! are reattached after the `multi`, so a refused extension extends nothing. Reattaching
//! restarts a session's timeout in full, so on ZooKeeper `Extension::ttl` is the grant's
//! TTL (an expiry capped by `Extension::max_life` is recorded as capped; the hold may
//! outlast it, never end before it).
//!
//! Round trips: 3 (a sync, then the read, which is two) plus the `multi`, plus one
//! reattachment per grant among the holds.

use std::collections::HashSet;

use super::{HoldData, ZooKeeperStore, now_ms, seat_path};
use crate::error::LeaseError;
use crate::lease::{Extended, Extension, Lease, extended};
use crate::store::check_one_group;

/// How many times the `multi` is tried when a hold changed between the read and the
/// write (another extension of the same holds racing this one).
const ATTEMPTS: usize = 3;

/// [`crate::LeaseStore::extend_all`] on ZooKeeper (see the module docs). ZooKeeper
/// keeps no waiting room, so an extension with an admission is refused before anything
/// is sent.
pub(super) async fn extend_all(
    store: &ZooKeeperStore,
    leases: &[Lease],
    extension: &Extension,
) -> Result<Extended, LeaseError> {
    if extension.admission.is_some() {
        return Err(LeaseError::AdmissionUnchecked { store: "zookeeper" });
    }
    let keys: Vec<_> = leases.iter().map(|l| l.key().clone()).collect();
    check_one_group(&keys)?;
    let seats: Vec<String> = keys.iter().map(seat_path).collect();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let client = store.client().await?;
        store.within(client.sync(&seats[0])).await?;
        let holds = store.read_holds_on(&client, &seats).await?;
        let now = now_ms();
        let mut writer = client.new_multi_writer();
        let mut expiries = Vec::with_capacity(leases.len());
        let mut extensions = 0;
        for (lease, hold) in leases.iter().zip(holds) {
            let name = lease.key().name().to_owned();
            // The owner check: the live hold is the owner's, under the holder's label.
            let Some(hold) = hold
                .filter(|h| h.data.owner == *lease.owner() && h.data.holder == extension.holder)
            else {
                return Err(LeaseError::Expired { name });
            };
            let data = plan(&hold.data, extension, now, name)?;
            writer.add_set_data(&hold.path, &data.to_bytes(), Some(hold.stat.version))?;
            expiries.push(data.expires_at_ms);
            extensions = extensions.max(data.extensions);
        }
        if let Err(err) = store.within_multi_raw(writer.commit()).await? {
            // A hold changed since the read: read again. The next read finds a lapse.
            if attempt < ATTEMPTS {
                continue;
            }
            return match zookeeper_client::Error::from(err) {
                zookeeper_client::Error::NoNode | zookeeper_client::Error::BadVersion => {
                    Err(LeaseError::Expired {
                        name: leases[0].key().name().to_owned(),
                    })
                }
                other => Err(other.into()),
            };
        }
        // Restart each grant's session. One that expired lapsed after the multi.
        let mut touched = HashSet::new();
        for lease in leases {
            if touched.insert(lease.owner().clone())
                && !store.touch(lease.owner(), lease.key().name()).await?
            {
                return Err(LeaseError::Expired {
                    name: lease.key().name().to_owned(),
                });
            }
        }
        return Ok(Extended {
            leases: extended(leases, extension, &expiries),
            extensions,
        });
    }
}

/// The extension of one hold as read, judged against its budget at `now` (Unix ms, this
/// process's clock): its new data. Errors: [`LeaseError::ExtensionLimit`],
/// [`LeaseError::LifeLimit`].
fn plan(
    hold: &HoldData,
    extension: &Extension,
    now: u64,
    name: String,
) -> Result<HoldData, LeaseError> {
    if hold.extensions >= extension.max_extensions {
        return Err(LeaseError::ExtensionLimit {
            name,
            limit: extension.max_extensions,
        });
    }
    // A TTL from now, never past the grant's last moment, never sooner than now.
    let last = hold.granted_at_ms + extension.max_life.as_millis() as u64;
    if last <= hold.expires_at_ms {
        return Err(LeaseError::LifeLimit {
            name,
            max_life: extension.max_life,
        });
    }
    let ttl_ms = extension.ttl.as_millis() as u64;
    Ok(HoldData {
        expires_at_ms: (now + ttl_ms).min(last).max(hold.expires_at_ms),
        extensions: hold.extensions + 1,
        ..hold.clone()
    })
}
