//! What an operator sees: the replica's checkpoint and size, the lease, today's budget,
//! the last ticks, the source head and the lag, and the backfill ETA.
//!
//! Owns the gathering and rendering of status; reads only, never writes.

use std::fmt::Write;

use serde::{Serialize, Serializer};

use std::sync::Arc;

use crate::config::Settings;
use crate::store::fmt_ms;
use crate::store::records::{BudgetUsage, LeaseInfo};
use crate::store::{Store, TickRecord, WriterState};

/// What status is read from: the store's records (the budget's count among them), the
/// lease as [`LeaseView`] shows it, and the settings (the daily budget, the ETA, the
/// API's thresholds). Read only: status never holds the writer's lease or budget.
#[derive(Clone)]
pub struct StatusSource {
    pub settings: Settings,
    pub store: Store,
    pub lease: Arc<dyn LeaseView>,
}

/// The lease, shown read only (who holds it, its epoch, until when). The writer's lease
/// gives this view (wired in `app.rs`); status never takes, renews or releases it.
#[async_trait::async_trait]
pub trait LeaseView: Send + Sync {
    async fn show(&self) -> Result<LeaseInfo, String>;
}

impl StatusSource {
    /// Today's budget, as the store's durable count says.
    pub async fn budget(&self) -> Result<BudgetUsage, crate::store::StoreError> {
        self.store.budget_usage(self.settings.budget.daily).await
    }
}

/// The read API's state as the store tells it.
#[derive(Debug, Serialize)]
pub struct ApiStatus {
    /// The phase includes `serve`: `/v1` answers.
    pub serving: bool,
    /// `/readyz` would say ready: serving, projections built and within `api.max_lag_ids`.
    pub ready: bool,
    /// The projections' watermark (lowest cursor) and its lag behind the checkpoint.
    pub watermark: Option<i64>,
    pub lag_ids: Option<i64>,
    pub bind: String,
    /// Whether `/healthz` answered on `api.bind` (only `isir status` probes it).
    pub reachable: Option<bool>,
    /// This replica's identifier (`replica_id`, made at `migrate`; not a secret).
    pub replica: Option<String>,
    /// The identifier `/healthz` on `api.bind` gave (only `isir status` probes it):
    /// another value means another replica answers there.
    pub answering_replica: Option<String>,
}

/// A part of the status read from a back end that may fail (the lease, the budget),
/// in JSON: `available`, `error` (null when available), and the part's own fields when
/// available. One schema for both outcomes, never serde's `Ok`/`Err`.
fn part<T: Serialize, S: Serializer>(r: &Result<T, String>, s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Part<'a, T: Serialize> {
        available: bool,
        error: Option<&'a String>,
        #[serde(flatten)]
        value: Option<&'a T>,
    }
    Part {
        available: r.is_ok(),
        error: r.as_ref().err(),
        value: r.as_ref().ok(),
    }
    .serialize(s)
}

/// Actions stored per hour, in JSON: `[{"hour": RFC 3339, "actions": n}]`.
fn hours<S: Serializer>(v: &[(i64, i64)], s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Hour {
        hour: String,
        actions: i64,
    }
    s.collect_seq(v.iter().map(|&(h, n)| Hour {
        hour: fmt_ms(h),
        actions: n,
    }))
}

#[derive(Debug, Serialize)]
pub struct Status {
    pub backend: &'static str,
    pub phase: Option<String>,
    pub checkpoint: Option<i64>,
    pub stored_actions: i64,
    /// Records of the feed held back in the quarantine (not in the replica).
    pub quarantined: i64,
    /// Records repaired from windows-1250 and stored (their bytes kept in the quarantine).
    pub repaired: i64,
    pub epoch: i64,
    #[serde(serialize_with = "part")]
    pub lease: Result<LeaseInfo, String>,
    #[serde(serialize_with = "part")]
    pub budget: Result<BudgetUsage, String>,
    pub head_id: Option<i64>,
    pub head_checked_at: Option<String>,
    pub lag_ids: Option<i64>,
    pub lag_seconds: Option<i64>,
    /// How far the source's newest ID is below the checkpoint, when the last tick found
    /// it so: a reset or different register. Never caught up while set.
    pub source_behind_ids: Option<i64>,
    pub backfill_eta: Option<String>,
    pub last_tick: Option<TickRecord>,
    pub recent_ticks: Vec<TickRecord>,
    /// Each projection builder: cursor, version, counters, error.
    pub projections: Vec<crate::readmodel::meta::Meta>,
    pub api: ApiStatus,
    /// Backfill progress from `poll.start_id` to the head, 0 to 1.
    pub progress: Option<f64>,
    /// Actions stored per hour over the last three days: (hour start in ms, actions).
    #[serde(serialize_with = "hours")]
    pub stored_per_hour: Vec<(i64, i64)>,
    /// Watchlists and their notifier: cursor, lag behind the watermark, failing state.
    pub watchlists: Vec<WatchStatus>,
}

