//! The nightly schedule: when the next export runs (Europe/Prague, across the clock
//! changes), one nightly export with its erasure purge and retention, and the loop the
//! daemon runs until its shutdown signal.

use std::path::{Path, PathBuf};

use super::{
    ExportError, ExportOptions, Manifest, Table, export, purge, read_manifest, write_manifest,
};
use crate::store::Store;

/// The next time after `now` that is `at` in Prague (a time skipped by the spring
/// change runs at the first valid minute after it).
pub fn next_run(
    now: chrono::DateTime<chrono::Utc>,
    at: chrono::NaiveTime,
) -> chrono::DateTime<chrono::Utc> {
    use chrono::TimeZone;
    use chrono_tz::Europe::Prague;
    let local = now.with_timezone(&Prague).date_naive();
    for d in 0..3 {
        let day = local + chrono::Days::new(d);
        let mut t = day.and_time(at);
        for _ in 0..120 {
            if let Some(x) = Prague.from_local_datetime(&t).earliest() {
                let x = x.with_timezone(&chrono::Utc);
                if x > now {
                    return x;
                }
                break;
            }
            t += chrono::Duration::minutes(1);
        }
    }
    now + chrono::Duration::days(1)
}

/// The nightly schedule's settings.
#[derive(Debug, Clone)]
pub struct Nightly {
    pub at: chrono::NaiveTime,
    pub dir: PathBuf,
    pub keep: usize,
    pub gzip: bool,
    pub include_pii: bool,
    pub formula_guard: bool,
    pub tables: Vec<Table>,
}

/// Exports under `dir` named by their Prague date and time, oldest first.
pub fn list_exports(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.join("manifest.json").is_file())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// One nightly export into `dir/<Prague date>T<HHMM>`, then removes all but the newest
/// `keep`. The previous export's watermark names the erasures to purge downstream.
pub async fn nightly_once(store: &Store, n: &Nightly) -> Result<Manifest, ExportError> {
    use chrono_tz::Europe::Prague;
    std::fs::create_dir_all(&n.dir)?;
    let previous = list_exports(&n.dir)
        .last()
        .and_then(|p| read_manifest(p).ok())
        .map(|m| m.watermark.action_id);
    let name = chrono::Utc::now()
        .with_timezone(&Prague)
        .format("%Y-%m-%dT%H%M%S")
        .to_string();
    let m = export(
        store,
        &ExportOptions {
            out: n.dir.join(&name),
            tables: n.tables.clone(),
            gzip: n.gzip,
            since_watermark: None,
            include_pii: n.include_pii,
            formula_guard: n.formula_guard,
            previous_watermark: previous,
            progress: false,
        },
    )
    .await?;
    let mut m = m;
    let all = list_exports(&n.dir);
    let kept = if all.len() > n.keep {
        for old in &all[..all.len() - n.keep] {
            std::fs::remove_dir_all(old)?;
        }
        &all[all.len() - n.keep..]
    } else {
        &all[..]
    };
    // Erasure reaches what is kept: every earlier export is purged of the debtors
    // erased after its watermark, and this run's manifest says which.
    let new = n.dir.join(&name);
    let earlier: Vec<PathBuf> = kept.iter().filter(|p| **p != new).cloned().collect();
    m.purged = purge::purge(store, &earlier).await?;
    if !m.purged.is_empty() {
        write_manifest(&new, &m)?;
    }
    Ok(m)
}

/// Runs the nightly export at `n.at` Prague time until `shutdown`, while the phase
/// includes `project` (the projections exist). A failure is logged and retried the
/// next night.
pub async fn run_nightly(
    store: Store,
    n: Nightly,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let next = next_run(chrono::Utc::now(), n.at);
        let wait = (next - chrono::Utc::now()).to_std().unwrap_or_default();
        tracing::info!(at = %next, "next nightly export");
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.wait_for(|v| *v) => return,
        }
        let phase = store
            .setting("phase")
            .await
            .ok()
            .flatten()
            .and_then(|p| crate::phase::Phase::parse(&p));
        if phase.is_none_or(|p| p < crate::phase::Phase::Project) {
            tracing::info!("nightly export skipped: the phase does not include project");
            continue;
        }
        match nightly_once(&store, &n).await {
            Ok(m) => tracing::info!(
                watermark = m.watermark.action_id,
                files = m.files.len(),
                "nightly export written"
            ),
            Err(e) => tracing::error!(error = %e, "nightly export failed"),
        }
    }
}
