//! The one typed settings tree: defaults, then `isir.toml`, then `ISIR_` environment
//! variables with `__` between levels (`ISIR_SOURCE__URL`, `ISIR_POLL__PERIOD_SECS`).
//!
//! Owns every tunable with its default and the reason for it, and validates them at
//! start-up with errors that name the key. It reads the environment and files only in
//! [`Settings::load`]; components receive their part of the tree and never read globals.

mod load;
mod serving;

pub use serving::*;

use serde::{Deserialize, Serialize};

/// The real service. Our machines cannot reach it; `isir demo` uses the simulator.
pub const REAL_ISIR_URL: &str = "https://isir.justice.cz:8443/isir_public_ws/IsirWsPublicService";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
#[derive(Default)]
pub struct Settings {
    pub source: SourceSettings,
    pub database: DatabaseSettings,
    pub redis: RedisSettings,
    pub lease: LeaseSettings,
    pub budget: BudgetSettings,
    pub poll: PollSettings,
    pub phase: PhaseSettings,
    pub projection: ProjectionSettings,
    pub api: ApiSettings,
    pub admin: AdminSettings,
    pub export: ExportSettings,
    pub watch: WatchSettings,
    pub log: LogSettings,
}

/// Watchlists and their webhook notifier (`isir watch`, `/v1/watchlists`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct WatchSettings {
    /// Webhooks may go to loopback, private and link-local addresses. Off: a webhook is
    /// an outbound request an operator configures, and must not become a way into the
    /// internal network (tests and a receiver on the same host set it).
    pub allow_private_targets: bool,
    /// A list holding birth numbers may deliver to a plain `http://` webhook. Off: a
    /// birth number is personal data, and a batch names it beside its case, so it only
    /// travels encrypted (`watch add`/`set` refuse such a list, and the notifier sends
    /// it nothing while its webhook is `http`).
    pub allow_http_with_birth_numbers: bool,
    /// The operator's egress proxy for every webhook (`http://host:port`; unset: none).
    /// Webhooks never use the environment's `HTTP_PROXY`, `HTTPS_PROXY` or `ALL_PROXY`:
    /// a proxy resolves the target's name itself, past isir's address check. With this
    /// set, isir still refuses address hosts and `localhost` names it would refuse
    /// otherwise, but it neither resolves nor checks names: keeping webhooks away from
    /// internal addresses is then the proxy's job (configure it to refuse them).
    pub proxy: Option<String>,
    /// Milliseconds between the notifier's looks for new events. 5000: a new petition is
    /// delivered within seconds of its projection, at one cheap query per list.
    pub every_ms: u64,
    /// Events a delivery carries at most. 100: a receiver's request stays small.
    pub batch: i64,
    /// Seconds one delivery attempt may take. 10.
    pub timeout_secs: u64,
    /// Milliseconds before the first retry; doubled per failure up to `retry_max_secs`,
    /// with jitter. 1000.
    pub retry_min_ms: u64,
    /// The longest wait between retries, in seconds. 600: a receiver back from an outage
    /// gets its backlog within ten minutes.
    pub retry_max_secs: u64,
    /// A list whose pending batch has failed this long is marked failing (status page,
    /// metric, `watch show`). 3600.
    pub failing_after_secs: u64,
    /// Seconds a notifier's claim on a list lasts without renewal: a crashed daemon's
    /// lists are delivered by the next one after it. 60.
    pub claim_ttl_secs: u64,
}

impl Default for WatchSettings {
    fn default() -> Self {
        Self {
            allow_private_targets: false,
            allow_http_with_birth_numbers: false,
            proxy: None,
            every_ms: 5000,
            batch: 100,
            timeout_secs: 10,
            retry_min_ms: 1000,
            retry_max_secs: 600,
            failing_after_secs: 3600,
            claim_ttl_secs: 60,
        }
    }
}

