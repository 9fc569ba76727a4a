//! A rebuild's WAL limit on a SQLite file: the writer asks its reader thread to stop
//! between two read snapshots when the WAL has outgrown `projection.rebuild_wal_limit_mib`,
//! then checkpoints and truncates the WAL and lets the reader go on.
//!
//! Owns that hand-shake and the truncation. It never truncates while the rebuild's reader
//! holds a snapshot, and never fails a rebuild because another reader of the file kept
//! the WAL from being truncated (it tries again after the next step of growth).

use std::sync::{Arc, Condvar, Mutex};

use super::ProjectionError;

/// Where a rebuild's reader and writer meet to truncate a SQLite WAL. SQLite starts its
/// WAL over only when no reader holds a snapshot as a write begins; the reader, one
/// batch ahead, nearly always holds one. So the writer asks ([`WalGate::want`]); the
/// reader, between two snapshots, holding none, says so in the stream of batches
/// ([`Read::Stopped`], so the writer sees it in order, after the batches before it) and
/// waits ([`WalGate::stop_if_wanted`]); the writer truncates the WAL and lets it go on
/// ([`WalGate::open`]).
#[derive(Debug, Default)]
pub(super) struct WalGate {
    wanted: Mutex<bool>,
    turn: Condvar,
}

impl WalGate {
    fn lock(&self) -> std::sync::MutexGuard<'_, bool> {
        self.wanted.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The writer asks the reader to stop at its next snapshot boundary.
    pub(super) fn want(&self) {
        *self.lock() = true;
    }

    /// The writer lets the reader go on.
    pub(super) fn open(&self) {
        *self.lock() = false;
        self.turn.notify_all();
    }

    /// The reader, holding no snapshot: if the writer asked, `say` tells it so (false:
    /// the writer has gone) and the reader waits until it lets go on, or until `gone()`.
    pub(super) fn stop_if_wanted(&self, say: impl FnOnce() -> bool, gone: impl Fn() -> bool) {
        if !*self.lock() || !say() {
            return;
        }
        let mut wanted = self.lock();
        while *wanted && !gone() {
            wanted = self
                .turn
                .wait_timeout(wanted, std::time::Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// The writer's side of a rebuild's WAL limit on a SQLite file.
pub(super) struct WalLimit {
    wal: std::path::PathBuf,
    writer: Arc<crate::store::direct::Pool>,
    pub(super) gate: Arc<WalGate>,
    /// The size past which the reader is asked to stop.
    limit: u64,
    /// The configured limit; after a truncation that other readers of the file kept from
    /// finishing, the next try waits until the WAL has grown by this much again.
    step: u64,
}

impl WalLimit {
    pub(super) fn new(
        db: &std::path::Path,
        writer: Arc<crate::store::direct::Pool>,
        step: u64,
    ) -> Self {
        let mut wal = db.as_os_str().to_owned();
        wal.push("-wal");
        WalLimit {
            wal: wal.into(),
            writer,
            gate: Arc::new(WalGate::default()),
            limit: step,
            step,
        }
    }

    fn size(&self) -> u64 {
        std::fs::metadata(&self.wal).map(|m| m.len()).unwrap_or(0)
    }

    /// After each commit of the writer: asks the reader to stop when the WAL has outgrown
    /// the limit.
    pub(super) fn after_commit(&self) {
        if self.size() > self.limit {
            self.gate.want();
        }
    }

    /// The reader has stopped: truncates the WAL and lets the reader go on.
    pub(super) fn truncate(&mut self) -> Result<(), ProjectionError> {
        let truncated = truncate_wal(&self.writer);
        self.gate.open();
        let size = self.size();
        if truncated.map_err(crate::store::direct::to_sqlx)? {
            self.limit = self.step;
        } else {
            tracing::debug!(
                wal_bytes = size,
                "the WAL could not be truncated (another reader of the file?); going on"
            );
            self.limit = size.saturating_add(self.step);
        }
        Ok(())
    }
}

/// Checkpoints the whole WAL into the file and truncates it, waiting at most a second
/// for other readers of the file; whether it was truncated.
fn truncate_wal(writer: &Arc<crate::store::direct::Pool>) -> rusqlite::Result<bool> {
    let c = writer.get()?;
    let c = c.conn();
    c.busy_timeout(std::time::Duration::from_secs(1))?;
    let busy = c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
        r.get::<_, i64>(0)
    });
    c.busy_timeout(crate::store::direct::BUSY_TIMEOUT)?;
    Ok(busy? == 0)
}
