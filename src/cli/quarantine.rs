//! `isir quarantine`: the spoiled records of the feed (held back or repaired): list
//! them, print one's bytes exactly as received, or parse the held-back ones again
//! ([`crate::quarantine::retry`]).

use std::io::Write;

use clap::Subcommand;

use super::{Exit, Output};
use crate::app::App;
use crate::quarantine::Retry;

#[derive(Subcommand, Debug)]
pub enum QuarantineCmd {
    /// The quarantine's rows: action ID, case, reason, status (held or repaired), when.
    List {
        /// Only the held-back records (not in the replica).
        #[arg(long)]
        held: bool,
        #[command(flatten)]
        out: Output,
    },
    /// Print a record's bytes exactly as received (to stdout, nothing added).
    Show {
        /// The action ID (the latest row of that ID), or `#SEQ` for a row by its key
        /// (a record whose ID could not be read).
        #[arg(value_name = "ID")]
        id: String,
    },
    /// Parse every held-back record again with the current parser; those that parse go
    /// into the replica and the projections are rebuilt. Takes the lease: stop the
    /// daemon first.
    Retry(Output),
}

pub async fn run(app: &App, cmd: QuarantineCmd) -> anyhow::Result<Exit> {
    match cmd {
        QuarantineCmd::List { held, out } => {
            let rows = app.store.quarantine_rows(held).await?;
            out.print(&rows, || {
                let mut o = String::from("seq\taction_id\tcase\treason\tstatus\treceived_at\n");
                for r in &rows {
                    o.push_str(&format!(
                        "{}\t{}\t{}\t{}\t{}\t{}\n",
                        r.seq,
                        r.action_id
                            .map(|i| i.to_string())
                            .unwrap_or_else(|| "-".into()),
                        r.case_number.as_deref().unwrap_or("-"),
                        r.reason,
                        r.status,
                        crate::store::fmt_ms(r.received_at)
                    ));
                }
                o
            })?;
            Ok(Exit::Ok)
        }
        QuarantineCmd::Show { id } => {
            let rows = app.store.quarantine_rows(false).await?;
            let seq = match id.strip_prefix('#') {
                Some(s) => s.parse::<i64>().ok(),
                None => {
                    let id: i64 = id
                        .parse()
                        .map_err(|_| anyhow::anyhow!("{id:?} is not an action ID or #SEQ"))?;
                    rows.iter()
                        .filter(|r| r.action_id == Some(id))
                        .map(|r| r.seq)
                        .max()
                }
            };
            let raw = match seq {
                Some(s) => app.store.quarantine_raw(s).await?,
                None => None,
            };
            let Some(raw) = raw else {
                anyhow::bail!("no quarantined record {id}");
            };
            let mut so = std::io::stdout().lock();
            so.write_all(&raw)?;
            so.flush()?;
            Ok(Exit::Ok)
        }
        QuarantineCmd::Retry(out) => {
            let p = &app.settings.projection;
            let r = crate::quarantine::retry(
                &app.store,
                &app.lease,
                p.rebuild_chunk,
                p.rebuild_wal_limit(),
            )
            .await?;
            match &r {
                Retry::Done {
                    tried,
                    released,
                    still_held,
                    rebuilt,
                } => {
                    out.print(&r, || {
                        format!(
                            "tried {tried}; released {} into the replica; {still_held} still held back; rebuilt: {}",
                            released.len(),
                            if rebuilt.is_empty() { "nothing".into() } else { rebuilt.join(", ") }
                        )
                    })?;
                    Ok(Exit::Ok)
                }
                Retry::LeaseHeld { holder, .. } => {
                    out.refused(
                        &r,
                        &format!("the lease is held by {holder}; stop the daemon first"),
                    )?;
                    Ok(Exit::LeaseHeld)
                }
            }
        }
    }
}
