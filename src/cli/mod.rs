//! The command line: argument shapes, one file per command group, and a `main` that
//! dispatches. Each command builds what it needs through [`crate::app`] (the writer's
//! parts) or opens a read-only store, and calls into the library.
//!
//! Owns argument parsing, what a command prints (text, or JSON with `--json`) and exit
//! codes ([`Exit`]). It holds no logic beyond glue: ticks are the poller's, exports the
//! exporter's, moves of the checkpoint [`crate::checkpoint`]'s.

/// `println!` for a command's output: through [`write_out`], so a closed pipe ends the
/// command quietly.
macro_rules! outln {
    () => {
        $crate::cli::write_out("\n")
    };
    ($($t:tt)*) => {
        $crate::cli::write_out(&format!("{}\n", format_args!($($t)*)))
    };
}

/// `print!` for a command's output, through [`write_out`].
macro_rules! out {
    ($($t:tt)*) => {
        $crate::cli::write_out(&format!($($t)*))
    };
}

mod checkpoint;
mod exit;
mod export;
mod lease;
mod phase;
mod process;
mod project;
mod quarantine;
mod secrets;
mod snapshot;
mod source;
mod status;
mod watch;

use std::path::PathBuf;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};

pub use exit::Exit;

use crate::app::App;
use crate::config::Settings;

