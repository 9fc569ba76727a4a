//! Keeps the lease while a tick runs: renews it every third of its TTL on a task of its
//! own and flags a refused or failed renewal, which the tick checks between requests.
//!
//! Owns that task (aborted when the keeper is dropped). It never takes a new lease and
//! never writes the replica.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::lease::Lease;

/// Renews the lease every third of its TTL while a tick runs; flags a failed renewal.
pub(super) struct Keeper {
    lost: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Keeper {
    pub(super) fn start(lease: Arc<Lease>, epoch: i64) -> Self {
        let lost = Arc::new(AtomicBool::new(false));
        let flag = lost.clone();
        let period = lease.ttl() / 3;
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                match lease.renew(epoch).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(epoch, "lease renewal refused: the lease is no longer ours");
                        flag.store(true, Ordering::SeqCst);
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(epoch, error = %e, "lease renewal failed");
                        flag.store(true, Ordering::SeqCst);
                        return;
                    }
                }
            }
        });
        Self { lost, task }
    }
    pub(super) fn lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}
