//! Runs the projection builders inside the daemon: after stored pages (debounced) and on
//! a schedule, only while the phase includes `project`.
//!
//! Owns scheduling only; the builders' logic is in `projection`. Never writes the
//! replica; never holds a transaction across a wait; stops on the shutdown signal.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, watch};

use crate::phase::Phase;
use crate::projection;
use crate::store::Store;

pub struct ProjectorOptions {
    pub chunk: i64,
    pub debounce: Duration,
    pub every: Duration,
    /// How often the projections' statistics are refreshed (`projection::analyze_live`).
    pub analyze_every: Duration,
}

/// One round: every builder catches up with the replica, a chunk at a time. Between
/// chunks it re-reads the phase and the shutdown signal, so a phase moved below
/// `project` (or a shutdown) stops the round within one chunk. Errors are logged and
/// stored in `proj_meta` by the builder; the round goes on with the next builder.
pub async fn round(store: &Store, chunk: i64, shutdown: &watch::Receiver<bool>) -> bool {
    let mut ok = true;
    for name in projection::NAMES {
        if let Err(e) = projection::ensure(store, name).await {
            tracing::warn!(builder = name, error = %e, "projection round stopped");
            ok = false;
            continue;
        }
        loop {
            if *shutdown.borrow() || !projects(store).await {
                return ok;
            }
            match projection::step(store, name, name, chunk).await {
                Ok(s) if s.applied > 0 => {}
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(builder = name, error = %e, "projection round stopped");
                    ok = false;
                    break;
                }
            }
        }
    }
    ok
}

/// Whether the stored phase includes `project` (the projector's and the notifier's gate).
pub async fn projects(store: &Store) -> bool {
    store
        .setting("phase")
        .await
        .ok()
        .flatten()
        .and_then(|p| Phase::parse(&p))
        .is_some_and(|p| p >= Phase::Project)
}

/// Loops until `shutdown`: waits for `stored` or the schedule, debounces, runs a round
/// when the phase allows.
pub async fn run(
    store: Store,
    stored: Arc<Notify>,
    opts: ProjectorOptions,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut analyzed = tokio::time::Instant::now();
    loop {
        let woken = tokio::select! {
            _ = stored.notified() => true,
            _ = tokio::time::sleep(opts.every) => false,
            _ = shutdown.wait_for(|v| *v) => return,
        };
        if woken {
            tokio::select! {
                _ = tokio::time::sleep(opts.debounce) => {}
                _ = shutdown.wait_for(|v| *v) => return,
            }
        }
        if projects(&store).await {
            round(&store, opts.chunk, &shutdown).await;
            if analyzed.elapsed() >= opts.analyze_every {
                analyzed = tokio::time::Instant::now();
                if let Err(e) = projection::analyze_live(&store).await {
                    tracing::warn!(error = %e, "refreshing the projections' statistics failed");
                }
            }
        }
    }
}
