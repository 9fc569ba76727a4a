//! The writer's coordination as an operator reads it: who holds the lease and today's
//! budget, from the records the store keeps (the budget's day count, the lease row of the
//! embedded default). The status page, `/metrics` and `isir status` read these without
//! the writer's types; a lease kept in Redis is shown through `status::LeaseView`.
//!
//! Owns: the shapes shown ([`LeaseInfo`], [`BudgetUsage`]) and the budget's calendar day
//! (Europe/Prague). Never takes, renews or releases a lease, and never spends budget.

use chrono::{DateTime, Days, TimeZone, Utc};
use chrono_tz::Europe::Prague;

use super::{Store, StoreError, now_ms};

/// Who holds the lease, for status.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LeaseInfo {
    pub backend: &'static str,
    pub holder: Option<String>,
    pub epoch: Option<i64>,
    #[serde(serialize_with = "crate::store::rfc3339::opt_ms")]
    pub expires_at: Option<i64>,
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

impl Store {
    /// Today's usage of a budget of `daily` requests, as the durable counter says.
    pub async fn budget_usage(&self, daily: u64) -> Result<BudgetUsage, StoreError> {
        let now = Utc::now();
        let day = prague_day(now);
        let used = self.budget_used(&day).await?;
        Ok(BudgetUsage {
            day,
            used,
            limit: daily,
            left: daily.saturating_sub(used),
            resets_at: next_reset(now).to_rfc3339(),
        })
    }

    /// The lease kept in the database under `name`: its holder until it expires, and
    /// the last epoch granted.
    pub async fn lease_info(&self, name: &str) -> Result<LeaseInfo, StoreError> {
        let r = self.lease_show(name).await?;
        let now = now_ms();
        Ok(match r {
            Some(r) if r.holder.is_some() && r.expires_at > now => LeaseInfo {
                backend: "database",
                holder: r.holder,
                epoch: Some(r.epoch),
                expires_at: Some(r.expires_at),
            },
            r => LeaseInfo {
                backend: "database",
                holder: None,
                epoch: r.map(|r| r.epoch),
                expires_at: None,
            },
        })
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
