//! Who is buying or bidding, as the pages and the SQL name them: a leaf, so that the
//! queries that record a buyer do not depend on the session that keeps it
//! ([`crate::http::buyer`]).

use serde::{Deserialize, Serialize};

/// Who is buying: the public part of the session.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BuyerProfile {
    /// Public random id (16 hex digits). Shown to other buyers' pages only as "someone".
    pub id: String,
    /// Display name, 1 to 40 characters.
    pub name: String,
}
