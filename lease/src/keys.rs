//! Key naming: every key of a group carries the Redis Cluster hash tag `{group}`.

use std::fmt;

/// Names one lockable resource: `name` inside `group`.
///
/// All resources of a group live in one Redis Cluster hash slot (the group is the hash
/// tag), which is what lets one script grant a lease, bump the group's fencing counter and
/// record the holding atomically, and lets [`LeaseStore::holders`](crate::LeaseStore::holders) list a whole
/// group in one round trip. Choose the group as the unit you shard by and list by; for
/// seatlock it is one event (`event:42`), and the name is the seat id.
///
/// Neither part may contain `{`, `}` or whitespace, and `name` may not start with `~`
/// (reserved for the group's own bookkeeping keys).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct LeaseKey {
    group: String,
    name: String,
}

/// A group or resource name that would break the key layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid lease key part {0:?}: must be non-empty, without braces or whitespace, and a name may not start with '~'"
)]
pub struct InvalidKey(
    /// The offending part, as given.
    pub String,
);

fn valid(part: &str) -> bool {
    !part.is_empty() && !part.contains(['{', '}']) && !part.contains(char::is_whitespace)
}

impl LeaseKey {
    /// Builds a key, or [`InvalidKey`] if a part is empty, has braces or whitespace, or
    /// `name` starts with `~`.
    pub fn new(group: impl Into<String>, name: impl Into<String>) -> Result<Self, InvalidKey> {
        let (group, name) = (group.into(), name.into());
        if !valid(&group) {
            return Err(InvalidKey(group));
        }
        if !valid(&name) || name.starts_with('~') {
            return Err(InvalidKey(name));
        }
        Ok(LeaseKey { group, name })
    }

    /// The group (hash tag) part.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The resource name inside the group.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `lease:{group}:<name>`: the string key holding the owner token, with a PX TTL.
    pub fn lease_key(&self) -> String {
        format!("lease:{{{}}}:{}", self.group, self.name)
    }

    /// `lease:{group}:~fence`: the group's fencing counter and ceiling.
    pub fn fence_key(&self) -> String {
        fence_key(&self.group)
    }

    /// `lease:{group}:~holders`: the group's live holdings.
    pub fn holders_key(&self) -> String {
        holders_key(&self.group)
    }

    /// `lease:{group}:~retired`: the set of the group's resource names retired for good
    /// ([`LeaseStore::retire`](crate::LeaseStore::retire)), which no acquire grants again.
    pub fn retired_key(&self) -> String {
        format!("lease:{{{}}}:~retired", self.group)
    }

    /// `lease:{group}:~held-by:<holder>`: the names `holder` was granted in the group
    /// (`scripts/acquire.lua` writes it, `scripts/held_by.lua` reads it).
    pub fn held_by_key(&self, holder: &str) -> String {
        held_by_key(&self.group, holder)
    }

    /// `lease:{group}:~extended:<name>`: the lease's extension record, `"<fencing token>
    /// <granted_at_ms> <extensions>"`, which lapses with the lease
    /// ([`LeaseStore::extend_all`](crate::LeaseStore::extend_all)).
    pub fn extension_key(&self) -> String {
        format!("lease:{{{}}}:~extended:{}", self.group, self.name)
    }

    /// `lease:{group}:~reserving:<nonce>`: the marker of one block reservation in
    /// flight (see `scripts/raise_ceiling.lua`).
    pub(crate) fn reservation_key(&self, nonce: &str) -> String {
        format!("lease:{{{}}}:~reserving:{nonce}", self.group)
    }

    /// `lease:{group}:~events`: the pub/sub channel announcing the group's grants and
    /// releases (see [`crate::changes`]).
    pub fn events_channel(&self) -> String {
        events_channel(&self.group)
    }

    /// The key named by a lease key string `lease:{group}:<name>` (for example one
    /// reported by a Redis expiry notification), or `None` for any other key.
    pub fn from_lease_key(key: &str) -> Option<LeaseKey> {
        let rest = key.strip_prefix("lease:{")?;
        let (group, name) = rest.split_once("}:")?;
        LeaseKey::new(group, name).ok()
    }
}

/// `lease:{group}:~admitted`: the sorted set of the holders admitted to `group`'s
/// waiting room ([`crate::room`]), by admission owner token, scored by the admission's
/// expiry (Unix ms). `acquire.lua` reads it to gate a grant.
pub fn admitted_key(group: &str) -> String {
    format!("lease:{{{group}}}:~admitted")
}

/// `lease:{group}:~held-by:<holder>`: the names `holder` was granted in the group
/// (`scripts/acquire.lua` writes it and counts it under a per-holder limit, pruning
/// what lapsed; `scripts/held_by.lua` reads it).
pub(crate) fn held_by_key(group: &str, holder: &str) -> String {
    format!("lease:{{{group}}}:~held-by:{holder}")
}

pub(crate) fn events_channel(group: &str) -> String {
    format!("lease:{{{group}}}:~events")
}

pub(crate) fn fence_key(group: &str) -> String {
    format!("lease:{{{group}}}:~fence")
}

pub(crate) fn holders_key(group: &str) -> String {
    format!("lease:{{{group}}}:~holders")
}

impl fmt::Debug for LeaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.lease_key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_the_group_hash_tag() {
        let key = LeaseKey::new("event:7", "1234").unwrap();
        assert_eq!(key.lease_key(), "lease:{event:7}:1234");
        assert_eq!(key.fence_key(), "lease:{event:7}:~fence");
        assert_eq!(key.holders_key(), "lease:{event:7}:~holders");
        assert_eq!(key.retired_key(), "lease:{event:7}:~retired");
    }

    #[test]
    fn lease_key_strings_parse_back() {
        let key = LeaseKey::new("event:7", "1234").unwrap();
        assert_eq!(LeaseKey::from_lease_key(&key.lease_key()), Some(key));
        assert_eq!(LeaseKey::from_lease_key("lease:{event:7}:~fence"), None);
        assert_eq!(LeaseKey::from_lease_key("session:abc"), None);
    }

    #[test]
    fn rejects_parts_that_would_break_the_layout() {
        for (group, name) in [
            ("", "a"),
            ("a{b", "c"),
            ("g", "x}"),
            ("g", "~fence"),
            ("g h", "a"),
        ] {
            assert!(LeaseKey::new(group, name).is_err(), "{group:?} {name:?}");
        }
    }
}
