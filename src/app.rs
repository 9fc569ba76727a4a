//! Wiring: builds the store, lease, budget, client and poller from the settings.
//!
//! Owns construction only (glue, `anyhow` errors with context). Components get their
//! resources from here and never read the environment themselves.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::budget::Budget;
use crate::config::Settings;
use crate::lease::Lease;
use crate::poller::{PollOptions, Poller};
use crate::redis_conn::RedisConn;
use crate::source::SourceClient;
use crate::store::Store;

/// The writer's parts.
pub struct App {
    pub settings: Settings,
    pub store: Store,
    pub lease: Arc<Lease>,
    pub budget: Arc<Budget>,
    pub redis: Option<Arc<RedisConn>>,
}

impl App {
    /// Connects to the database (migrating it) and, if configured, Redis.
    pub async fn build(settings: Settings) -> anyhow::Result<App> {
        crate::telemetry::init();
        let store = Store::connect(&settings.database.url, settings.database.max_connections)
            .await
            .with_context(|| {
                format!(
                    "connecting to the database (database.url = {})",
                    redact(&settings.database.url)
                )
            })?;
        store.migrate().await.context("applying migrations")?;
        store
            .init_setting("phase", &settings.phase.initial)
            .await
            .context("initialising the phase")?;
        let (lease, budget, redis) = Self::lease_and_budget(&settings, &store)?;
        Ok(App {
            settings,
            store,
            lease: Arc::new(lease),
            budget: Arc::new(budget),
            redis,
        })
    }

    /// Records the settings the builders of every process read from the store
    /// (`projection.redact_replica`). Only the daemon calls it: `isir status` and the
    /// other commands, run without the daemon's configuration, must not change what the
    /// daemon set. Unrecorded, the builders redact (the default).
    pub async fn record_settings(&self) -> anyhow::Result<()> {
        self.store
            .set_setting(
                "redact_replica",
                if self.settings.projection.redact_replica {
                    "true"
                } else {
                    "false"
                },
            )
            .await
            .context("recording projection.redact_replica")?;
        Ok(())
    }

    /// The lease and the budget the settings name (Redis or the database), without
    /// touching either: also used read-only by `isir serve` to show them.
    pub fn lease_and_budget(
        settings: &Settings,
        store: &Store,
    ) -> anyhow::Result<(Lease, Budget, Option<Arc<RedisConn>>)> {
        let ttl = Duration::from_secs(settings.lease.ttl_secs);
        // The budget's one system of record is the database, with Redis or without.
        let budget = Budget::database(
            store.clone(),
            settings.budget.daily,
            settings.budget.per_minute,
        )
        .margin(Duration::from_secs(settings.budget.window_margin_secs));
        let r = match &settings.redis.url {
            Some(url) => {
                let conn = Arc::new(
                    RedisConn::new(url).with_context(|| format!("redis.url = {}", redact(url)))?,
                );
                (
                    Lease::redis(
                        conn.clone(),
                        &settings.lease.key,
                        &settings.lease.epoch_key,
                        store.clone(),
                        ttl,
                    ),
                    budget,
                    Some(conn),
                )
            }
            None => (
                Lease::database(&settings.lease.key, store.clone(), ttl),
                budget,
                None,
            ),
        };
        Ok(r)
    }

    /// What the status page and `isir status` read.
    pub fn status_source(&self) -> crate::status::StatusSource {
        crate::status::StatusSource {
            settings: self.settings.clone(),
            store: self.store.clone(),
            lease: self.lease.clone(),
        }
    }

    /// The source client behind the budget.
    pub fn client(&self) -> anyhow::Result<SourceClient> {
        SourceClient::new(self.settings.client_options(), self.budget.clone())
    }

    pub fn poller(&self) -> anyhow::Result<Poller> {
        Ok(Poller::new(
            self.client()?,
            self.store.clone(),
            self.lease.clone(),
            PollOptions::from_settings(&self.settings),
        ))
    }
}

/// A URL without its password, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// The writer's lease, shown read only to status.
#[async_trait::async_trait]
impl crate::status::LeaseView for Lease {
    async fn show(&self) -> Result<crate::store::records::LeaseInfo, String> {
        Lease::show(self).await.map_err(|e| e.to_string())
    }
}
