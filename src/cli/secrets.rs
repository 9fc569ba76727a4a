//! `isir privacy export-key` and `isir db grant-reader`: how a PostgreSQL reader role
//! gets what it needs and not the replica's secrets (`docs/PRIVACY.md`, "Who may read
//! the database").
//!
//! Owns the two commands' glue only: the grants are [`crate::store::roles`]'s. Must never
//! print the key (it goes to a file its owner only may read) nor log it.

use std::io::Write;
use std::path::PathBuf;

use clap::Subcommand;

use super::{Exit, Output};
use crate::app::App;
use crate::store::Store;

#[derive(Subcommand, Debug)]
pub enum PrivacyCmd {
    /// Write the replica's privacy key to a new file (mode 0600) for a process whose
    /// database role may not read it (`database.privacy_key_file`). Run it as the writer.
    ExportKey {
        /// The file to create; it must not exist.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        #[command(flatten)]
        out_format: Output,
    },
}

#[derive(Subcommand, Debug)]
pub enum DbCmd {
    /// PostgreSQL: let an existing role read what `isir serve` and exports need, but not
    /// the privacy key nor webhook secrets. Run it as the writer (the tables' owner), and
    /// again after each upgrade.
    GrantReader {
        /// The role (create it first: CREATE ROLE isir_reader LOGIN PASSWORD '…').
        role: String,
        #[command(flatten)]
        out: Output,
    },
}

pub async fn privacy(app: &App, cmd: PrivacyCmd) -> anyhow::Result<Exit> {
    match cmd {
        PrivacyCmd::ExportKey { out, out_format } => {
            let key = crate::store::key::load(&app.store).await?;
            let mut o = std::fs::OpenOptions::new();
            o.write(true).create_new(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt;
                o.mode(0o600);
            }
            let mut f = o
                .open(&out)
                .map_err(|e| anyhow::anyhow!("{}: {e}", out.display()))?;
            f.write_all(format!("{}\n", key.to_hex()).as_bytes())?;
            f.sync_all()?;
            out_format.print(&serde_json::json!({"written": out}), || {
                format!(
                    "the privacy key is in {} (mode 0600); give it to readers as database.privacy_key_file",
                    out.display()
                )
            })?;
            Ok(Exit::Ok)
        }
    }
}

pub async fn db(app: &App, cmd: DbCmd) -> anyhow::Result<Exit> {
    match cmd {
        DbCmd::GrantReader { role, out } => {
            let Store::Postgres(pool) = &app.store else {
                anyhow::bail!(
                    "database roles are PostgreSQL's: a SQLite replica is one file, readable by \
                     its owner only (mode 0600); give readers a read-only copy or run them as its owner"
                );
            };
            let done = crate::store::roles::grant_reader(pool, &role).await?;
            out.print(
                &serde_json::json!({"role": role, "statements": done}),
                || {
                    format!(
                        "{role} may read the replica but not its secrets:\n{}",
                        done.join(";\n")
                    )
                },
            )?;
            Ok(Exit::Ok)
        }
    }
}
