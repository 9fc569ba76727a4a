//! `isir checkpoint`: show the checkpoint, or set it by hand (an operator's repair,
//! under the lease and with a reason: [`crate::poller::by_hand::set_by_hand`]).

use clap::Subcommand;

use super::{Exit, Output};
use crate::app::App;
use crate::checkpoint;
use crate::poller::by_hand::{self, SetByHand};

#[derive(Subcommand, Debug)]
pub enum CheckpointCmd {
    /// The last stored action ID (`none` before the first).
    Get(Output),
    /// Set the checkpoint. Takes the lease first, so no daemon may be writing.
    Set {
        /// The new checkpoint: polling resumes after this action ID.
        #[arg(allow_hyphen_values = true, value_name = "ID")]
        id: i64,
        /// Required: a wrong checkpoint skips or repeats actions.
        #[arg(long, required = true)]
        force: bool,
        /// Why, for the log.
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        out: Output,
    },
}

pub async fn run(app: &App, cmd: CheckpointCmd) -> anyhow::Result<Exit> {
    match cmd {
        CheckpointCmd::Get(out) => {
            let c = by_hand::get(&app.store).await?;
            out.print(&serde_json::json!({ "checkpoint": c }), || {
                checkpoint::show(c)
            })?;
            Ok(Exit::Ok)
        }
        CheckpointCmd::Set {
            id, reason, out, ..
        } => {
            let r = by_hand::set_by_hand(&app.store, &app.lease, Some(id), &reason).await?;
            match &r {
                SetByHand::Set { before, after } => {
                    out.print(&r, || {
                        format!(
                            "checkpoint {} -> {}",
                            checkpoint::show(*before),
                            checkpoint::show(*after)
                        )
                    })?;
                    Ok(Exit::Ok)
                }
                SetByHand::LeaseHeld { holder, expires_at } => {
                    out.refused(
                        &r,
                        &format!(
                            "the lease is held by {holder} until {}; stop the daemon first",
                            expires_at
                                .map(crate::store::fmt_ms)
                                .unwrap_or_else(|| "unknown".into())
                        ),
                    )?;
                    Ok(Exit::LeaseHeld)
                }
            }
        }
    }
}
