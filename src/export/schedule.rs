//! The nightly schedule: when the next export runs (Europe/Prague, across the clock
//! changes), one nightly export with its erasure purge and retention, and the loop the
//! daemon runs until its shutdown signal.

use std::path::{Path, PathBuf};

use super::{
    ExportError, ExportOptions, Format, Manifest, Table, export, purge, read_manifest,
    write_manifest,
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
    pub formats: Vec<Format>,
}

/// The name of a nightly export's directory: its Prague date and time
/// (`2026-03-01T020000`; `2026-03-01T0200` before seconds were added).
const NAME_FORMATS: &[&str] = &["%Y-%m-%dT%H%M%S", "%Y-%m-%dT%H%M"];

/// The nightly exports under `dir`, oldest first: only what the nightly run recognises
/// as its own, which is all it ever rewrites or deletes. An entry is one when it is a
/// directory itself (not a symbolic link to one, which is never followed), is named as
/// `NAME_FORMATS` name them, and holds a `manifest.json` that is a regular file and
/// parses as this program's export manifest ([`super::manifest::FORMAT`]). Anything else
/// kept there (a snapshot, another tool's directory, a link) is left alone; one named as
/// an export whose manifest is not one is named in a warning.
pub fn list_exports(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.flatten().filter_map(|e| own_export(&e.path())).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// `path` if it is a nightly export of this program (see [`list_exports`]).
fn own_export(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    let named = NAME_FORMATS
        .iter()
        .any(|f| chrono::NaiveDateTime::parse_from_str(name, f).is_ok());
    if !named || !std::fs::symlink_metadata(path).ok()?.file_type().is_dir() {
        return None;
    }
    let manifest = path.join("manifest.json");
    let own = std::fs::symlink_metadata(&manifest).is_ok_and(|m| m.file_type().is_file())
        && read_manifest(path).is_ok_and(|m| {
            m.format == super::manifest::FORMAT && m.program == super::manifest::PROGRAM
        });
    if !own {
        tracing::warn!(
            dir = %path.display(),
            "named as a nightly export but without this program's export manifest: left alone"
        );
        return None;
    }
    Some(path.to_path_buf())
}

/// One nightly export into `dir/<Prague date>T<HHMMSS>`, then removes all but the
/// newest `keep` of the exports [`list_exports`] recognises (nothing else). The previous export's watermark names the erasures to purge downstream.
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
            formats: n.formats.clone(),
            gzip: n.gzip,
            since_watermark: None,
            include_pii: n.include_pii,
            formula_guard: n.formula_guard,
            previous_watermark: previous,
            progress: false,
            // After the purge below, so that `latest` names the export whole.
            latest: false,
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
    // The newest complete export, last.
    super::point_latest(&new)?;
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
