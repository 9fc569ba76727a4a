//! The one typed settings tree: defaults, then `isir.toml`, then `ISIR_` environment
//! variables with `__` between levels (`ISIR_SOURCE__URL`, `ISIR_POLL__PERIOD_SECS`).
//!
//! Owns every tunable with its default and the reason for it, and validates them at
//! start-up with errors that name the key. It reads the environment and files only in
//! [`Settings::load`]; components receive their part of the tree and never read globals.

use std::path::Path;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

/// The real service. Our machines cannot reach it; `isir demo` uses the simulator.
pub const REAL_ISIR_URL: &str = "https://isir.justice.cz:8443/isir_public_ws/IsirWsPublicService";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
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
        }
    }
}

/// The operator surfaces: the status page `/` and `/metrics`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AdminSettings {
    /// A separate address for the status page and `/metrics` (with `/healthz`); they
    /// then leave `api.bind`. Unset: they are served on `api.bind`.
    pub bind: Option<String>,
    /// SHA-256 (hex) of the admin key. Set: the status page and `/metrics` answer only
    /// to `X-Admin-Key: <key>` (or `?admin_key=` for a browser), wherever they are bound.
    pub key_sha256: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ApiSettings {
    /// Address of the read API. Loopback by default: exposing it is a decision.
    /// Port 0 picks a free port and logs it.
    pub bind: String,
    /// Largest page a list answers. 1000.
    pub max_limit: i64,
    /// Page size without `limit`. 50.
    pub default_limit: i64,
    /// `/readyz` is ready only while the projections are at most this many IDs behind
    /// the replica. 10000: about half a day of the register's growth.
    pub max_lag_ids: i64,
    /// Requests a second per API key, or per client address without a key. 20, with
    /// bursts of `burst`: enough for an analyst's scripts, not for scraping.
    pub rate_per_second: u32,
    pub burst: u32,
    /// API keys: only their SHA-256 (hex) is configured. Scope `pii` sees birth numbers
    /// and birth dates of natural persons.
    pub keys: Vec<ApiKey>,
    /// Milliseconds the phase and the watermark are reused between requests. 200: a
    /// phase change or a new watermark shows within a fifth of a second, and a lookup
    /// costs one query instead of two.
    pub meta_cache_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ApiKey {
    pub name: String,
    pub sha256: String,
    #[serde(default)]
    pub scopes: Vec<String>,
}

impl Default for ApiSettings {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:8080".into(),
            max_limit: 1000,
            default_limit: 50,
            max_lag_ids: 10_000,
            rate_per_second: 20,
            burst: 100,
            keys: Vec::new(),
            meta_cache_ms: 200,
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
    /// Builders also run this often without new pages. 30 s.
    pub every_secs: u64,
    /// Wait after a stored page before building, to batch pages. 1000 ms.
    pub debounce_ms: u64,
    /// On a § 425 erasure, also redact the debtor's personal data inside the raw replica
    /// rows of the case (every row, before and after the erasure). On: the register
    /// itself withdraws the data, and a copy kept without purpose is still personal
    /// data we hold (`docs/runbooks/erasure.md` argues it).
    pub redact_replica: bool,
}

impl Default for ProjectionSettings {
    fn default() -> Self {
        Self {
            chunk: 5000,
            rebuild_chunk: 5_000,
            every_secs: 30,
            debounce_ms: 1000,
            redact_replica: true,
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
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseSettings {
    /// `sqlite://PATH` (the embedded default, WAL) or `postgres://...`.
    pub url: String,
    /// Pool size. 5: one writer, status queries and the odd projector.
    pub max_connections: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
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

impl Default for Settings {
    fn default() -> Self {
        Self {
            source: SourceSettings::default(),
            database: DatabaseSettings::default(),
            redis: RedisSettings::default(),
            lease: LeaseSettings::default(),
            budget: BudgetSettings::default(),
            poll: PollSettings::default(),
            phase: PhaseSettings::default(),
            projection: ProjectionSettings::default(),
            api: ApiSettings::default(),
            admin: AdminSettings::default(),
            export: ExportSettings::default(),
        }
    }
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
        }
    }
}
impl Default for DatabaseSettings {
    fn default() -> Self {
        Self {
            url: "sqlite://isir.db".into(),
            max_connections: 5,
        }
    }
}
impl Default for RedisSettings {
    fn default() -> Self {
        Self { url: None }
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

impl Settings {
    /// Defaults, then `config_file` (default `isir.toml`, optional), then `ISIR_...`.
    pub fn load(config_file: Option<&Path>) -> anyhow::Result<Settings> {
        let file = config_file.unwrap_or(Path::new("isir.toml"));
        if config_file.is_some() && !file.exists() {
            anyhow::bail!("configuration file {} does not exist", file.display());
        }
        Self::from_figment(
            Figment::from(Serialized::defaults(Settings::default()))
                .merge(Toml::file(file))
                .merge(Self::env()),
        )
    }

    /// `ISIR_SECTION__KEY` variables. Variables without a section (`ISIR_CONFIG`,
    /// `ISIR_LOG`, a test harness's `ISIR_TEST_...`) are not settings and are left alone.
    pub fn env() -> Env {
        Env::prefixed("ISIR_")
            .split("__")
            .filter(|k| k.as_str().contains('.'))
    }

    pub fn from_figment(f: Figment) -> anyhow::Result<Settings> {
        let s: Settings = f.extract().map_err(|e| {
            let mut msg = String::from("invalid configuration");
            for err in e {
                msg.push_str(&format!("\n  - {err}"));
                if !err.path.is_empty() {
                    msg.push_str(&format!(" (key `{}`)", err.path.join(".")));
                }
            }
            anyhow::anyhow!(msg)
        })?;
        s.validate()?;
        Ok(s)
    }

    /// Checks what types alone cannot, naming the key.
    pub fn validate(&self) -> anyhow::Result<()> {
        let mut errs = Vec::new();
        let mut check = |ok: bool, key: &str, why: &str| {
            if !ok {
                errs.push(format!("`{key}`: {why}"));
            }
        };
        check(
            self.export
                .schedule
                .as_deref()
                .is_none_or(|s| crate::export::parse_schedule(s).is_some()),
            "export.schedule",
            "must be a time of day HH:MM (Europe/Prague), such as \"02:30\"",
        );
        check(self.export.keep >= 1, "export.keep", "must be at least 1");
        check(
            self.export
                .tables
                .iter()
                .all(|t| crate::export::Table::parse(t).is_ok()),
            "export.tables",
            "each one of cases, parties, events, stats",
        );
        check(
            self.admin
                .key_sha256
                .as_ref()
                .is_none_or(|k| k.len() == 64 && k.chars().all(|c| c.is_ascii_hexdigit())),
            "admin.key_sha256",
            "must be 64 hex digits (the SHA-256 of the key)",
        );
        check(
            self.admin
                .bind
                .as_ref()
                .is_none_or(|b| b.parse::<std::net::SocketAddr>().is_ok()),
            "admin.bind",
            "must be an address such as 127.0.0.1:8081",
        );
        check(
            self.source.url.starts_with("http://") || self.source.url.starts_with("https://"),
            "source.url",
            "must be an http:// or https:// URL",
        );
        check(
            self.source.timeout_secs > 0,
            "source.timeout_secs",
            "must be above 0",
        );
        check(
            self.source.connect_timeout_secs > 0,
            "source.connect_timeout_secs",
            "must be above 0",
        );
        check(
            self.source.max_body_bytes >= 64 * 1024,
            "source.max_body_bytes",
            "must be at least 65536",
        );
        check(
            self.database.url.starts_with("sqlite:")
                || self.database.url.starts_with("postgres://")
                || self.database.url.starts_with("postgresql://"),
            "database.url",
            "must start with sqlite:, postgres:// or postgresql://",
        );
        check(
            self.database.max_connections >= 2,
            "database.max_connections",
            "must be at least 2",
        );
        if let Some(u) = &self.redis.url {
            check(
                u.starts_with("redis://") || u.starts_with("rediss://") || u.starts_with("unix:"),
                "redis.url",
                "must start with redis://, rediss:// or unix:",
            );
        }
        check(
            self.lease.ttl_secs >= 3,
            "lease.ttl_secs",
            "must be at least 3 (renewal runs at a third of it)",
        );
        // After its last renewal (every third of the TTL) the lease lives two thirds of
        // it; the step in flight then (a request and its retry backoff) must end inside,
        // or a writer could find its lease gone mid-request on every tick.
        let backoff_ms = self
            .source
            .retry_backoff_ms
            .saturating_mul(1u64 << self.source.max_retries.min(20));
        let step_ms = self
            .source
            .timeout_secs
            .saturating_mul(1000)
            .saturating_add(backoff_ms);
        check(
            self.lease.ttl_secs.saturating_mul(2000) / 3 >= step_ms,
            "lease.ttl_secs",
            &format!(
                "two thirds of it must hold one page request: source.timeout_secs ({} s) and the \
                 longest retry backoff ({} ms, source.retry_backoff_ms doubled source.max_retries times)",
                self.source.timeout_secs, backoff_ms
            ),
        );
        check(!self.lease.key.is_empty(), "lease.key", "must not be empty");
        check(
            self.lease.key != self.lease.epoch_key,
            "lease.epoch_key",
            "must differ from lease.key",
        );
        check(self.budget.daily > 0, "budget.daily", "must be above 0");
        check(
            self.budget.per_minute > 0,
            "budget.per_minute",
            "must be above 0",
        );
        check(
            self.poll.period_secs > 0,
            "poll.period_secs",
            "must be above 0",
        );
        check(
            self.poll.max_batches_per_tick > 0,
            "poll.max_batches_per_tick",
            "must be above 0",
        );
        check(self.poll.page_size > 0, "poll.page_size", "must be above 0");
        check(
            self.projection.chunk > 0,
            "projection.chunk",
            "must be above 0",
        );
        check(
            self.api.bind.parse::<std::net::SocketAddr>().is_ok(),
            "api.bind",
            "must be an address such as 127.0.0.1:8080",
        );
        check(
            self.api.rate_per_second > 0 && self.api.burst > 0,
            "api.rate_per_second",
            "rate and burst must be above 0",
        );
        for k in &self.api.keys {
            check(
                k.sha256.len() == 64 && k.sha256.chars().all(|c| c.is_ascii_hexdigit()),
                "api.keys.sha256",
                "must be 64 hex digits (the SHA-256 of the key, never the key itself)",
            );
        }
        check(
            self.api.default_limit >= 1 && self.api.default_limit <= self.api.max_limit,
            "api.default_limit",
            "must be between 1 and api.max_limit",
        );
        check(
            self.projection.rebuild_chunk > 0,
            "projection.rebuild_chunk",
            "must be above 0",
        );
        check(
            self.projection.every_secs > 0,
            "projection.every_secs",
            "must be above 0",
        );
        check(
            crate::phase::Phase::parse(&self.phase.initial).is_some(),
            "phase.initial",
            "must be one of off, ingest, project, serve",
        );
        if errs.is_empty() {
            Ok(())
        } else {
            anyhow::bail!("invalid configuration:\n  - {}", errs.join("\n  - "))
        }
    }

    pub fn client_options(&self) -> crate::source::ClientOptions {
        crate::source::ClientOptions {
            url: self.source.url.clone(),
            connect_timeout: std::time::Duration::from_secs(self.source.connect_timeout_secs),
            timeout: std::time::Duration::from_secs(self.source.timeout_secs),
            max_body_bytes: self.source.max_body_bytes,
        }
    }
}