#[derive(Parser, Debug)]
#[command(
    name = "isir",
    version,
    about = "A replica of the Czech insolvency register (ISIR)",
    long_about = "A replica of the Czech insolvency register (ISIR): one writer polls the \
        register's web service into a replica, projection builders turn it into cases, \
        parties and timelines, and readers serve them over HTTP and as CSV exports. \
        Settings come from isir.toml and ISIR_SECTION__KEY variables (see README).",
    after_help = exit::HELP
)]
pub struct Cli {
    /// Configuration file (default: ./isir.toml when present).
    #[arg(long, global = true, env = "ISIR_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

/// `--json`: print the result as one JSON document instead of text.
#[derive(clap::Args, Debug, Clone, Copy, Default)]
pub struct Output {
    /// Print the result as JSON (one document on stdout) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Writes a command's output to stdout. A reader that has gone (a closed pipe, as in
/// `isir openapi | head -1`) ends the command quietly with exit code 0, as Unix tools
/// end, instead of a panic; any other failure to write is an error (exit 1).
pub fn write_out(s: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_all(s.as_bytes()).and_then(|()| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(Exit::Ok.code());
        }
        eprintln!("error: writing to stdout: {e}");
        std::process::exit(Exit::Error.code());
    }
}

impl Output {
    /// Prints `value` as JSON, or `text` for people.
    pub fn print<T: serde::Serialize>(
        self,
        value: &T,
        text: impl FnOnce() -> String,
    ) -> anyhow::Result<()> {
        if self.json {
            outln!("{}", serde_json::to_string_pretty(value)?);
        } else {
            let t = text();
            out!("{t}");
            if !t.ends_with('\n') {
                outln!();
            }
        }
        Ok(())
    }
    /// Prints a refusal: `value` as JSON on stdout, or `refused: {why}` on stderr.
    pub fn refused<T: serde::Serialize>(self, value: &T, why: &str) -> anyhow::Result<()> {
        if self.json {
            outln!("{}", serde_json::to_string_pretty(value)?);
        } else {
            eprintln!("refused: {why}");
        }
        Ok(())
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the daemon: a tick every poll.period_secs with the projections, the HTTP
    /// server and the nightly export beside it, until SIGINT or SIGTERM.
    Run,
    /// Run the daemon against a built-in simulator, in ./isir-demo.db, offline.
    Demo(process::DemoArgs),
    /// Run one tick and exit; the exit code tells the outcome (see below).
    Poll(process::PollArgs),
    /// Apply the database migrations (and create the replica's privacy key).
    Migrate(Output),
    /// Serve the read API alone (no lease, no writes, no migrations), on api.bind.
    Serve,
    /// Print the read API's OpenAPI 3.1 description (as served at /openapi.json).
    Openapi,
    /// Write a CSV export of the projections (one consistent snapshot) with a manifest.
    Export(export::ExportArgs),
    /// Show the replica's state: checkpoint, lease, budget, last tick, head and lag.
    Status(Output),
    /// Print what the register returns after an action ID (spends budget).
    Fetch(source::FetchArgs),
    /// Run the ISIR simulator on loopback (the real protocol, deterministic data,
    /// injectable faults).
    Sim(source::SimArgs),
    /// The writer's lease: show it, or release it by force.
    Lease {
        #[command(subcommand)]
        cmd: lease::LeaseCmd,
    },
    /// Replica snapshots: create one, or restore one into an empty store.
    Snapshot {
        #[command(subcommand)]
        cmd: snapshot::SnapshotCmd,
    },
    /// The checkpoint (the last stored action ID): show it, or set it by hand.
    Checkpoint {
        #[command(subcommand)]
        cmd: checkpoint::CheckpointCmd,
    },
    /// The projections: status, catch up, rebuild, verify.
    Project {
        #[command(subcommand)]
        cmd: project::ProjectCmd,
    },
    /// Spoiled records of the feed: list them, show one's bytes, retry the held-back ones.
    Quarantine {
        #[command(subcommand)]
        cmd: quarantine::QuarantineCmd,
    },
    /// The feed's phase (off, ingest, project, serve), stored in the database.
    Phase {
        #[command(subcommand)]
        cmd: phase::PhaseCmd,
    },
    /// Watchlists: named sets of IČOs, birth numbers and cases whose change feed
    /// creditors read (`/v1/watchlists/NAME/events`) or get by webhook.
    Watch {
        #[command(subcommand)]
        cmd: watch::WatchCmd,
    },
    /// The replica's privacy key, for a process whose database role may not read it.
    Privacy {
        #[command(subcommand)]
        cmd: secrets::PrivacyCmd,
    },
    /// Database roles: a PostgreSQL reader role without the replica's secrets.
    Db {
        #[command(subcommand)]
        cmd: secrets::DbCmd,
    },
    /// Print a shell completion script (e.g. `isir completions bash >
    /// /etc/bash_completion.d/isir`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// The commands that make a replica where there is none: the writer (`run`, and its one
/// tick `poll --once`), `migrate` and a snapshot's restore (and `demo`, on its own
/// database). Every other command works on a replica that exists.
fn creates_replica(c: &Command) -> bool {
    matches!(
        c,
        Command::Run
            | Command::Poll(_)
            | Command::Migrate(_)
            | Command::Snapshot {
                cmd: snapshot::SnapshotCmd::Restore { .. }
            }
    )
}

/// Refuses a `database.url` that holds no replica (a mistyped path would otherwise be
/// a new, empty one, and the command would report an empty state as if it were true).
async fn require_replica(settings: &Settings) -> anyhow::Result<()> {
    let url = &settings.database.url;
    if crate::store::Store::replica_exists(url).await? {
        return Ok(());
    }
    anyhow::bail!(
        "no replica at {} (database.url): `isir migrate` or `isir run` creates one",
        crate::app::redact(url)
    )
}

/// Loads the settings and starts logging in their format.
fn settings(config: Option<&std::path::Path>) -> anyhow::Result<Settings> {
    let s = Settings::load(config)?;
    crate::logging::init(s.log.format);
    log_settings_file(config);
    Ok(s)
}

/// Says which settings file was read (none: defaults and `ISIR_` variables only).
fn log_settings_file(config: Option<&std::path::Path>) {
    match Settings::file_read(config) {
        Some(f) => tracing::info!(file = %f.display(), "settings file read"),
        None => tracing::debug!("no settings file: defaults and ISIR_ variables"),
    }
}

/// A read-only connection to `database.url` (exports, `isir serve`).
async fn read_only(settings: &Settings) -> anyhow::Result<crate::store::Store> {
    crate::store::Store::connect_read_only(
        &settings.database.url,
        settings.database.max_connections,
    )
    .await
    .with_context(|| {
        format!(
            "connecting read-only to database.url = {}",
            crate::app::redact(&settings.database.url)
        )
    })
}

/// Runs a parsed command line; returns the process exit code.
pub async fn main(cli: Cli) -> anyhow::Result<Exit> {
    let config = cli.config.as_deref();
    match cli.command {
        Command::Completions { shell } => {
            let mut cmd = Cli::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "isir", &mut script);
            write_out(&String::from_utf8_lossy(&script));
            Ok(Exit::Ok)
        }
        Command::Openapi => {
            outln!("{}", crate::api::openapi::json());
            Ok(Exit::Ok)
        }
        Command::Sim(args) => {
            crate::logging::init(Default::default());
            source::sim(args).await
        }
        Command::Serve => {
            // Readers scale out apart from the writer: no lease, no migrations, a
            // read-only pool.
            let settings = settings(config)?;
            let store = read_only(&settings).await?;
            crate::daemon::serve(
                &settings,
                store,
                crate::daemon::shutdown_signal("the answers in flight"),
            )
            .await?;
            Ok(Exit::Ok)
        }
        Command::Demo(args) => process::demo(config, args).await,
        Command::Export(args) => {
            let settings = settings(config)?;
            let store = read_only(&settings).await?;
            let r = export::run(&settings, &store, args).await;
            store.close().await;
            r
        }
        command => {
            let settings = settings(config)?;
            if !creates_replica(&command) {
                require_replica(&settings).await?;
            }
            let app = App::build(settings).await?;
            let code = match command {
                Command::Run => {
                    crate::daemon::run(&app, crate::daemon::shutdown_signal("the current page"))
                        .await?;
                    Exit::Ok
                }
                Command::Poll(_) => process::poll(&app).await?,
                Command::Migrate(out) => {
                    out.print(
                        &serde_json::json!({"migrated": true, "backend": app.store.backend()}),
                        || format!("migrations applied ({})", app.store.backend()),
                    )?;
                    Exit::Ok
                }
                Command::Status(out) => status::run(&app, out).await?,
                Command::Fetch(args) => source::fetch(&app, args).await?,
                Command::Lease { cmd } => lease::run(&app, cmd).await?,
                Command::Checkpoint { cmd } => checkpoint::run(&app, cmd).await?,
                Command::Snapshot { cmd } => snapshot::run(&app, cmd).await?,
                Command::Project { cmd } => project::run(&app, cmd).await?,
                Command::Phase { cmd } => phase::run(&app, cmd).await?,
                Command::Quarantine { cmd } => quarantine::run(&app, cmd).await?,
                Command::Watch { cmd } => watch::run(&app, cmd).await?,
                Command::Privacy { cmd } => secrets::privacy(&app, cmd).await?,
                Command::Db { cmd } => secrets::db(&app, cmd).await?,
                Command::Sim(_)
                | Command::Demo(_)
                | Command::Serve
                | Command::Openapi
                | Command::Export(_)
                | Command::Completions { .. } => unreachable!("handled above"),
            };
            app.store.close().await;
            Ok(code)
        }
    }
}
