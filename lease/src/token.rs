//! The two tokens of a grant: the secret [`OwnerToken`] that proves ownership (step 3)
//! and the public [`FencingToken`] that orders writes (step 4).

use std::fmt;

use rand::RngCore;

/// A random secret naming one grant of a lease: 128 bits from the OS-seeded thread RNG,
/// as 32 lowercase hex digits. Stored as the lease key's value; release and renew succeed
/// only when the caller presents it. Never show it to other users.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct OwnerToken(String);

impl OwnerToken {
    /// A fresh random token (128 bits).
    pub fn random() -> Self {
        let mut bytes = [0u8; 16];
        rand::rng().fill_bytes(&mut bytes);
        OwnerToken(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// Wraps a token previously obtained from [`OwnerToken::as_str`], or derived by the
    /// caller (seatlock derives each admission's token from the buyer's signed cookie).
    pub fn from_string(token: String) -> Self {
        OwnerToken(token)
    }

    /// The token's text (32 hex digits).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for OwnerToken {
    /// Shows only the first 8 hex digits, so logs do not leak a usable secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerToken({}…)", &self.0[..self.0.len().min(8)])
    }
}

/// A fencing token: a number that strictly increases with every grant in a lease group
/// (Kleppmann's fencing tokens, Chubby's sequencers). The protected resource accepts a
/// write only if its token is not lower than the highest token it has already accepted.
/// Tokens never exceed [`MAX_FENCING_TOKEN`] (2^53 − 1), so they fit a Postgres `bigint`, a
/// JSON number and a Lua number (a double) exactly: a ledger ceiling above it is refused
/// with [`LeaseError::TokensExhausted`](crate::LeaseError::TokensExhausted) before Redis sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(
    /// The token's number, larger for every later grant in the same group.
    pub u64,
);

impl FencingToken {
    /// The token as a Postgres `bigint` (what a fenced row stores): exact, since tokens
    /// never exceed [`MAX_FENCING_TOKEN`] (2^53 − 1).
    pub fn as_i64(self) -> i64 {
        self.0 as i64
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The largest fencing token ever issued: 2^53 − 1, the largest integer that Redis's Lua
/// (whose numbers are doubles) and JSON hold exactly.
pub const MAX_FENCING_TOKEN: u64 = (1 << 53) - 1;