/// A watchlist as the status shows it.
#[derive(Debug, Serialize)]
pub struct WatchStatus {
    #[serde(flatten)]
    pub list: crate::watchlist::Watchlist,
    /// Feed positions between the delivered cursor and the projection watermark (an upper
    /// bound of what is left to deliver); `None` without a webhook.
    pub lag_ids: Option<i64>,
}

/// The watchlists with their lag behind `watermark`.
pub async fn watch_status(store: &Store, watermark: Option<i64>) -> Vec<WatchStatus> {
    crate::watchlist::list(store)
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|l| WatchStatus {
            lag_ids: l
                .webhook_url
                .as_ref()
                .and(watermark)
                .map(|w| (w - l.cursor).max(0)),
            list: l,
        })
        .collect()
}

/// A rough ETA from the budget: pages left at 1000 IDs... per request, limited by both
/// the batches a tick and the daily budget.
pub fn eta_text(s: &Settings, checkpoint: i64, head: i64) -> String {
    match eta_seconds(s, checkpoint, head) {
        0 => "caught up".into(),
        secs => format!("ETA {}", human(secs)),
    }
}

pub fn eta_seconds(s: &Settings, checkpoint: i64, head: i64) -> i64 {
    let left = (head - checkpoint).max(0);
    if left == 0 {
        return 0;
    }
    // IDs have gaps: a page of 1000 actions spans about 1500 IDs.
    let pages = (left as f64 / (s.poll.page_size as f64 * 1.5)).ceil();
    let by_ticks = (pages / s.poll.max_batches_per_tick as f64).ceil() * s.poll.period_secs as f64;
    let by_budget = pages / s.budget.daily as f64 * 86_400.0;
    by_ticks.max(by_budget) as i64
}

pub fn human(secs: i64) -> String {
    let (d, h, m) = (secs / 86_400, secs % 86_400 / 3600, secs % 3600 / 60);
    if d > 0 {
        format!("{d}d {h}h")
    } else if h > 0 {
        format!("{h}h {m}m")
    } else {
        format!("{m}m {}s", secs % 60)
    }
}

pub async fn collect(app: &StatusSource) -> anyhow::Result<Status> {
    let st: WriterState = app.store.writer_state().await?;
    let stored = app.store.count_actions().await?;
    let (quarantined, repaired) = app.store.quarantine_counts().await?;
    let ticks = app.store.recent_ticks(10).await?;
    // A source found behind the checkpoint: no lag, no ETA, no progress (never "caught
    // up"), but how far behind it is.
    let behind = st.source_behind();
    let lag_ids = match (st.head_id, st.checkpoint) {
        _ if behind.is_some() => None,
        (Some(h), Some(c)) => Some((h - c).max(0)),
        (Some(h), None) => Some(h - app.settings.poll.start_id.max(0)),
        _ => None,
    };
    let lag_seconds = match (lag_ids, st.checkpoint) {
        (Some(0), _) => Some(0),
        (Some(_), Some(c)) => app
            .store
            .actions_after(c - 1, 1)
            .await?
            .first()
            .and_then(|a| chrono::DateTime::parse_from_rfc3339(&a.published).ok())
            .map(|p| (chrono::Utc::now().timestamp() - p.timestamp()).max(0)),
        _ => None,
    };
    let phase = app.store.setting("phase").await?;
    let serving = phase
        .as_deref()
        .and_then(crate::phase::Phase::parse)
        .is_some_and(|p| p >= crate::phase::Phase::Serve);
    let projections = crate::readmodel::meta::metas(&app.store)
        .await
        .unwrap_or_default();
    let live: Vec<_> = projections
        .iter()
        .filter(|m| !m.name.contains('#'))
        .collect();
    let built = live.len() >= crate::readmodel::meta::NAMES.len();
    let watermark = crate::readmodel::meta::watermark(&projections);
    Ok(Status {
        backend: app.store.backend(),
        phase,
        checkpoint: st.checkpoint,
        stored_actions: stored,
        quarantined,
        repaired,
        epoch: st.epoch,
        lease: app.lease.show().await,
        budget: app.budget().await.map_err(|e| e.to_string()),
        head_id: st.head_id,
        head_checked_at: st.head_checked_at.map(fmt_ms),
        lag_ids,
        lag_seconds,
        source_behind_ids: behind,
        backfill_eta: st.head_id.filter(|_| behind.is_none()).map(|h| {
            eta_text(
                &app.settings,
                st.checkpoint.unwrap_or(app.settings.poll.start_id),
                h,
            )
        }),
        last_tick: ticks.first().cloned(),
        recent_ticks: ticks,
        projections: projections.clone(),
        api: ApiStatus {
            serving,
            ready: serving
                && built
                && watermark.is_some_and(|w| {
                    (st.checkpoint.unwrap_or(-1) - w).max(0) <= app.settings.api.max_lag_ids
                }),
            watermark,
            lag_ids: watermark.map(|w| (st.checkpoint.unwrap_or(-1) - w).max(0)),
            bind: app.settings.api.bind.clone(),
            reachable: None,
            replica: app.store.replica_id().await?,
            answering_replica: None,
        },
        progress: st.head_id.filter(|_| behind.is_none()).map(|h| {
            let start = app.settings.poll.start_id.max(0);
            let done = st.checkpoint.unwrap_or(start) - start;
            let all = (h - start).max(1);
            (done as f64 / all as f64).clamp(0.0, 1.0)
        }),
        watchlists: watch_status(&app.store, watermark).await,
        stored_per_hour: app
            .store
            .stored_per_hour(crate::store::now_ms() - 72 * 3_600_000)
            .await?,
    })
}

