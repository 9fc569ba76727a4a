//! The request budget: the register's daily limit (per Europe/Prague calendar day) and
//! per-minute limit, counted durably and shared by every instance.
//!
//! One system of record, the database (rows `budget_day` and `budget_log`), whatever the
//! process's configuration: the daemon with Redis, an operator's `isir fetch` without it
//! and a restarted process all spend one budget, and a Redis restart cannot raise it
//! (at most 3000 writes a day). The register counts a request when it arrives, not when
//! we grant it: the minute window is counted over 60 s plus a margin for the time from
//! grant to arrival (`budget.window_margin_secs`), so that no 60-second window at the
//! source sees more than `per_minute`, across restarts too. In process, governor smooths
//! bursts first. A request is counted when granted, before it is sent; if the counter
//! cannot be reached nothing is granted (fail closed). This module never sends.

use std::num::NonZeroU32;
use std::time::Duration;

use chrono::Utc;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use crate::source::{Gate, GateError, Operation};
/// The budget's day and usage, as the store records them (status reads them there).
pub use crate::store::records::{BudgetUsage, next_reset, prague_day};
use crate::store::{DbTake, Store};

/// The margin added to the register's one-minute window by default: a request reaches
/// the register within a few seconds of its grant (connection, TLS, the body), or not
/// at all.
pub const DEFAULT_MARGIN: Duration = Duration::from_secs(5);

pub struct Budget {
    store: Store,
    daily: u64,
    per_minute: u32,
    /// The minute window as counted here: 60 s and the margin.
    window: Duration,
    limiter: DefaultDirectRateLimiter,
    /// How long `acquire` may wait for the minute window before refusing.
    max_wait: Duration,
}

impl Budget {
    /// The budget counted in `store`, with the default margin.
    pub fn database(store: Store, daily: u64, per_minute: u32) -> Self {
        let q = Quota::per_minute(NonZeroU32::new(per_minute.max(1)).unwrap());
        Self {
            store,
            daily,
            per_minute,
            window: Duration::from_secs(60) + DEFAULT_MARGIN,
            limiter: RateLimiter::direct(q),
            max_wait: Duration::from_secs(65),
        }
    }

    /// Sets the margin added to the one-minute window for the time from grant to arrival.
    pub fn margin(mut self, m: Duration) -> Self {
        self.window = Duration::from_secs(60) + m;
        self
    }

    /// Sets how long `acquire` may wait for room in the minute window.
    pub fn max_wait(mut self, d: Duration) -> Self {
        self.max_wait = d;
        self
    }

    /// Counts one request durably if the limits allow it.
    async fn take(&self) -> Result<(), GateError> {
        let now = Utc::now();
        let day = prague_day(now);
        match self
            .store
            .budget_take(
                &day,
                self.daily,
                self.per_minute,
                self.window.as_millis() as i64,
            )
            .await
        {
            Ok(DbTake::Granted { .. }) => Ok(()),
            Ok(DbTake::DayExhausted { used }) => Err(GateError::BudgetExhausted {
                used,
                limit: self.daily,
                resets_at: next_reset(now).to_rfc3339(),
            }),
            Ok(DbTake::MinuteFull { retry_after_ms }) => Err(GateError::RateLimited {
                retry_after: Duration::from_millis(retry_after_ms.max(1) as u64),
            }),
            Err(e) => Err(GateError::Unavailable(format!("database: {e}"))),
        }
    }

    /// Today's usage, as the durable counter says.
    pub async fn usage(&self) -> anyhow::Result<BudgetUsage> {
        Ok(self.store.budget_usage(self.daily).await?)
    }
}

#[async_trait::async_trait]
impl Gate for Budget {
    /// Grants one request: waits (briefly) for the minute window, refuses when the day is
    /// spent or the counter is unreachable.
    async fn acquire(&self, _op: Operation) -> Result<(), GateError> {
        let deadline = tokio::time::Instant::now() + self.max_wait;
        loop {
            self.limiter.until_ready().await;
            match self.take().await {
                Err(GateError::RateLimited { retry_after })
                    if tokio::time::Instant::now() + retry_after <= deadline =>
                {
                    tracing::debug!(?retry_after, "minute window full; waiting");
                    tokio::time::sleep(retry_after).await;
                }
                other => return other,
            }
        }
    }
}
