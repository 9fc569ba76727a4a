//! Loading and checking the settings: defaults, then the file, then `ISIR_` variables;
//! every check names its key.

use std::path::Path;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};

use super::Settings;

impl Settings {
    /// Defaults, then `config_file` (default `./isir.toml`, optional), then `ISIR_...`.
    /// Exactly that file: never one of the same name in a parent directory.
    pub fn load(config_file: Option<&Path>) -> anyhow::Result<Settings> {
        let file = config_file.unwrap_or(Path::new("isir.toml"));
        if config_file.is_some() && !file.exists() {
            anyhow::bail!("configuration file {} does not exist", file.display());
        }
        let mut f = Figment::from(Serialized::defaults(Settings::default()));
        if file.is_file() {
            f = f.merge(Toml::file_exact(file));
        }
        Self::from_figment(f.merge(Self::env()))
    }

    /// The file [`Settings::load`] reads for `config_file`, if there is one.
    pub fn file_read(config_file: Option<&Path>) -> Option<std::path::PathBuf> {
        let file = config_file.unwrap_or(Path::new("isir.toml"));
        file.is_file().then(|| file.to_path_buf())
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
                .is_none_or(|s| super::parse_schedule(s).is_some()),
            "export.schedule",
            "must be a time of day HH:MM (Europe/Prague), such as \"02:30\"",
        );
        check(self.export.keep >= 1, "export.keep", "must be at least 1");
        check(
            (1..=1000).contains(&self.watch.batch),
            "watch.batch",
            "must be 1-1000",
        );
        check(
            self.watch.every_ms >= 10,
            "watch.every_ms",
            "must be at least 10",
        );
        check(
            self.watch.timeout_secs >= 1,
            "watch.timeout_secs",
            "must be at least 1",
        );
        check(
            self.watch.retry_min_ms >= 1
                && self.watch.retry_max_secs * 1000 >= self.watch.retry_min_ms,
            "watch.retry_max_secs",
            "must be at least watch.retry_min_ms (and that at least 1)",
        );
        check(
            self.watch.proxy.as_deref().is_none_or(|p| {
                reqwest::Url::parse(p)
                    .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            }),
            "watch.proxy",
            "must be an http:// or https:// URL such as \"http://proxy.internal:3128\"",
        );
        check(
            self.watch.claim_ttl_secs > self.watch.timeout_secs,
            "watch.claim_ttl_secs",
            "must be longer than watch.timeout_secs",
        );
        check(
            self.export
                .tables
                .iter()
                .all(|t| super::Table::parse(t).is_ok()),
            "export.tables",
            "each one of cases, parties, events, stats",
        );
        check(
            !self.export.formats.is_empty()
                && self
                    .export
                    .formats
                    .iter()
                    .all(|f| super::Format::parse(f).is_ok()),
            "export.formats",
            "a list of one or both of \"csv\" and \"parquet\", such as [\"csv\", \"parquet\"]",
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
        if let Some(f) = &self.database.privacy_key_file {
            check(
                f.is_file(),
                "database.privacy_key_file",
                "must name a readable file (`isir privacy export-key --out FILE` writes one)",
            );
        }
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
            check(
                k.scopes.iter().all(|s| {
                    s == "pii"
                        || s == "stream"
                        || s.strip_prefix("watch:").is_some_and(|n| {
                            n == "*"
                                || (!n.is_empty()
                                    && n.bytes().all(|b| {
                                        b.is_ascii_lowercase()
                                            || b.is_ascii_digit()
                                            || b == b'-'
                                            || b == b'_'
                                    }))
                        })
                }),
                "api.keys.scopes",
                "each `pii`, `stream` (whole-result streams of any size), `watch:NAME` (one watchlist) or `watch:*` (every watchlist)",
            );
        }
        check(
            self.api.default_limit >= 1 && self.api.default_limit <= self.api.max_limit,
            "api.default_limit",
            "must be between 1 and api.max_limit",
        );
        check(
            (1..=25_000).contains(&self.api.statement_timeout_ms),
            "api.statement_timeout_ms",
            "must be between 1 and 25000 (under the 30 s request timeout)",
        );
        check(
            self.api.trusted_proxies.iter().all(|p| {
                p.parse::<ipnet::IpNet>().is_ok() || p.parse::<std::net::IpAddr>().is_ok()
            }),
            "api.trusted_proxies",
            "each an address (`127.0.0.1`, `::1`) or a network (`10.0.0.0/8`)",
        );
        check(
            self.api.stream_max_rows >= 1,
            "api.stream_max_rows",
            "must be above 0",
        );
        check(
            self.api.max_connections >= 1,
            "api.max_connections",
            "must be above 0",
        );
        check(
            (1..=25_000).contains(&self.api.acquire_timeout_ms),
            "api.acquire_timeout_ms",
            "must be between 1 and 25000",
        );
        check(
            (32..=128).contains(&self.api.ipv6_client_prefix),
            "api.ipv6_client_prefix",
            "must be between 32 and 128 (bits of an IPv6 address that name one client)",
        );
        check(
            (1..=300).contains(&self.api.request_timeout_secs),
            "api.request_timeout_secs",
            "must be between 1 and 300",
        );
        check(
            (1..=300).contains(&self.api.header_read_timeout_secs),
            "api.header_read_timeout_secs",
            "must be between 1 and 300",
        );
        check(
            (1..=3600).contains(&self.api.keep_alive_idle_secs),
            "api.keep_alive_idle_secs",
            "must be between 1 and 3600",
        );
        check(
            (1..=3600).contains(&self.api.write_timeout_secs),
            "api.write_timeout_secs",
            "must be between 1 and 3600",
        );
        check(
            self.api.max_open_connections >= 1,
            "api.max_open_connections",
            "must be above 0",
        );
        check(
            (1..=self.api.max_open_connections).contains(&self.api.max_connections_per_client),
            "api.max_connections_per_client",
            "must be between 1 and api.max_open_connections",
        );
        check(
            self.api.sqlite_mmap_mib <= 1 << 20,
            "api.sqlite_mmap_mib",
            "must be at most 1048576 (1 TiB, what this build's SQLite maps at most)",
        );
        check(
            self.projection.rebuild_chunk > 0,
            "projection.rebuild_chunk",
            "must be above 0",
        );
        check(
            (1..=1 << 20).contains(&self.projection.rebuild_wal_limit_mib),
            "projection.rebuild_wal_limit_mib",
            "must be between 1 and 1048576",
        );
        check(
            self.projection.analyze_every_secs > 0,
            "projection.analyze_every_secs",
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
