//! The checkpoint moved by hand, an operator's repair (`isir checkpoint set`): under the
//! lease, fenced like a write, logged with who, from where to where and why
//! ([`crate::checkpoint`]'s rule 5).
//!
//! Owns the by-hand move only; the rules of a move are [`crate::checkpoint`]'s and the
//! statement the store's. Never moves the checkpoint without the lease.

use crate::lease::{Acquire, Lease};
use crate::store::{Store, StoreError};

/// The store's checkpoint now.
pub async fn get(store: &Store) -> Result<Option<i64>, StoreError> {
    Ok(store.writer_state().await?.checkpoint)
}

/// What a move by hand did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum SetByHand {
    /// Moved from `before` to `after`.
    Set {
        before: Option<i64>,
        after: Option<i64>,
    },
    /// Refused: another process holds the lease (stop the daemon first).
    LeaseHeld {
        holder: String,
        expires_at: Option<i64>,
    },
}

/// Moves the checkpoint by hand (an operator's repair): takes the lease (refusing while
/// another process holds it), sets the checkpoint fenced by the grant's epoch, gives the
/// lease back, and logs who moved it from where to where and why.
pub async fn set_by_hand(
    store: &Store,
    lease: &Lease,
    to: Option<i64>,
    reason: &str,
) -> anyhow::Result<SetByHand> {
    let grant = match lease.acquire().await? {
        Acquire::Granted(g) => g,
        Acquire::HeldBy { holder, expires_at } => {
            return Ok(SetByHand::LeaseHeld { holder, expires_at });
        }
    };
    let moved = async {
        let before = get(store).await?;
        store.set_checkpoint(grant.epoch, to).await?;
        Ok::<_, StoreError>(before)
    }
    .await;
    // The lease goes back whether or not the move held.
    lease.release(grant.epoch).await?;
    let before = moved?;
    tracing::warn!(?before, after = ?to, by = %lease.holder(), %reason, "checkpoint set by hand");
    Ok(SetByHand::Set { before, after: to })
}
