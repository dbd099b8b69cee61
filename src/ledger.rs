//! Step 5 in the app: the Postgres side of the fencing scheme.
//! [`PgFenceLedger`] is [`lease::FenceLedger`] over the `fence_ceilings` table
//! (migrations/0002).
//! Redis issues fencing tokens up to a ceiling reserved here, the ceiling included.
//! So tokens never go backwards, even if Redis restarts empty.

use lease::FenceLedger;
use sqlx::PgPool;

/// Reserves blocks of fencing tokens in Postgres.
/// Each block is one `INSERT … ON CONFLICT DO UPDATE`: one round trip.
/// The block is durable once it returns.
#[derive(Clone)]
pub struct PgFenceLedger(pub PgPool);

/// Why [`PgFenceLedger`] could not reserve a block.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The block size does not fit the `bigint` column.
    #[error("block of {0} tokens does not fit a Postgres bigint")]
    BlockTooLarge(u64),
    /// Postgres failed or could not be reached.
    #[error(transparent)]
    Postgres(#[from] sqlx::Error),
}

impl FenceLedger for PgFenceLedger {
    type Error = LedgerError;

    async fn raise_ceiling(&self, group: &str, block: u64) -> Result<u64, LedgerError> {
        let block = i64::try_from(block).map_err(|_| LedgerError::BlockTooLarge(block))?;
        let reserve = sqlx::query_scalar(
            "INSERT INTO fence_ceilings (lease_group, ceiling) VALUES ($1, $2)
             ON CONFLICT (lease_group) DO UPDATE SET ceiling = fence_ceilings.ceiling + $2
             RETURNING ceiling",
        )
        .bind(group)
        .bind(block)
        .fetch_one(&self.0);
        let ceiling: i64 = crate::telemetry::postgres("fence_ledger", reserve).await?;
        Ok(ceiling as u64)
    }
}