impl ApiStatus {
    /// What answers on `api.bind`, as `isir status` found it: this replica, another one
    /// (its identifier), or nothing.
    pub fn answering_text(&self) -> String {
        match (self.reachable, &self.answering_replica, &self.replica) {
            (Some(false), ..) => " (not answering)".into(),
            (Some(true), Some(a), Some(mine)) if a == mine => " (answering: this replica)".into(),
            (Some(true), Some(a), _) => format!(
                " (answering, but ANOTHER replica: {a}; this one is {})",
                self.replica
                    .as_deref()
                    .unwrap_or("unnamed (run isir migrate)")
            ),
            (Some(true), None, _) => {
                " (something answers, but gives no replica identifier: not this replica's API)"
                    .into()
            }
            (None, ..) => String::new(),
        }
    }
}

impl Status {
    pub fn render_text(&self) -> String {
        let mut o = String::new();
        let opt = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
        let _ = writeln!(o, "backend      {}", self.backend);
        let _ = writeln!(o, "phase        {}", self.phase.as_deref().unwrap_or("-"));
        let _ = writeln!(o, "checkpoint   {}", opt(self.checkpoint));
        let _ = writeln!(o, "stored       {} actions", self.stored_actions);
        let _ = writeln!(
            o,
            "quarantine   {} held back, {} repaired (isir quarantine list)",
            self.quarantined, self.repaired
        );
        let _ = writeln!(o, "epoch        {}", self.epoch);
        match &self.lease {
            Ok(l) => {
                let _ = writeln!(
                    o,
                    "lease        {} ({}), epoch {}, until {}",
                    l.holder.as_deref().unwrap_or("free"),
                    l.backend,
                    opt(l.epoch),
                    l.expires_at.map(fmt_ms).unwrap_or_else(|| "-".into())
                );
            }
            Err(e) => {
                let _ = writeln!(o, "lease        unavailable: {e}");
            }
        }
        match &self.budget {
            Ok(b) => {
                let _ = writeln!(
                    o,
                    "budget       {}/{} used on {}, {} left, resets {}",
                    b.used, b.limit, b.day, b.left, b.resets_at
                );
            }
            Err(e) => {
                let _ = writeln!(o, "budget       unavailable: {e}");
            }
        }
        let _ = writeln!(
            o,
            "source head  {} (checked {})",
            opt(self.head_id),
            self.head_checked_at.as_deref().unwrap_or("never")
        );
        match (self.source_behind_ids, self.head_id, self.checkpoint) {
            (Some(_), Some(h), Some(c)) => {
                let _ = writeln!(
                    o,
                    "lag          SOURCE BEHIND: {} (isir runbook: docs/runbooks/source-outage.md)",
                    crate::store::behind_text(h, c)
                );
            }
            _ => {
                let _ = writeln!(
                    o,
                    "lag          {} IDs, {}",
                    opt(self.lag_ids),
                    self.lag_seconds.map(human).unwrap_or_else(|| "-".into())
                );
            }
        }
        if let Some(e) = &self.backfill_eta {
            let _ = writeln!(o, "backfill     {e}");
        }
        if let Some(t) = &self.last_tick {
            let _ = writeln!(
                o,
                "last tick    {} at {}: {} pages, {} actions, {} requests{}",
                t.outcome,
                fmt_ms(t.at),
                t.pages,
                t.actions,
                t.requests,
                t.detail
                    .as_deref()
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default()
            );
        }
        let _ = writeln!(
            o,
            "api          {} on {}{}, watermark {}, {} IDs behind",
            if self.api.ready {
                "ready"
            } else if self.api.serving {
                "serving, not ready"
            } else {
                "off (phase before serve)"
            },
            self.api.bind,
            self.api.answering_text(),
            opt(self.api.watermark),
            opt(self.api.lag_ids)
        );
        for m in &self.projections {
            let lag = self.checkpoint.map(|c| (c - m.cursor).max(0));
            let _ = writeln!(
                o,
                "projection   {:<15} v{} cursor {} lag {} IDs; unknown codes {}, other unknown {}, unparsed {}, erased {}{}",
                m.name,
                m.version,
                m.cursor,
                opt(lag),
                m.counts.unknown_codes,
                m.counts.unknown_other,
                m.counts.unparsed,
                m.counts.erased,
                m.error
                    .as_deref()
                    .map(|e| format!("; STOPPED: {e}"))
                    .unwrap_or_default()
            );
        }
        o
    }
}
