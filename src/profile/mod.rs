//! Who is buying or bidding, as the pages and the SQL name them. This file is a leaf:
//! the queries that record a buyer do not depend on how the buyer is known
//! ([`crate::http::buyer`]). [`routes`] is `POST /me`, where a buyer names themselves.

use serde::{Deserialize, Serialize};

pub mod routes;

/// Who is buying: the buyer's id and display name.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BuyerProfile {
    /// Public random id (16 hex digits). Shown to other buyers' pages only as "someone".
    pub id: String,
    /// Display name, 1 to 40 characters.
    pub name: String,
}
