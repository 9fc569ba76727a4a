//! `isir phase`: the feed's phase, switched on step by step (ingest, then project, then
//! serve); moving up to `serve` checks that the projections are caught up and verified.

use clap::Subcommand;

use super::{Exit, Output};
use crate::app::App;
use crate::phase::Phase;

#[derive(Subcommand, Debug)]
pub enum PhaseCmd {
    /// The phase now.
    Get(Output),
    /// Move to a phase. Moving up to `serve` checks that the projections are within
    /// 10 000 IDs of the replica and that a sample verifies, unless --force.
    Set {
        /// The phase to move to.
        #[arg(value_enum)]
        phase: Phase,
        /// Skip the precondition.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        out: Output,
    },
}

pub async fn run(app: &App, cmd: PhaseCmd) -> anyhow::Result<Exit> {
    let current = app
        .store
        .setting("phase")
        .await?
        .and_then(|p| Phase::parse(&p))
        .unwrap_or(Phase::Off);
    match cmd {
        PhaseCmd::Get(out) => {
            out.print(&serde_json::json!({ "phase": current }), || {
                current.as_str().into()
            })?;
            Ok(Exit::Ok)
        }
        PhaseCmd::Set {
            phase: to,
            force,
            out,
        } => {
            if to > current
                && !force
                && to >= Phase::Serve
                && let Some(why) = refusal(app).await?
            {
                out.refused(
                    &serde_json::json!({ "refused": why, "phase": current }),
                    &why,
                )?;
                return Ok(Exit::Refused);
            }
            app.store.set_setting("phase", to.as_str()).await?;
            tracing::warn!(
                from = current.as_str(),
                to = to.as_str(),
                forced = force,
                "phase changed"
            );
            out.print(&serde_json::json!({ "from": current, "to": to }), || {
                format!("phase {} -> {}", current.as_str(), to.as_str())
            })?;
            Ok(Exit::Ok)
        }
    }
}

/// Why the read API must not be switched on yet, if it must not.
async fn refusal(app: &App) -> anyhow::Result<Option<String>> {
    crate::projection::ensure_all(&app.store).await?;
    let head = app.store.checkpoint().await?.unwrap_or(-1);
    let lag = crate::projection::metas(&app.store)
        .await?
        .iter()
        .map(|m| head - m.cursor)
        .max()
        .unwrap_or(0);
    if lag > 10_000 {
        return Ok(Some(format!(
            "the projections are {lag} IDs behind the replica (at most 10000); run `isir project catch-up` or use --force"
        )));
    }
    let r = crate::projection::verify::verify(&app.store, 100, None).await?;
    if !r.clean() {
        return Ok(Some(format!(
            "`isir project verify` found {} differences; see `isir project verify`, or use --force",
            r.differences.len()
        )));
    }
    Ok(None)
}
