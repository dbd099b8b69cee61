//! The auction items this process has seen exist: a cache of the existence probe, so a
//! bid on an unknown id takes no lock (each distinct id would leave a fence ceiling row
//! in Postgres and a fence hash in Redis behind).

use super::queries;
use crate::http::error::Result;

/// The auction items this process has seen exist, so that only the first bid on an item
/// pays the existence probe. Only ids found in Postgres are remembered, so unknown ids
/// cannot grow it; items are never deleted (a deleted item's id would let one bid take a
/// lock, leaving one fence row behind).
#[derive(Debug, Default)]
pub struct KnownItems(std::sync::Mutex<std::collections::HashSet<i64>>);

impl KnownItems {
    /// Whether item `item_id` exists: from memory, else one primary-key probe.
    pub async fn exists(&self, db: &sqlx::PgPool, item_id: i64) -> Result<bool> {
        if self.0.lock().expect("not poisoned").contains(&item_id) {
            return Ok(true);
        }
        let exists = queries::item_exists(db, item_id).await?;
        if exists {
            self.0.lock().expect("not poisoned").insert(item_id);
        }
        Ok(exists)
    }
}
