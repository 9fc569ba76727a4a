//! The request budget: the register's daily limit (per Europe/Prague calendar day) and
//! per-minute limit, counted durably and shared by every instance.
//!
//! With Redis: a key per day (with an expiry) and a sliding one-minute window, checked and
//! counted by one script. Without Redis: the same in database rows. In process, governor
//! smooths bursts first. A request is counted when granted, before it is sent; if the
//! counter cannot be reached nothing is granted (fail closed). This module never sends.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Days, TimeZone, Utc};
use chrono_tz::Europe::Prague;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use crate::redis_conn::RedisConn;
use crate::source::{Gate, GateError, Operation};
use crate::store::{DbTake, Store};

enum Backend {
    Redis {
        conn: Arc<RedisConn>,
        prefix: String,
    },
    Db(Store),
}

pub struct Budget {
    backend: Backend,
    daily: u64,
    per_minute: u32,
    limiter: DefaultDirectRateLimiter,
    /// How long `acquire` may wait for the minute window before refusing.
    max_wait: Duration,
    /// Makes this process's entries of the shared minute window unique.
    member: (String, std::sync::atomic::AtomicU64),
}

/// Today's usage.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BudgetUsage {
    pub day: String,
    pub used: u64,
    pub limit: u64,
    pub left: u64,
    pub resets_at: String,
}

/// The Prague calendar day of `t`, as `YYYY-MM-DD`.
pub fn prague_day(t: DateTime<Utc>) -> String {
    t.with_timezone(&Prague).format("%Y-%m-%d").to_string()
}

/// The next Prague midnight after `t`.
pub fn next_reset(t: DateTime<Utc>) -> DateTime<Utc> {
    let d = t
        .with_timezone(&Prague)
        .date_naive()
        .checked_add_days(Days::new(1))
        .unwrap();
    let midnight = d.and_hms_opt(0, 0, 0).unwrap();
    Prague
        .from_local_datetime(&midnight)
        .earliest()
        .unwrap_or_else(|| Prague.from_utc_datetime(&midnight))
        .with_timezone(&Utc)
}

const TAKE: &str = r#"
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
if used >= tonumber(ARGV[1]) then
  return {0, used}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - 60000)
local n = redis.call('ZCARD', KEYS[2])
if n >= tonumber(ARGV[2]) then
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return {1, tonumber(oldest[2]) + 60001 - now}
end
used = redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], 172800)
redis.call('ZADD', KEYS[2], now, ARGV[3])
redis.call('PEXPIRE', KEYS[2], 120000)
return {2, used}
"#;

impl Budget {
    pub fn redis(conn: Arc<RedisConn>, prefix: &str, daily: u64, per_minute: u32) -> Self {
        Self::with(
            Backend::Redis {
                conn,
                prefix: prefix.into(),
            },
            daily,
            per_minute,
        )
    }

    pub fn database(store: Store, daily: u64, per_minute: u32) -> Self {
        Self::with(Backend::Db(store), daily, per_minute)
    }

    fn with(backend: Backend, daily: u64, per_minute: u32) -> Self {
        let q = Quota::per_minute(NonZeroU32::new(per_minute.max(1)).unwrap());
        Self {
            backend,
            daily,
            per_minute,
            limiter: RateLimiter::direct(q),
            max_wait: Duration::from_secs(65),
            member: (
                crate::lease::holder_identity(),
                std::sync::atomic::AtomicU64::new(0),
            ),
        }
    }

    /// Sets how long `acquire` may wait for room in the minute window.
    pub fn max_wait(mut self, d: Duration) -> Self {
        self.max_wait = d;
        self
    }

    pub fn daily_limit(&self) -> u64 {
        self.daily
    }

    /// Counts one request durably if the limits allow it.
    async fn take(&self) -> Result<(), GateError> {
        let now = Utc::now();
        let day = prague_day(now);
        let exhausted = |used: u64| GateError::BudgetExhausted {
            used,
            limit: self.daily,
            resets_at: next_reset(now).to_rfc3339(),
        };
        match &self.backend {
            Backend::Db(store) => {
                match store.budget_take(&day, self.daily, self.per_minute).await {
                    Ok(DbTake::Granted { .. }) => Ok(()),
                    Ok(DbTake::DayExhausted { used }) => Err(exhausted(used)),
                    Ok(DbTake::MinuteFull { retry_after_ms }) => Err(GateError::RateLimited {
                        retry_after: Duration::from_millis(retry_after_ms.max(1) as u64),
                    }),
                    Err(e) => Err(GateError::Unavailable(format!("database: {e}"))),
                }
            }
            Backend::Redis { conn, prefix } => {
                let day_key = format!("{prefix}:{day}");
                let min_key = format!("{prefix}:minute");
                let seq = self
                    .member
                    .1
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let member = format!("{}:{seq}", self.member.0);
                let r: Result<(i64, i64), _> = conn
                    .eval(
                        &redis::Script::new(TAKE),
                        &[&day_key, &min_key],
                        &[self.daily.to_string(), self.per_minute.to_string(), member],
                    )
                    .await;
                match r {
                    Ok((2, _)) => Ok(()),
                    Ok((0, used)) => Err(exhausted(used as u64)),
                    Ok((_, ms)) => Err(GateError::RateLimited {
                        retry_after: Duration::from_millis(ms.max(1) as u64),
                    }),
                    Err(e) => Err(GateError::Unavailable(format!("redis: {e}"))),
                }
            }
        }
    }

    /// Today's usage, as the durable counter says.
    pub async fn usage(&self) -> anyhow::Result<BudgetUsage> {
        let now = Utc::now();
        let day = prague_day(now);
        let used = match &self.backend {
            Backend::Db(store) => store.budget_used(&day).await?,
            Backend::Redis { conn, prefix } => {
                let mut c = conn.get().await?;
                let v: Option<u64> = redis::cmd("GET")
                    .arg(format!("{prefix}:{day}"))
                    .query_async(&mut c)
                    .await?;
                v.unwrap_or(0)
            }
        };
        Ok(BudgetUsage {
            day,
            used,
            limit: self.daily,
            left: self.daily.saturating_sub(used),
            resets_at: next_reset(now).to_rfc3339(),
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn prague_days_and_resets() {
        let t = Utc.with_ymd_and_hms(2026, 3, 28, 23, 30, 0).unwrap(); // 00:30 in Prague (CET)
        assert_eq!(prague_day(t), "2026-03-29");
        // 29 March 2026 is the spring change; the next midnight is 30 March 00:00 CEST.
        assert_eq!(next_reset(t).to_rfc3339(), "2026-03-29T22:00:00+00:00");
        let w = Utc.with_ymd_and_hms(2026, 1, 10, 12, 0, 0).unwrap();
        assert_eq!(next_reset(w).to_rfc3339(), "2026-01-10T23:00:00+00:00");
    }
}
