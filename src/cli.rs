//! The command line: parses arguments and calls into the library.
//!
//! Owns argument shapes, process exit codes, logging set-up and signal handling. It holds
//! no logic of its own beyond glue: each command builds what it needs through `app`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use tokio::sync::watch;

use crate::app::App;
use crate::config::Settings;
use crate::poller::TickOutcome;
use crate::sim::{FaultPlan, SimOptions, Simulator};

#[derive(Parser, Debug)]
#[command(
    name = "isir",
    version,
    about = "A replica of the Czech insolvency register (ISIR)"
)]
pub struct Cli {
    /// Configuration file (default: ./isir.toml when present).
    #[arg(long, global = true, env = "ISIR_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the daemon: a tick every poll.period_secs, until SIGINT or SIGTERM.
    Run,
    /// Run the daemon against a built-in simulator, in ./isir-demo.db, offline.
    Demo {
        /// Actions the simulated register holds at start.
        #[arg(long, default_value_t = 20_000)]
        actions: usize,
        /// Seconds between ticks.
        #[arg(long, default_value_t = 5)]
        period: u64,
        /// New actions a second in the simulated register.
        #[arg(long, default_value_t = 2.0)]
        live_rate: f64,
        /// Database of the demo.
        #[arg(long, default_value = "sqlite://isir-demo.db")]
        database: String,
        /// Address of the demo's read API.
        #[arg(long, default_value = "127.0.0.1:8080")]
        api_bind: String,
    },
    /// Run one tick and exit: 0 progressed or caught up, 2 lease held elsewhere,
    /// 3 budget spent, 4 source error, 5 store or lease error, 6 ingestion disabled.
    Poll {
        #[arg(long, required = true)]
        once: bool,
    },
    /// Apply the database migrations.
    Migrate,
    /// Serve the read API alone (no lease, no writes), on api.bind.
    Serve,
    /// Print the read API's OpenAPI 3.1 description (as served at /openapi.json).
    Openapi,
    /// Write a CSV export of the projections (one consistent snapshot) with a manifest.
    Export {
        /// The export's directory; must not exist or be empty.
        #[arg(long)]
        out: PathBuf,
        /// Tables, comma-separated: cases, parties, events, stats.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "cases,parties,events,stats"
        )]
        tables: Vec<String>,
        /// Compress each file with gzip.
        #[arg(long)]
        gzip: bool,
        /// Only events after this action ID (a previous export's watermark).
        #[arg(long)]
        since_watermark: Option<i64>,
        /// Include personal data (birth numbers and dates, person IDs); the files are
        /// then readable by their owner only.
        #[arg(long)]
        include_pii: bool,
        /// Write cells as they are, without the CSV formula guard (a leading `'` before
        /// a text starting with `=`, `+`, `-`, `@`, a tab or a carriage return).
        #[arg(long)]
        no_formula_guard: bool,
        /// A previous export: its watermark names the erasures to list.
        #[arg(long)]
        previous: Option<PathBuf>,
    },
    /// Show the replica's state: checkpoint, lease, budget, last tick, head and lag.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Print what the source returns after an ID (spends budget).
    Fetch {
        #[arg(long, allow_hyphen_values = true)]
        after: i64,
        #[arg(long, default_value_t = 1)]
        pages: u32,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Run the ISIR simulator on loopback.
    Sim(SimArgs),
    /// The lease: show it, or release it by force.
    Lease {
        #[command(subcommand)]
        cmd: LeaseCmd,
    },
    /// The checkpoint (last stored action ID).
    /// Replica snapshots: create one, or restore one into an empty store.
    Snapshot {
        #[command(subcommand)]
        cmd: SnapshotCmd,
    },
    Checkpoint {
        #[command(subcommand)]
        cmd: CheckpointCmd,
    },
    /// The projections: status, catch up, rebuild, verify.
    Project {
        #[command(subcommand)]
        cmd: ProjectCmd,
    },
    /// The feed's phase (off, ingest, project, serve), stored in the database.
    Phase {
        #[command(subcommand)]
        cmd: PhaseCmd,
    },
}

#[derive(Subcommand, Debug)]
pub enum ProjectCmd {
    /// Each builder's cursor, lag and counters.
    Status,
    /// Apply everything the replica holds now.
    CatchUp { name: Option<String> },
    /// Build a new version side by side from the first action and swap it in.
    Rebuild { name: Option<String> },
    /// Recompute a random sample of cases from the replica and compare.
    Verify {
        #[arg(long, default_value_t = 100)]
        sample: usize,
    },
}

