//! A fence ledger in process memory, for examples and tests.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Mutex;

use crate::fence::FenceLedger;

/// A [`FenceLedger`] that keeps each group's ceiling in this process's memory.
///
/// **Not durable: it defeats step 5** (*a store that survives*). Its ceilings start again
/// from 0 whenever the process starts, so after Redis loses its data the fencing tokens
/// it lets Redis issue can go backwards, and a stale holder's write can be accepted
/// again. It is for examples and tests only, where Redis keeps its data for as long as
/// the ledger lives. In production back the ledger with a store that survives restarts
/// (seatlock uses one Postgres row per group).
///
/// Reservations never fail (its [`FenceLedger::Error`] is [`Infallible`]).
#[derive(Debug, Default)]
pub struct MemoryLedger {
    ceilings: Mutex<HashMap<String, u64>>,
}

impl MemoryLedger {
    /// An empty ledger: every group's ceiling starts at 0.
    pub fn new() -> Self {
        Self::default()
    }
}

impl FenceLedger for MemoryLedger {
    type Error = Infallible;

    async fn raise_ceiling(&self, group: &str, block: u64) -> Result<u64, Infallible> {
        let mut ceilings = self.ceilings.lock().unwrap_or_else(|e| e.into_inner());
        let ceiling = ceilings.entry(group.to_owned()).or_default();
        *ceiling += block;
        Ok(*ceiling)
    }
}