/// The nightly CSV export.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ExportSettings {
    /// `HH:MM` in Europe/Prague when the daemon writes the export; unset: no nightly
    /// export (use `isir export` from cron).
    pub schedule: Option<String>,
    /// Where nightly exports go, one directory each.
    pub dir: String,
    /// Nightly exports kept; older ones are removed. 7.
    pub keep: usize,
    pub gzip: bool,
    /// Personal data (birth numbers and dates, person IDs) in the files, which are then
    /// readable by their owner only.
    pub include_pii: bool,
    /// The CSV formula guard: a text cell starting with `=`, `+`, `-`, `@`, a tab or a
    /// carriage return gets a leading `'`, so a spreadsheet does not run it. On.
    pub formula_guard: bool,
    /// Tables exported: cases, parties, events, stats.
    pub tables: Vec<String>,
    /// File formats written, each table in each: csv, parquet. `["csv"]`.
    pub formats: Vec<String>,
}

impl ExportSettings {
    /// `formats` parsed (validated at start-up, so an error here names the key anyway).
    pub fn formats(&self) -> anyhow::Result<Vec<Format>> {
        self.formats
            .iter()
            .map(|f| Format::parse(f).map_err(|e| anyhow::anyhow!("export.formats: {e}")))
            .collect()
    }
}

