//! `isir snapshot`: write every stored action to compressed chunks with a manifest, or
//! load one (verified before it commits) and build the projections.

use std::path::PathBuf;

use std::io::IsTerminal;

use clap::Subcommand;

use super::{Exit, Output};
use crate::app::App;
use crate::checkpoint::show;

#[derive(Subcommand, Debug)]
pub enum SnapshotCmd {
    /// Write every stored action (compressed chunks, manifest with checksums).
    Create {
        /// The snapshot's directory (default: snapshot-<UTC time>).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Only actions after this ID (an incremental snapshot).
        #[arg(long, default_value_t = -1, allow_hyphen_values = true, value_name = "ID")]
        after: i64,
        /// Actions a chunk file holds.
        #[arg(long, default_value_t = crate::snapshot::CHUNK_ACTIONS, value_name = "ACTIONS")]
        chunk: i64,
        /// Recorded in the manifest only: a snapshot is the raw replica, personal data
        /// included, and the notes of erased cases are redacted whatever this flag
        /// (§ 425: erasure is the law, not a scope).
        #[arg(long)]
        include_pii: bool,
        #[command(flatten)]
        out_format: Output,
    },
    /// Load a snapshot (verified before it commits), set the checkpoint to its
    /// watermark and build the projections. Stop the daemon first.
    Restore {
        /// The snapshot's directory.
        dir: PathBuf,
        /// Into a store that holds actions: add exactly those after its checkpoint.
        #[arg(long)]
        append: bool,
        /// Leave the projections to the daemon.
        #[arg(long)]
        no_project: bool,
        #[command(flatten)]
        out: Output,
    },
}

pub async fn run(app: &App, cmd: SnapshotCmd) -> anyhow::Result<Exit> {
    match cmd {
        SnapshotCmd::Create {
            out,
            after,
            chunk,
            include_pii,
            out_format,
        } => {
            let out = out.unwrap_or_else(crate::snapshot::default_dir);
            let m = crate::snapshot::create(
                &app.store,
                &out,
                after,
                chunk,
                !out_format.json && std::io::stderr().is_terminal(),
                include_pii,
            )
            .await?;
            out_format.print(&m, || {
                format!(
                    "snapshot of {} actions in {} chunks written to {} (checkpoint {})",
                    m.actions,
                    m.chunks.len(),
                    out.display(),
                    show(m.checkpoint)
                )
            })?;
            Ok(Exit::Ok)
        }
        SnapshotCmd::Restore {
            dir,
            append,
            no_project,
            out,
        } => {
            let started = std::time::Instant::now();
            let r = crate::snapshot::restore(
                &app.store,
                &app.lease,
                &dir,
                append,
                !out.json && std::io::stderr().is_terminal(),
            )
            .await?;
            let secs = started.elapsed().as_secs_f64();
            tracing::info!(actions = r.actions, epoch = r.epoch, "snapshot restored");
            if !out.json {
                outln!(
                    "restored {} actions ({} already held) in {secs:.1} s ({:.0} actions/s); checkpoint {}",
                    r.actions,
                    r.skipped,
                    r.actions as f64 / secs.max(1e-9),
                    show(r.checkpoint)
                );
            }
            let mut built = Vec::new();
            if !no_project {
                let chunk = app.settings.projection.rebuild_chunk;
                for name in crate::projection::NAMES {
                    let m = if append {
                        crate::projection::catch_up(&app.store, name, app.settings.projection.chunk)
                            .await?
                    } else {
                        crate::projection::rebuild_with(
                            &app.store,
                            name,
                            chunk,
                            app.settings.projection.rebuild_wal_limit(),
                        )
                        .await?
                    };
                    if !out.json {
                        outln!("projection {name} built to {}", m.cursor);
                    }
                    built.push(serde_json::json!({"name": name, "cursor": m.cursor}));
                }
            }
            if out.json {
                out.print(
                    &serde_json::json!({"restored": r, "seconds": secs, "projections": built}),
                    String::new,
                )?;
            }
            Ok(Exit::Ok)
        }
    }
}
