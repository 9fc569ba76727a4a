//! `isir lease`: show the writer's lease, or release it by force.

use clap::Subcommand;

use super::{Exit, Output};
use crate::app::App;

#[derive(Subcommand, Debug)]
pub enum LeaseCmd {
    /// Who holds the lease, until when, and its epoch.
    Show(Output),
    /// Remove the lease whoever holds it. The holder is fenced by the next grant's epoch.
    Release {
        /// Required: this takes the lease from a running daemon.
        #[arg(long, required = true)]
        force: bool,
        #[command(flatten)]
        out: Output,
    },
}

pub async fn run(app: &App, cmd: LeaseCmd) -> anyhow::Result<Exit> {
    match cmd {
        LeaseCmd::Show(out) => {
            let l = app.lease.show().await?;
            out.print(&l, || serde_json::to_string_pretty(&l).unwrap_or_default())?;
        }
        LeaseCmd::Release { out, .. } => {
            let gone = app.lease.force_release().await?;
            tracing::warn!(released = gone, by = %crate::lease::holder_identity(), "lease released by force");
            out.print(&serde_json::json!({ "released": gone }), || {
                if gone {
                    "lease released"
                } else {
                    "no lease was held"
                }
                .into()
            })?;
        }
    }
    Ok(Exit::Ok)
}