#[derive(Subcommand, Debug)]
pub enum PhaseCmd {
    Get,
    /// Move to a phase. Moving up checks the next phase's precondition unless --force.
    Set {
        phase: String,
        #[arg(long)]
        force: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum LeaseCmd {
    Show,
    /// Remove the lease whoever holds it. The holder is fenced by the next grant's epoch.
    Release {
        #[arg(long, required = true)]
        force: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum SnapshotCmd {
    /// Write every stored action (compressed chunks, manifest with checksums).
    Create {
        #[arg(long)]
        out: Option<PathBuf>,
        /// Only actions after this ID (an incremental snapshot).
        #[arg(long, default_value_t = -1)]
        after: i64,
        /// Actions a chunk file holds.
        #[arg(long, default_value_t = crate::snapshot::CHUNK_ACTIONS)]
        chunk: i64,
        /// Keep erased debtors' personal data in the raw notes (by default the notes of
        /// erased cases are redacted, as `projection.redact_replica` does).
        #[arg(long)]
        include_pii: bool,
    },
    /// Load a snapshot (verified before it commits), set the checkpoint to its
    /// watermark and build the projections. Stop the daemon first.
    Restore {
        dir: PathBuf,
        /// Into a store that holds actions: add exactly those after its checkpoint.
        #[arg(long)]
        append: bool,
        /// Leave the projections to the daemon.
        #[arg(long)]
        no_project: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum CheckpointCmd {
    Get,
    /// Set the checkpoint. Takes the lease first (so no daemon may be writing).
    Set {
        #[arg(allow_hyphen_values = true)]
        id: i64,
        #[arg(long, required = true)]
        force: bool,
        /// Why, for the log.
        #[arg(long)]
        reason: String,
    },
}

#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum Format {
    Ndjson,
    Table,
}

#[derive(clap::Args, Debug, Clone)]
pub struct SimArgs {
    #[arg(long, default_value_t = 8090)]
    pub port: u16,
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: String,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[arg(long, default_value_t = 10_000)]
    pub actions: usize,
    #[arg(long, default_value_t = 1246)]
    pub start_id: i64,
    #[arg(long, default_value_t = 1000)]
    pub page: usize,
    #[arg(long, default_value_t = 0.0)]
    pub live_rate: f64,
    /// Requests a day before CHYBA (0: unlimited).
    #[arg(long, default_value_t = 3000)]
    pub daily_limit: u64,
    /// Requests a minute before CHYBA (0: unlimited).
    #[arg(long, default_value_t = 50)]
    pub per_minute_limit: u64,
    /// Faults: `500@3,truncate@5,fault@7,chyba@9,garbage@11,slow@13,reset@15`, `rate=0.1`,
    /// `kinds=500+reset`, `seed=7`.
    #[arg(long, default_value = "")]
    pub faults: String,
    /// How late a `slow` fault answers, in ms.
    #[arg(long, default_value_t = 5000)]
    pub slow_ms: u64,
    /// Added to every answer, in ms.
    #[arg(long, default_value_t = 0)]
    pub latency_ms: u64,
}

impl SimArgs {
    pub fn options(&self) -> anyhow::Result<SimOptions> {
        Ok(SimOptions {
            seed: self.seed,
            actions: self.actions,
            start_id: self.start_id,
            page: self.page.max(1),
            live_rate: self.live_rate,
            daily_limit: (self.daily_limit > 0).then_some(self.daily_limit),
            per_minute_limit: (self.per_minute_limit > 0).then_some(self.per_minute_limit),
            faults: FaultPlan::parse(&self.faults).map_err(|e| anyhow::anyhow!("--faults: {e}"))?,
            slow: Duration::from_millis(self.slow_ms),
            latency: Duration::from_millis(self.latency_ms),
        })
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ISIR_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=error"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// A channel that turns true on SIGINT or SIGTERM.
pub fn shutdown_signal() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM handler");
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        #[cfg(not(unix))]
        let _ = ctrl_c.await;
        tracing::info!("shutdown requested; finishing the current page");
        let _ = tx.send(true);
    });
    rx
}

/// Entry point of the binary; returns the process exit code.
pub async fn main(cli: Cli) -> anyhow::Result<i32> {
    init_tracing();
    match cli.command {
        Command::Sim(args) => {
            let opts = args.options()?;
            let listener = tokio::net::TcpListener::bind((args.bind.as_str(), args.port))
                .await
                .with_context(|| format!("binding {}:{}", args.bind, args.port))?;
            let addr = listener.local_addr()?;
            let sim = Simulator::new(opts);
            tracing::info!(url = %format!("http://{addr}{}", crate::sim::SERVICE_PATH), head = ?sim.head_id(), "simulator listening");
            let mut rx = shutdown_signal();
            sim.serve(listener, async move {
                let _ = rx.wait_for(|v| *v).await;
            })
            .await?;
            Ok(0)
        }
        Command::Serve => {
            // Readers scale out apart from the writer: no lease, no migrations, a
            // read-only pool.
            let settings = Settings::load(cli.config.as_deref())?;
            let store = crate::store::Store::connect_read_only(
                &settings.database.url,
                settings.database.max_connections,
            )
            .await
            .with_context(|| {
                format!(
                    "connecting read-only to database.url = {}",
                    crate::app::redact(&settings.database.url)
                )
            })?;
            serve(&settings, store, shutdown_signal()).await?;
            Ok(0)
        }
        Command::Demo {
            actions,
            period,
            live_rate,
            database,
            api_bind,
        } => demo(cli.config, actions, period, live_rate, database, api_bind).await,
        Command::Openapi => {
            println!("{}", crate::api::openapi::json());
            Ok(0)
        }
        Command::Export {
            out,
            tables,
            gzip,
            since_watermark,
            include_pii,
            no_formula_guard,
            previous,
        } => {
            let settings = Settings::load(cli.config.as_deref())?;
            let tables = tables
                .iter()
                .map(|t| crate::export::Table::parse(t))
                .collect::<Result<Vec<_>, _>>()?;
            let previous_watermark = match previous {
                Some(p) => Some(crate::export::read_manifest(&p)?.watermark.action_id),
                None => None,
            };
            let store = crate::store::Store::connect_read_only(
                &settings.database.url,
                settings.database.max_connections,
            )
            .await
            .with_context(|| {
                format!(
                    "connecting read-only to database.url = {}",
                    crate::app::redact(&settings.database.url)
                )
            })?;
            let m = crate::export::export(
                &store,
                &crate::export::ExportOptions {
                    out: out.clone(),
                    tables,
                    gzip,
                    since_watermark,
                    include_pii,
                    formula_guard: !no_formula_guard && settings.export.formula_guard,
                    previous_watermark,
                    progress: std::io::stderr().is_terminal(),
                },
            )
            .await?;
            for f in &m.files {
                println!(
                    "{:<16} {:>10} rows {:>14} bytes  sha256 {}",
                    f.name, f.rows, f.bytes, f.sha256
                );
            }
            println!(
                "export written to {} at watermark {} ({} erased cases listed)",
                out.display(),
                m.watermark.action_id,
                m.erased_since_previous.cases.len()
            );
            store.close().await;
            Ok(0)
        }
        command => {
            let settings = Settings::load(cli.config.as_deref())?;
            let app = App::build(settings).await?;
            let code = match command {
                Command::Run => {
                    run_daemon(&app, shutdown_signal()).await?;
                    0
                }
                Command::Poll { .. } => {
                    let mut p = app.poller()?;
                    let t = p.poll_once().await;
                    // A one-shot tick gives the lease back, so that a daemon started
                    // next does not wait out the TTL.
                    p.release().await;
                    println!("{}", serde_json::to_string(&t)?);
                    t.outcome.exit_code()
                }
                Command::Migrate => {
                    println!("migrations applied ({})", app.store.backend());
                    0
                }
                Command::Status { json } => {
                    let mut s = crate::status::collect(&app.status_source()).await?;
                    s.api.reachable = Some(probe(&app.settings.api.bind).await);
                    if json {
                        println!("{}", serde_json::to_string_pretty(&s)?);
                    } else {
                        print!("{}", s.render_text());
                    }
                    0
                }
                Command::Fetch {
                    after,
                    pages,
                    format,
                } => fetch(&app, after, pages, format).await?,
                Command::Lease { cmd } => {
                    match cmd {
                        LeaseCmd::Show => println!(
                            "{}",
                            serde_json::to_string_pretty(&app.lease.show().await?)?
                        ),
                        LeaseCmd::Release { .. } => {
                            let gone = app.lease.force_release().await?;
                            tracing::warn!(released = gone, by = %crate::lease::holder_identity(), "lease released by force");
                            println!(
                                "{}",
                                if gone {
                                    "lease released"
                                } else {
                                    "no lease was held"
                                }
                            );
                        }
                    }
                    0
                }
                Command::Checkpoint { cmd } => checkpoint(&app, cmd).await?,
                Command::Snapshot { cmd } => snapshot(&app, cmd).await?,
                Command::Project { cmd } => project(&app, cmd).await?,
                Command::Phase { cmd } => phase(&app, cmd).await?,
                Command::Sim(_)
                | Command::Demo { .. }
                | Command::Serve
                | Command::Openapi
                | Command::Export { .. } => {
                    unreachable!()
                }
            };
            app.store.close().await;
            Ok(code)
        }
    }
}

async fn project(app: &App, cmd: ProjectCmd) -> anyhow::Result<i32> {
    use crate::projection;
    let chunk = app.settings.projection.chunk;
    let names = |n: Option<String>| -> Vec<String> {
        n.map(|n| vec![n])
            .unwrap_or_else(|| projection::NAMES.iter().map(|s| s.to_string()).collect())
    };
    match cmd {
        ProjectCmd::Status => {
            projection::ensure_all(&app.store).await?;
            let head = app.store.checkpoint().await?.unwrap_or(-1);
            for m in projection::metas(&app.store).await? {
                println!(
                    "{:<16} v{} cursor {:>12} lag {:>10} IDs  applied {} unknown codes {} other unknown {} unparsed {} erased {}{}",
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
                        .map(|e| format!("  STOPPED: {e}"))
                        .unwrap_or_default()
                );
            }
            Ok(0)
        }
        ProjectCmd::CatchUp { name } => {
            for n in names(name) {
                let m = projection::catch_up(&app.store, &n, chunk).await?;
                println!("{n}: cursor {}", m.cursor);
            }
            Ok(0)
        }
        ProjectCmd::Rebuild { name } => {
            for n in names(name) {
                let t = std::time::Instant::now();
                let m = projection::rebuild(&app.store, &n, app.settings.projection.rebuild_chunk)
                    .await?;
                println!(
                    "{n}: version {} swapped in at cursor {} after {:.1} s",
                    m.version,
                    m.cursor,
                    t.elapsed().as_secs_f64()
                );
            }
            Ok(0)
        }
        ProjectCmd::Verify { sample } => {
            let r = projection::verify::verify(&app.store, sample, None).await?;
            for d in &r.differences {
                println!("DIFF {d}");
            }
            println!(
                "verified {} cases: {} differences",
                r.checked,
                r.differences.len()
            );
            Ok(if r.clean() { 0 } else { 1 })
        }
    }
}

async fn phase(app: &App, cmd: PhaseCmd) -> anyhow::Result<i32> {
    use crate::phase::Phase;
    let current = app
        .store
        .setting("phase")
        .await?
        .and_then(|p| Phase::parse(&p))
        .unwrap_or(Phase::Off);
    match cmd {
        PhaseCmd::Get => {
            println!("{}", current.as_str());
            Ok(0)
        }
        PhaseCmd::Set { phase, force } => {
            let Some(to) = Phase::parse(&phase) else {
                anyhow::bail!("unknown phase {phase:?}: one of off, ingest, project, serve");
            };
            if to > current && !force {
                if to >= Phase::Serve {
                    crate::projection::ensure_all(&app.store).await?;
                    let head = app.store.checkpoint().await?.unwrap_or(-1);
                    let lag = crate::projection::metas(&app.store)
                        .await?
                        .iter()
                        .map(|m| head - m.cursor)
                        .max()
                        .unwrap_or(0);
                    if lag > 10_000 {
                        eprintln!(
                            "refused: the projections are {lag} IDs behind the replica (at most 10000); run `isir project catch-up` or use --force"
                        );
                        return Ok(2);
                    }
                    let r = crate::projection::verify::verify(&app.store, 100, None).await?;
                    if !r.clean() {
                        eprintln!(
                            "refused: `isir project verify` found {} differences; see `isir project verify`, or use --force",
                            r.differences.len()
                        );
                        return Ok(2);
                    }
                }
            }
            app.store.set_setting("phase", to.as_str()).await?;
            tracing::warn!(
                from = current.as_str(),
                to = to.as_str(),
                forced = force,
                "phase changed"
            );
            println!("phase {} -> {}", current.as_str(), to.as_str());
            Ok(0)
        }
    }
}

/// The read API's state: options from `api`, the operator surfaces from `admin`, and
/// the status page's source.
fn api_state(
    settings: &Settings,
    store: crate::store::Store,
    status: crate::status::StatusSource,
) -> crate::api::ApiState {
    let a = &settings.api;
    crate::api::ApiState::new(
        store,
        crate::api::ApiOptions {
            max_limit: a.max_limit,
            default_limit: a.default_limit,
            max_lag_ids: a.max_lag_ids,
            rate_per_second: a.rate_per_second,
            burst: a.burst,
            keys: a.keys.clone(),
            meta_cache: Duration::from_millis(a.meta_cache_ms),
        },
    )
    .with_status(status)
    .with_admin(crate::api::AdminOptions {
        separate: settings.admin.bind.is_some(),
        key_sha256: settings.admin.key_sha256.clone(),
    })
}

type Listeners = (tokio::net::TcpListener, Option<tokio::net::TcpListener>);

/// Binds `api.bind` and, when set, `admin.bind`: a daemon that cannot listen does not
/// start.
async fn bind_http(settings: &Settings) -> anyhow::Result<Listeners> {
    let listener = tokio::net::TcpListener::bind(&settings.api.bind)
        .await
        .with_context(|| format!("binding api.bind = {}", settings.api.bind))?;
    let admin = match &settings.admin.bind {
        Some(b) => Some(
            tokio::net::TcpListener::bind(b)
                .await
                .with_context(|| format!("binding admin.bind = {b}"))?,
        ),
        None => None,
    };
    Ok((listener, admin))
}

/// Serves the API and, on its own listener when configured, the operator surfaces,
/// until `shutdown`.
async fn serve_http(
    (listener, admin): Listeners,
    state: crate::api::ApiState,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let stop = |mut sd: watch::Receiver<bool>| async move {
        let _ = sd.wait_for(|v| *v).await;
    };
    let public = crate::api::run(listener, state.clone(), stop(shutdown.clone()));
    match admin {
        Some(l) => {
            let (a, b) = tokio::join!(public, crate::api::run_admin(l, state, stop(shutdown)));
            a?;
            b?;
        }
        None => public.await?,
    }
    Ok(())
}

/// Whether something answers `/healthz` on `bind` within a second.
async fn probe(bind: &str) -> bool {
    let Ok(c) = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()
    else {
        return false;
    };
    c.get(format!("http://{bind}/healthz"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}

/// The read API on `api.bind` (and the operator pages) until shutdown, for `isir serve`:
/// the lease and budget are only shown, never taken.
pub async fn serve(
    settings: &Settings,
    store: crate::store::Store,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    // Every unscoped answer needs the replica's privacy key (made by `migrate`): a
    // replica that has none is refused at start, not with a 500 at every request.
    crate::privacy::Privacy::load(&store)
        .await
        .context("the read API masks personal data with the replica's key")?;
    let (lease, budget, _) = App::lease_and_budget(settings, &store)?;
    let status = crate::status::StatusSource {
        settings: settings.clone(),
        store: store.clone(),
        lease: std::sync::Arc::new(lease),
        budget: std::sync::Arc::new(budget),
    };
    let listeners = bind_http(settings).await?;
    serve_http(listeners, api_state(settings, store, status), shutdown).await
}

async fn snapshot(app: &App, cmd: SnapshotCmd) -> anyhow::Result<i32> {
    let tty = std::io::stderr().is_terminal();
    match cmd {
        SnapshotCmd::Create {
            out,
            after,
            chunk,
            include_pii,
        } => {
            let out = out.unwrap_or_else(crate::snapshot::default_dir);
            let m =
                crate::snapshot::create(&app.store, &out, after, chunk, tty, include_pii).await?;
            println!(
                "snapshot of {} actions in {} chunks written to {} (checkpoint {})",
                m.actions,
                m.chunks.len(),
                out.display(),
                m.checkpoint
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "none".into())
            );
            Ok(0)
        }
        SnapshotCmd::Restore {
            dir,
            append,
            no_project,
        } => {
            let started = std::time::Instant::now();
            let r = crate::snapshot::restore(&app.store, &app.lease, &dir, append, tty).await?;
            let secs = started.elapsed().as_secs_f64();
            println!(
                "restored {} actions ({} already held) in {secs:.1} s ({:.0} actions/s); checkpoint {}",
                r.actions,
                r.skipped,
                r.actions as f64 / secs.max(1e-9),
                r.checkpoint
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "none".into())
            );
            tracing::info!(actions = r.actions, epoch = r.epoch, "snapshot restored");
            if !no_project {
                let chunk = app.settings.projection.rebuild_chunk;
                for name in crate::projection::NAMES {
                    let m = if append {
                        crate::projection::catch_up(&app.store, name, app.settings.projection.chunk)
                            .await?
                    } else {
                        crate::projection::rebuild(&app.store, name, chunk).await?
                    };
                    println!("projection {name} built to {}", m.cursor);
                }
            }
            Ok(0)
        }
    }
}

async fn checkpoint(app: &App, cmd: CheckpointCmd) -> anyhow::Result<i32> {
    match cmd {
        CheckpointCmd::Get => {
            let s = app.store.writer_state().await?;
            println!(
                "{}",
                s.checkpoint
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "none".into())
            );
            Ok(0)
        }
        CheckpointCmd::Set { id, reason, .. } => {
            let grant = match app.lease.acquire().await? {
                crate::lease::Acquire::Granted(g) => g,
                crate::lease::Acquire::HeldBy { holder, expires_at } => {
                    eprintln!(
                        "refused: the lease is held by {holder} until {}; stop the daemon first",
                        expires_at
                            .map(crate::poller::fmt_ms)
                            .unwrap_or_else(|| "unknown".into())
                    );
                    return Ok(2);
                }
            };
            let before = app.store.checkpoint().await?;
            app.store.set_checkpoint(grant.epoch, Some(id)).await?;
            app.lease.release(grant.epoch).await?;
            tracing::warn!(?before, after = id, by = %app.lease.holder(), %reason, "checkpoint set by hand");
            println!(
                "checkpoint {} -> {id}",
                before
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "none".into())
            );
            Ok(0)
        }
    }
}

async fn fetch(app: &App, after: i64, pages: u32, format: Format) -> anyhow::Result<i32> {
    let client = app.client()?;
    let mut after = after;
    for _ in 0..pages.max(1) {
        let page = client
            .fetch_after(after)
            .await
            .with_context(|| format!("fetching after {after}"))?;
        for r in &page.records {
            match format {
                Format::Ndjson => println!("{}", serde_json::to_string(r)?),
                Format::Table => {
                    let a = &r.action;
                    println!(
                        "{:>10}  {:<16} {:>5} {:<4} {:>3}  {}  {}",
                        a.id,
                        a.case_number,
                        a.type_code,
                        a.section.as_deref().unwrap_or("-"),
                        a.number_in_section
                            .map(|n| n.to_string())
                            .unwrap_or_else(|| "-".into()),
                        a.published,
                        a.type_name
                    );
                }
            }
        }
        match page.last_id() {
            Some(l) => after = l,
            None => {
                eprintln!("(no actions after {after}: caught up)");
                break;
            }
        }
    }
    Ok(0)
}

/// The daemon loop: a tick, then wait `poll.period_secs` or until shutdown.
pub async fn run_daemon(app: &App, mut shutdown: watch::Receiver<bool>) -> anyhow::Result<()> {
    app.record_settings().await?;
    let mut poller = app.poller()?;
    let period = Duration::from_secs(app.settings.poll.period_secs);
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new(0);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} backfill {pos}/{len} IDs {wide_bar} {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    });
    tracing::info!(source = %app.settings.source.url, database = %crate::app::redact(&app.settings.database.url),
        redis = app.redis.is_some(), holder = app.lease.holder(), "daemon started");
    // The daemon's HTTP server runs whatever the phase; `/v1` answers from `serve` up.
    let api = {
        let listeners = bind_http(&app.settings).await?;
        let state = api_state(&app.settings, app.store.clone(), app.status_source());
        let sd = shutdown.clone();
        tokio::spawn(async move {
            if let Err(e) = serve_http(listeners, state, sd).await {
                tracing::error!(error = %e, "the HTTP server stopped");
            }
        })
    };
    let nightly = match app.settings.export.schedule.as_deref() {
        Some(at) => {
            let n = crate::export::Nightly {
                at: crate::export::parse_schedule(at).context("export.schedule must be HH:MM")?,
                dir: app.settings.export.dir.clone().into(),
                keep: app.settings.export.keep,
                gzip: app.settings.export.gzip,
                include_pii: app.settings.export.include_pii,
                formula_guard: app.settings.export.formula_guard,
                tables: app
                    .settings
                    .export
                    .tables
                    .iter()
                    .map(|t| crate::export::Table::parse(t))
                    .collect::<Result<_, _>>()?,
            };
            Some(tokio::spawn(crate::export::run_nightly(
                app.store.clone(),
                n,
                shutdown.clone(),
            )))
        }
        None => None,
    };
    let projector = tokio::spawn(crate::projector::run(
        app.store.clone(),
        poller.stored_signal(),
        crate::projector::ProjectorOptions {
            chunk: app.settings.projection.chunk,
            debounce: Duration::from_millis(app.settings.projection.debounce_ms),
            every: Duration::from_secs(app.settings.projection.every_secs),
        },
        shutdown.clone(),
    ));
    loop {
        let tick = poller.poll_once_until(&shutdown).await;
        if let (Some(b), Some(head), Some(cp)) = (&bar, tick.head, tick.checkpoint) {
            let start = app.settings.poll.start_id.max(0) as u64;
            b.set_length((head as u64).saturating_sub(start));
            b.set_position((cp as u64).saturating_sub(start));
            b.set_message(crate::status::eta_text(&app.settings, cp, head));
        }
        if *shutdown.borrow() || matches!(tick.outcome, TickOutcome::Interrupted) {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = shutdown.wait_for(|v| *v) => break,
        }
    }
    poller.release().await;
    let _ = projector.await;
    let _ = api.await;
    if let Some(n) = nightly {
        let _ = n.await;
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    tracing::info!("daemon stopped");
    Ok(())
}

async fn demo(
    config: Option<PathBuf>,
    actions: usize,
    period: u64,
    live_rate: f64,
    database: String,
    api_bind: String,
) -> anyhow::Result<i32> {
    let opts = SimOptions {
        actions,
        live_rate,
        daily_limit: None,
        per_minute_limit: None,
        ..SimOptions::default()
    };
    let (_sim, url, guard) = crate::sim::spawn(opts).await?;
    let mut settings = Settings::load(config.as_deref())?;
    settings.source.url = url.clone();
    settings.database.url = database;
    settings.redis.url = None;
    settings.poll.period_secs = period;
    settings.poll.head_check_secs = 60;
    settings.phase.initial = "serve".into();
    settings.api.bind = api_bind.clone();
    settings.validate()?;
    let app = App::build(settings).await?;
    println!("isir demo: a simulated register of {actions} actions (+{live_rate}/s) at {url}");
    println!(
        "  replicating into {} every {period} s; Ctrl-C to stop.",
        crate::app::redact(&app.settings.database.url)
    );
    println!("  watch the log lines 'tick', or in another shell:");
    println!(
        "    ISIR_DATABASE__URL={} isir status",
        app.settings.database.url
    );
    println!(
        "  the simulator's own count: {}",
        url.replace(crate::sim::SERVICE_PATH, "/_sim/stats")
    );
    println!("  the read API (phase serve), once the first tick has been projected:");
    println!("    curl -s 'http://{api_bind}/v1/stats'");
    println!("    curl -s 'http://{api_bind}/v1/cases?sort=latest&limit=3'");
    println!("    curl -s 'http://{api_bind}/v1/cases/2008/1'");
    println!("    curl -s 'http://{api_bind}/v1/subjects?name=novak&limit=5'");
    println!("    curl -s 'http://{api_bind}/v1/events?after=0&limit=5'");
    println!("    curl -s 'http://{api_bind}/openapi.json'");
    println!(
        "  in a browser: the status page http://{api_bind}/ and the search http://{api_bind}/search?q=novák"
    );
    run_daemon(&app, shutdown_signal()).await?;
    app.store.close().await;
    guard.stop().await;
    Ok(0)
}
