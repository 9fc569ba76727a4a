//! `isir project`: the projection builders' state, catching up, rebuilding side by side
//! and verifying a sample against the replica.

use clap::Subcommand;
use clap::builder::PossibleValuesParser;

use super::{Exit, Output};
use crate::app::App;
use crate::projection;

#[derive(Subcommand, Debug)]
pub enum ProjectCmd {
    /// Each builder's cursor, lag and counters.
    Status(Output),
    /// Apply everything the replica holds now.
    CatchUp {
        /// One builder (default: every one).
        #[arg(value_parser = PossibleValuesParser::new(projection::NAMES))]
        name: Option<String>,
        #[command(flatten)]
        out: Output,
    },
    /// Build a new version side by side from the first action, verify a sample of it,
    /// and swap it in.
    Rebuild {
        /// One builder (default: every one).
        #[arg(value_parser = PossibleValuesParser::new(projection::NAMES))]
        name: Option<String>,
        #[command(flatten)]
        out: Output,
    },
    /// Recompute a random sample of cases from the replica and compare; exit 9 on any
    /// difference.
    Verify {
        /// Cases to recompute.
        #[arg(long, default_value_t = 100)]
        sample: usize,
        #[command(flatten)]
        out: Output,
    },
}

fn names(n: Option<String>) -> Vec<String> {
    n.map(|n| vec![n])
        .unwrap_or_else(|| projection::NAMES.iter().map(|s| s.to_string()).collect())
}

pub async fn run(app: &App, cmd: ProjectCmd) -> anyhow::Result<Exit> {
    let chunk = app.settings.projection.chunk;
    match cmd {
        ProjectCmd::Status(out) => {
            projection::ensure_all(&app.store).await?;
            let head = app.store.checkpoint().await?.unwrap_or(-1);
            let metas = projection::metas(&app.store).await?;
            let rows: Vec<serde_json::Value> = metas
                .iter()
                .map(|m| {
                    let mut v = serde_json::to_value(m).unwrap_or_default();
                    v["lag_ids"] = (head - m.cursor).max(0).into();
                    v
                })
                .collect();
            let watermark = projection::watermark(&metas);
            let notifiers: Vec<_> = crate::status::watch_status(&app.store, watermark)
                .await
                .into_iter()
                .filter(|w| w.list.webhook_url.is_some())
                .collect();
            out.print(&serde_json::json!({ "checkpoint": head, "builders": rows, "notifiers": notifiers }), || {
                let notes: String = notifiers
                    .iter()
                    .map(|w| {
                        format!(
                            "notify:{:<9} cursor {:>12} lag {:>10} IDs  delivered {} events{}{}\n",
                            w.list.name,
                            w.list.cursor,
                            w.lag_ids.unwrap_or(0),
                            w.list.delivered_events,
                            if w.list.failing == 1 { "  FAILING" } else { "" },
                            w.list
                                .last_error
                                .as_ref()
                                .map(|e| format!("  last error: {e}"))
                                .unwrap_or_default()
                        )
                    })
                    .collect();
                let builders: String = metas
                    .iter()
                    .map(|m| {
                        format!(
                            "{:<16} v{} cursor {:>12} lag {:>10} IDs  applied {} unknown codes {} other unknown {} unparsed {} erased {}{}\n",
                            m.name,
                            m.version,
                            m.cursor,
                            (head - m.cursor).max(0),
                            m.counts.applied,
                            m.counts.unknown_codes,
                            m.counts.unknown_other,
                            m.counts.unparsed,
                            m.counts.erased,
                            m.error
                                .as_ref()
                                .map(|e| format!("  STOPPED: {e}"))
                                .unwrap_or_default()
                        )
                    })
                    .collect();
                builders + &notes
            })?;
            Ok(Exit::Ok)
        }
        ProjectCmd::CatchUp { name, out } => {
            let mut done = Vec::new();
            for n in names(name) {
                let m = projection::catch_up(&app.store, &n, chunk).await?;
                done.push(m);
            }
            out.print(&done, || {
                done.iter()
                    .map(|m| format!("{}: cursor {}\n", m.name, m.cursor))
                    .collect()
            })?;
            Ok(Exit::Ok)
        }
        ProjectCmd::Rebuild { name, out } => {
            let mut done = Vec::new();
            for n in names(name) {
                let t = std::time::Instant::now();
                let p = &app.settings.projection;
                let m = projection::rebuild_with(
                    &app.store,
                    &n,
                    p.rebuild_chunk,
                    p.rebuild_wal_limit(),
                )
                .await?;
                let secs = t.elapsed().as_secs_f64();
                if !out.json {
                    outln!(
                        "{n}: version {} swapped in at cursor {} after {secs:.1} s",
                        m.version,
                        m.cursor
                    );
                }
                done.push(serde_json::json!({"name": n, "version": m.version, "cursor": m.cursor, "seconds": secs}));
            }
            if out.json {
                out.print(&done, String::new)?;
            }
            Ok(Exit::Ok)
        }
        ProjectCmd::Verify { sample, out } => {
            let r = projection::verify::verify(&app.store, sample, None).await?;
            out.print(&r, || {
                let mut t: String = r
                    .differences
                    .iter()
                    .map(|d| format!("DIFF {d}\n"))
                    .collect();
                t.push_str(&format!(
                    "verified {} cases: {} differences",
                    r.checked,
                    r.differences.len()
                ));
                t
            })?;
            Ok(if r.clean() {
                Exit::Ok
            } else {
                Exit::Differences
            })
        }
    }
}