impl Default for ExportSettings {
    fn default() -> Self {
        Self {
            schedule: None,
            dir: "exports".into(),
            keep: 7,
            gzip: true,
            include_pii: false,
            formula_guard: true,
            tables: ["cases", "parties", "events", "stats"]
                .map(String::from)
                .to_vec(),
            formats: vec!["csv".into()],
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ProjectionSettings {
    /// Actions a builder applies in one transaction. 5000: short enough not to hold the
    /// SQLite write lock for long (about 0.1 s), long enough to amortise the round trip.
    pub chunk: i64,
    /// Actions a rebuild applies in one transaction. 5000: a rebuild reloads each case's
    /// document once a chunk, so bigger chunks mean fewer reloads, but each action costs
    /// some 10 KB of memory while in flight, and the reader keeps one chunk ahead of the
    /// builder (20000 peaked at 330 MB, over the 200 MB goal; on a 2.9-million-action
    /// replica 8000 took parties to 222 MB and was no faster than 5000: 170 MB).
    pub rebuild_chunk: i64,
    /// On a SQLite file, a rebuild truncates the WAL when it has grown past this many
    /// MiB. 256. Its reader holds a snapshot nearly all the time, which keeps SQLite from
    /// starting the WAL over by itself: without this the WAL grows to the size of all
    /// the rebuild writes (9.4 GB for the parties of a million cases).
    pub rebuild_wal_limit_mib: u64,
    /// Builders also run this often without new pages. 30 s.
    pub every_secs: u64,
    /// Wait after a stored page before building, to batch pages. 1000 ms.
    pub debounce_ms: u64,
    /// On a § 425 erasure, also redact the debtor's personal data inside the raw replica
    /// rows of the case (every row, before and after the erasure). On: the register
    /// itself withdraws the data, and a copy kept without purpose is still personal
    /// data we hold (`docs/runbooks/erasure.md` argues it).
    pub redact_replica: bool,
    /// The projections' planner statistics are refreshed (`ANALYZE`) this often, and
    /// after every rebuild, so that plans stay right as the data grows; on SQLite the
    /// name index's full-text segments are merged a bounded step at the same times.
    /// 3600 s.
    pub analyze_every_secs: u64,
}

impl ProjectionSettings {
    /// `rebuild_wal_limit_mib` in bytes.
    pub fn rebuild_wal_limit(&self) -> u64 {
        self.rebuild_wal_limit_mib << 20
    }
}

impl Default for ProjectionSettings {
    fn default() -> Self {
        Self {
            chunk: 5000,
            rebuild_chunk: 5_000,
            rebuild_wal_limit_mib: 256,
            every_secs: 30,
            debounce_ms: 1000,
            redact_replica: true,
            analyze_every_secs: 3600,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SourceSettings {
    /// Endpoint of the ISIR public web service.
    pub url: String,
    /// TCP+TLS connect timeout. 10 s: the service is slow at times but a longer wait
    /// only delays the retry.
    pub connect_timeout_secs: u64,
    /// Whole-request timeout. 120 s: a 1.5 MB page over a slow line fits easily.
    pub timeout_secs: u64,
    /// Largest answer accepted. 32 MiB: pages are 1-1.5 MB; 10 MB must not fail.
    pub max_body_bytes: usize,
    /// Retries of a retryable failure inside one tick. 3: each costs budget, and the
    /// next tick retries anyway.
    pub max_retries: u32,
    /// First backoff between retries (doubles each time). 2 s.
    pub retry_backoff_ms: u64,
    /// What a spoiled record of a page does (issue 40): `quarantine` (the default: one
    /// record never stops the feed; a windows-1250 letter is repaired, a record that
    /// does not parse is held back in the quarantine table and the checkpoint moves past
    /// it) or `stop` (the strict behaviour before: any spoiled record fails the page and
    /// the tick, for those who prefer a stopped feed to an incomplete one).
    pub bad_records: BadRecords,
    /// The breaker: more spoiled records (repaired or held back) than this in one page
    /// means the format changed, not a freak record: the tick stops before that page,
    /// storing nothing of it. 10: a page has up to 1000 records; a handful of mangled
    /// letters a page is what public clients report, a changed schema spoils them all.
    pub max_bad_records_per_page: u32,
}

/// `source.bad_records`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum BadRecords {
    /// Repair or hold back a spoiled record and store the rest of the page.
    #[default]
    Quarantine,
    /// Fail the page on any spoiled record (the strict behaviour).
    Stop,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseSettings {
    /// `sqlite://PATH` (the embedded default, WAL) or `postgres://...`.
    pub url: String,
    /// Pool size. 5: one writer, status queries and the odd projector.
    pub max_connections: u32,
    /// A file holding the replica's privacy key (64 hex digits, as `isir privacy
    /// export-key` writes it), for a process whose database role may not read the table
    /// `secrets`: `isir serve` as a PostgreSQL reader role (`isir db grant-reader`).
    /// Unset (the default): the key is read from the database, as the writer always can.
    /// When set and the database's key is readable too, the two must be equal (a
    /// different key would give other person references); the file should be its
    /// owner's only (a warning says when not).
    pub privacy_key_file: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
#[derive(Default)]
pub struct RedisSettings {
    /// `redis://...`: the lease. Unset: the lease is kept in the database. The budget is
    /// counted in the database in either case.
    pub url: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LeaseSettings {
    /// Lease time to live. 900 s: longer than a tick (20 pages), short enough that a dead
    /// writer is replaced within a quarter of an hour. Renewed every third of it.
    pub ttl_secs: u64,
    /// Redis key of the lease.
    pub key: String,
    /// Redis key of the fencing epoch counter.
    pub epoch_key: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetSettings {
    /// Requests a calendar day (Europe/Prague). 3000: the register's published limit.
    pub daily: u64,
    /// Requests a minute. 50: the register's published limit.
    pub per_minute: u32,
    /// Unused since the count lives in the database for every process (kept so that
    /// existing configuration files still load).
    pub key_prefix: String,
    /// Added to the register's one-minute window for the time from a grant to the
    /// request's arrival at the register, which counts arrivals. 5 s.
    pub window_margin_secs: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PollSettings {
    /// Time between ticks. 600 s: the service asks for no more than one poll every
    /// 10 minutes.
    pub period_secs: u64,
    /// Pages a tick at most. 20: 20 x 144 ticks = 2880 < 3000 a day.
    pub max_batches_per_tick: u32,
    /// Newest-ID checks at most this often. 3600 s: 24 requests a day for lag figures.
    pub head_check_secs: u64,
    /// Where an empty replica starts (`idPodnetu`); -1 is the beginning of the register.
    pub start_id: i64,
    /// Records the source returns at most per page (1000 on the real service).
    pub page_size: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PhaseSettings {
    /// Phase given to a new database: `off`, `ingest`, `project` or `serve`. Afterwards
    /// the phase stored in the database wins. `ingest`: a new replica starts by
    /// ingesting only.
    pub initial: String,
}

impl Default for SourceSettings {
    fn default() -> Self {
        Self {
            url: REAL_ISIR_URL.into(),
            connect_timeout_secs: 10,
            timeout_secs: 120,
            max_body_bytes: 32 * 1024 * 1024,
            max_retries: 3,
            retry_backoff_ms: 2000,
            bad_records: BadRecords::Quarantine,
            max_bad_records_per_page: 10,
        }
    }
}
impl Default for DatabaseSettings {
    fn default() -> Self {
        Self {
            url: "sqlite://isir.db".into(),
            max_connections: 5,
            privacy_key_file: None,
        }
    }
}
impl Default for LeaseSettings {
    fn default() -> Self {
        Self {
            ttl_secs: 900,
            key: "isir:lease".into(),
            epoch_key: "isir:lease:epoch".into(),
        }
    }
}
impl Default for BudgetSettings {
    fn default() -> Self {
        Self {
            daily: 3000,
            per_minute: 50,
            key_prefix: "isir:budget".into(),
            window_margin_secs: 5,
        }
    }
}
impl Default for PollSettings {
    fn default() -> Self {
        Self {
            period_secs: 600,
            max_batches_per_tick: 20,
            head_check_secs: 3600,
            start_id: -1,
            page_size: 1000,
        }
    }
}
impl Default for PhaseSettings {
    fn default() -> Self {
        Self {
            initial: "ingest".into(),
        }
    }
}

/// Log output.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LogSettings {
    /// `text` (default) for people, `json` (one object a line) for a log collector.
    /// The level filter is `ISIR_LOG` (tracing's `EnvFilter` syntax), default
    /// `info,sqlx=error`.
    pub format: LogFormat,
}

/// How log lines are written (`log.format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object a line (tracing's JSON formatter), for a log collector.
    Json,
}

/// A file format of an export (`export.formats`, `isir export --format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// RFC 4180 CSV, a file a table (`cases.csv`, or `cases.csv.gz` with gzip).
    Csv,
    /// Apache Parquet with typed columns and zstd, a file a table (`cases.parquet`), the
    /// events a file a year (`events/year=2024/part-0.parquet`).
    Parquet,
}

impl Format {
    pub const ALL: [Format; 2] = [Format::Csv, Format::Parquet];

    pub fn name(self) -> &'static str {
        match self {
            Format::Csv => "csv",
            Format::Parquet => "parquet",
        }
    }

    pub fn parse(s: &str) -> Result<Format, String> {
        Format::ALL
            .into_iter()
            .find(|f| f.name() == s.trim())
            .ok_or_else(|| format!("unknown format {s:?}; one of csv, parquet"))
    }
}

/// A table of an export (`export.tables`, `isir export --tables`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Table {
    /// One row a case.
    Cases,
    /// One row a person in a case and role.
    Parties,
    /// One row an action of a case (the timeline).
    Events,
    /// Counts by state, court and month opened.
    Stats,
}

impl Table {
    pub const ALL: [Table; 4] = [Table::Cases, Table::Parties, Table::Events, Table::Stats];

    pub fn name(self) -> &'static str {
        match self {
            Table::Cases => "cases",
            Table::Parties => "parties",
            Table::Events => "events",
            Table::Stats => "stats",
        }
    }

    pub fn parse(s: &str) -> Result<Table, String> {
        Table::ALL
            .into_iter()
            .find(|t| t.name() == s.trim())
            .ok_or_else(|| format!("unknown table {s:?}; one of cases, parties, events, stats"))
    }
}

/// `HH:MM` (a time of day, `export.schedule`).
pub fn parse_schedule(s: &str) -> Option<chrono::NaiveTime> {
    chrono::NaiveTime::parse_from_str(s.trim(), "%H:%M").ok()
}
