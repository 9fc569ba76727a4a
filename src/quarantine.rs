//! `isir quarantine retry`: every held-back record parsed again with the current parser,
//! under the writer's lease, and what now parses moved into the replica with the
//! projections rebuilt so that they equal a fresh rebuild.
//!
//! Owns the order of a retry: lease, parse, release (fenced by the grant's epoch, one
//! transaction a record: [`crate::store::Store::release_quarantined`]), rebuild, lease
//! back. It never moves the checkpoint (already past every quarantined ID) and never
//! writes a record that still does not parse.

use serde::Serialize;

use crate::lease::{Acquire, Lease};
use crate::source::parse::parse_record;
use crate::store::Store;

/// What a retry did.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Retry {
    Done {
        /// Held-back records tried.
        tried: usize,
        /// Action IDs now in the replica.
        released: Vec<i64>,
        /// Still held back (they still do not parse, or their ID is already stored).
        still_held: usize,
        /// Projections rebuilt (when anything was released).
        rebuilt: Vec<String>,
    },
    /// Another process holds the lease (stop the daemon first).
    LeaseHeld {
        holder: String,
        expires_at: Option<i64>,
    },
}

/// Parses every held-back record again; see the module doc. `chunk` is the rebuild's
/// batch size, `wal_limit` its SQLite WAL limit.
pub async fn retry(
    store: &Store,
    lease: &Lease,
    chunk: i64,
    wal_limit: u64,
) -> anyhow::Result<Retry> {
    let grant = match lease.acquire().await? {
        Acquire::Granted(g) => g,
        Acquire::HeldBy { holder, expires_at } => {
            return Ok(Retry::LeaseHeld { holder, expires_at });
        }
    };
    let done = async {
        let rows = store.quarantine_rows(true).await?;
        let mut released = Vec::new();
        for row in &rows {
            let Some(raw) = store.quarantine_raw(row.seq).await? else {
                continue;
            };
            let Ok((rec, repaired)) = parse_record(&raw) else {
                continue;
            };
            if store
                .release_quarantined(grant.epoch, row.seq, &rec.action, repaired)
                .await?
            {
                tracing::info!(action_id = rec.action.id, reason = %row.reason, "held-back record released into the replica");
                released.push(rec.action.id);
            }
        }
        let mut rebuilt = Vec::new();
        if !released.is_empty() {
            // The actions sit behind every builder's cursor: a side-by-side rebuild puts
            // them where a fresh build would.
            for name in crate::projection::NAMES {
                crate::projection::rebuild_with(store, name, chunk, wal_limit).await?;
                rebuilt.push(name.to_string());
            }
        }
        Ok::<_, anyhow::Error>(Retry::Done {
            tried: rows.len(),
            still_held: rows.len() - released.len(),
            released,
            rebuilt,
        })
    }
    .await;
    lease.release(grant.epoch).await?;
    done
}
