//! The single writer's tick: take or renew the lease, learn the source head when due,
//! fetch at most N pages after the checkpoint, store each with the checkpoint in one
//! transaction.
//!
//! Owns the order of a tick and its failure policy. The poller is the only code that
//! writes the replica. It never waits for the lease, never sends a request the budget did
//! not grant, never moves the checkpoint past data that was not stored, and never sends
//! another request after a store failure.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{Notify, watch};

pub mod by_hand;
mod keeper;
mod report;

use keeper::Keeper;

use crate::checkpoint;
use crate::lease::{Acquire, Grant, Lease};
use crate::phase::Phase;
use crate::source::{GateError, Page, SourceClient, SourceError};
use crate::store::{Store, StoreError, TickRecord, now_ms};

#[derive(Debug, Clone)]
pub struct PollOptions {
    pub max_batches_per_tick: u32,
    pub head_check: Duration,
    pub start_id: i64,
    pub page_size: u32,
    pub max_retries: u32,
    pub retry_backoff: Duration,
    /// `source.bad_records`.
    pub bad_records: crate::config::BadRecords,
    /// `source.max_bad_records_per_page`: the breaker.
    pub max_bad_records_per_page: u32,
}

impl PollOptions {
    pub fn from_settings(s: &crate::config::Settings) -> Self {
        Self {
            max_batches_per_tick: s.poll.max_batches_per_tick,
            head_check: Duration::from_secs(s.poll.head_check_secs),
            start_id: s.poll.start_id,
            page_size: s.poll.page_size,
            max_retries: s.source.max_retries,
            retry_backoff: Duration::from_millis(s.source.retry_backoff_ms),
            bad_records: s.source.bad_records,
            max_bad_records_per_page: s.source.max_bad_records_per_page,
        }
    }
}

/// How a tick ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TickOutcome {
    /// The replica reached the source's end (an empty page, or a short page at the head).
    CaughtUp,
    /// `max_batches_per_tick` pages were stored; more remain.
    BatchLimit,
    /// The daily budget is spent; it resets at `resets_at`.
    BudgetSpent { resets_at: String },
    /// Another process holds the lease.
    LeaseNotHeld { holder: String, until: Option<i64> },
    /// The lease was lost during the tick (renewal failed, or the store fenced us).
    LeaseLost { reason: String },
    /// The source failed; the checkpoint is untouched past the last stored page.
    SourceError {
        class: String,
        after: i64,
        error: String,
    },
    /// The store (or the lease or budget backend) failed; no further request was sent.
    StoreError { error: String },
    /// The source's newest ID is below the checkpoint: a source reset, restored or
    /// replaced by another (a wrong `source.url`). Nothing is fetched (a page after the
    /// checkpoint would be empty and wasted), and the tick is never called caught up;
    /// every tick checks the head again until it reaches the checkpoint.
    SourceBehind { head: i64, checkpoint: i64 },
    /// The phase does not include ingestion.
    Disabled { phase: String },
    /// Shutdown was requested between pages.
    Interrupted,
}

impl TickOutcome {
    pub fn name(&self) -> &'static str {
        match self {
            TickOutcome::CaughtUp => "caught_up",
            TickOutcome::BatchLimit => "batch_limit",
            TickOutcome::BudgetSpent { .. } => "budget_spent",
            TickOutcome::LeaseNotHeld { .. } => "lease_not_held",
            TickOutcome::LeaseLost { .. } => "lease_lost",
            TickOutcome::SourceError { .. } => "source_error",
            TickOutcome::StoreError { .. } => "store_error",
            TickOutcome::SourceBehind { .. } => "source_behind",
            TickOutcome::Disabled { .. } => "disabled",
            TickOutcome::Interrupted => "interrupted",
        }
    }
}

/// One tick's result.
#[derive(Debug, Clone, Serialize)]
pub struct Tick {
    pub outcome: TickOutcome,
    pub pages: u32,
    pub actions: u64,
    /// Records held back in the quarantine this tick.
    pub quarantined: u64,
    /// Records repaired (decoded from windows-1250) and stored this tick.
    pub repaired: u64,
    /// Requests sent (granted by the budget).
    pub requests: u32,
    pub checkpoint: Option<i64>,
    pub head: Option<i64>,
}

pub struct Poller {
    client: SourceClient,
    store: Store,
    lease: Arc<Lease>,
    opts: PollOptions,
    held: Option<Grant>,
    /// Woken after every stored page (projection builders listen).
    stored: Arc<Notify>,
    /// Whether this poller has read the source's newest ID itself: its first tick does,
    /// so that a source behind the replica (a restarted simulator, another register at
    /// `source.url`) is seen at once, not after `poll.head_check_secs`.
    head_read: bool,
}

impl Poller {
    pub fn new(client: SourceClient, store: Store, lease: Arc<Lease>, opts: PollOptions) -> Self {
        Self {
            client,
            store,
            lease,
            opts,
            held: None,
            stored: Arc::new(Notify::new()),
            head_read: false,
        }
    }

    /// Notified after each stored page.
    pub fn stored_signal(&self) -> Arc<Notify> {
        self.stored.clone()
    }

    pub fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// Releases the lease if held (on shutdown).
    pub async fn release(&mut self) {
        if let Some(g) = self.held.take() {
            match self.lease.release(g.epoch).await {
                Ok(true) => tracing::info!(epoch = g.epoch, "lease released"),
                Ok(false) => tracing::info!(epoch = g.epoch, "lease already gone at release"),
                Err(e) => tracing::warn!(error = %e, "lease release failed; it expires by itself"),
            }
        }
    }

    /// Runs one tick without a shutdown signal.
    pub async fn poll_once(&mut self) -> Tick {
        let (_tx, rx) = watch::channel(false);
        self.poll_once_until(&rx).await
    }

    /// Runs one tick; stops between pages when `shutdown` turns true.
    pub async fn poll_once_until(&mut self, shutdown: &watch::Receiver<bool>) -> Tick {
        let mut t = Tick {
            outcome: TickOutcome::CaughtUp,
            pages: 0,
            actions: 0,
            quarantined: 0,
            repaired: 0,
            requests: 0,
            checkpoint: None,
            head: None,
        };
        let started = std::time::Instant::now();
        t.outcome = self.tick(&mut t, shutdown).await;
        if !matches!(
            t.outcome,
            TickOutcome::LeaseNotHeld { .. } | TickOutcome::Disabled { .. }
        ) {
            metrics::histogram!("isir_tick_duration_seconds")
                .record(started.elapsed().as_secs_f64());
        }
        report::log(&t);
        report::record_metrics(&t, self.held);
        let rec = TickRecord {
            at: now_ms(),
            outcome: t.outcome.name().into(),
            pages: t.pages as i64,
            actions: t.actions as i64,
            requests: t.requests as i64,
            checkpoint: t.checkpoint,
            detail: match &t.outcome {
                TickOutcome::SourceError { error, .. } | TickOutcome::StoreError { error } => {
                    Some(error.clone())
                }
                TickOutcome::LeaseLost { reason } => Some(reason.clone()),
                TickOutcome::BudgetSpent { resets_at } => Some(format!("resets at {resets_at}")),
                TickOutcome::LeaseNotHeld { holder, .. } => Some(format!("held by {holder}")),
                TickOutcome::SourceBehind { head, checkpoint } => {
                    Some(crate::store::behind_text(*head, *checkpoint))
                }
                _ => None,
            },
        };
        if !matches!(t.outcome, TickOutcome::StoreError { .. })
            && let Err(e) = self.store.record_tick(&rec).await
        {
            tracing::warn!(error = %e, "could not record the tick outcome");
        }
        t
    }

    /// The phase, read again: `Some` when it stops the tick (below `ingest`, or the
    /// store cannot say).
    async fn phase_stops(&self) -> Option<TickOutcome> {
        match self.store.setting("phase").await {
            Ok(Some(p)) if Phase::parse(&p).is_some_and(|p| !p.ingests()) => {
                Some(TickOutcome::Disabled { phase: p })
            }
            Ok(_) => None,
            Err(e) => Some(TickOutcome::StoreError {
                error: e.to_string(),
            }),
        }
    }

    async fn tick(&mut self, t: &mut Tick, shutdown: &watch::Receiver<bool>) -> TickOutcome {
        // The phase.
        if let Some(stop) = self.phase_stops().await {
            return stop;
        }
        // The lease: take or renew, never wait.
        let grant = match self.lease.acquire().await {
            Ok(Acquire::Granted(g)) => g,
            Ok(Acquire::HeldBy { holder, expires_at }) => {
                self.held = None;
                return TickOutcome::LeaseNotHeld {
                    holder,
                    until: expires_at,
                };
            }
            Err(e) => {
                return TickOutcome::StoreError {
                    error: format!("lease: {e}"),
                };
            }
        };
        if self.held.map(|g| g.epoch) != Some(grant.epoch) {
            tracing::info!(
                epoch = grant.epoch,
                holder = self.lease.holder(),
                "lease granted"
            );
        }
        self.held = Some(grant);
        let keeper = Keeper::start(self.lease.clone(), grant.epoch);

        let state = match self.store.writer_state().await {
            Ok(s) => s,
            Err(e) => {
                return TickOutcome::StoreError {
                    error: e.to_string(),
                };
            }
        };
        // The checkpoint this tick expects: every write states it (compare-and-set).
        let mut checkpoint = state.checkpoint;
        t.checkpoint = checkpoint;
        let mut head = state.head_id;

        // The newest ID, at most once per head_check (the time is stored), and on every
        // tick while the source was last found behind the checkpoint: only a fresh head
        // can say it caught up again (a stored head below the checkpoint is no proof, as
        // the checkpoint may have passed it since it was read).
        let was_behind = state.last_tick_outcome.as_deref() == Some("source_behind");
        let due = was_behind
            || !self.head_read
            || state
                .head_checked_at
                .is_none_or(|at| now_ms() - at >= self.opts.head_check.as_millis() as i64);
        if due {
            let Some(r) = cancellable(self.client.last_id(), shutdown).await else {
                return TickOutcome::Interrupted;
            };
            match r {
                Ok(h) => {
                    t.requests += 1;
                    self.head_read = true;
                    head = Some(h);
                    if let Err(e) = self.store.record_head(h, now_ms()).await {
                        return TickOutcome::StoreError {
                            error: e.to_string(),
                        };
                    }
                    if let Some(c) = checkpoint.filter(|&c| h < c) {
                        t.head = head;
                        return TickOutcome::SourceBehind {
                            head: h,
                            checkpoint: c,
                        };
                    }
                }
                Err(SourceError::NotGranted(g)) => return gate_outcome(g),
                Err(e) => {
                    // The head is only for lag figures: go on without it (and do not ask
                    // again before head_check_secs).
                    t.requests += 1;
                    self.head_read = true;
                    tracing::warn!(error = %e, "newest-ID check failed");
                }
            }
        }
        t.head = head;

        for batch in 0..self.opts.max_batches_per_tick {
            if *shutdown.borrow() {
                return TickOutcome::Interrupted;
            }
            // A phase moved below `ingest` stops the tick before its next request.
            if batch > 0
                && let Some(stop) = self.phase_stops().await
            {
                return stop;
            }
            if keeper.lost() {
                self.held = None;
                return TickOutcome::LeaseLost {
                    reason: "lease renewal failed".into(),
                };
            }
            let after = checkpoint::resume_after(checkpoint, self.opts.start_id);
            let page = match self.fetch(after, t, &keeper, shutdown).await {
                Ok(p) => p,
                Err(o) => return o,
            };
            if page.is_empty() {
                return TickOutcome::CaughtUp;
            }
            if let Some(o) = self.judge_spoiled(&page) {
                return o;
            }
            // A note dictionary due is trained before the page that would use it.
            match crate::store::notes::tend(&self.store, grant.epoch).await {
                Ok(Some(version)) => tracing::info!(version, "note dictionary trained"),
                Ok(None) => {}
                Err(StoreError::Fenced { mine, current }) => return self.fenced(mine, current),
                // The page is stored with the notes as they are; the write says whether
                // the store is failing.
                Err(e) => tracing::warn!(error = %e, "note dictionary not trained"),
            }
            // The store checks the epoch and the checkpoint in the same transaction.
            match self.store.write_page(grant.epoch, checkpoint, &page).await {
                Ok(_) => {}
                Err(StoreError::Fenced { mine, current }) => return self.fenced(mine, current),
                Err(e) => {
                    return TickOutcome::StoreError {
                        error: e.to_string(),
                    };
                }
            }
            t.pages += 1;
            t.actions += page.records.len() as u64;
            report::note_spoiled(&page, t);
            self.stored.notify_one();
            // A page of nothing but records held back below the ID asked after moves
            // nothing: the register has nothing new after the checkpoint.
            let Some(moved) = page.last_id() else {
                return TickOutcome::CaughtUp;
            };
            checkpoint = Some(moved);
            t.checkpoint = checkpoint;
            let last = checkpoint.unwrap_or(after);
            // At or past the known head: done for now. A short page below the head is not
            // the end (page sizes mid-stream are not guaranteed).
            // Without a known head only an empty page is a sure end.
            if head.is_some_and(|h| last >= h) {
                return TickOutcome::CaughtUp;
            }
        }
        TickOutcome::BatchLimit
    }

    /// A stale holder's write, refused by the store: counted, and logged once where the
    /// tick's outcome is.
    fn fenced(&mut self, mine: i64, current: i64) -> TickOutcome {
        metrics::counter!("isir_writes_fenced_total").increment(1);
        self.held = None;
        TickOutcome::LeaseLost {
            reason: format!("fenced: epoch {mine} < {current}"),
        }
    }

    /// The breaker and the strict rule, before a page with spoiled records is stored:
    /// `Some` stops the tick before the page (nothing of it is stored).
    fn judge_spoiled(&self, page: &Page) -> Option<TickOutcome> {
        let first = page.spoiled.first()?;
        if self.opts.bad_records == crate::config::BadRecords::Stop {
            return Some(TickOutcome::SourceError {
                class: "invalid".into(),
                after: page.after,
                error: SourceError::Invalid(crate::source::parse::strict_message(first))
                    .to_string(),
            });
        }
        let n = page.spoiled.len();
        if n <= self.opts.max_bad_records_per_page as usize {
            return None;
        }
        let mut reasons = std::collections::BTreeMap::<&str, usize>::new();
        for s in &page.spoiled {
            *reasons.entry(s.reason.as_str()).or_default() += 1;
        }
        let reasons: Vec<String> = reasons.iter().map(|(r, n)| format!("{r}={n}")).collect();
        Some(TickOutcome::SourceError {
            class: "spoiled".into(),
            after: page.after,
            error: format!(
                "the page after {} has {n} spoiled records, more than \
                 source.max_bad_records_per_page ({}): the format may have changed ({})",
                page.after,
                self.opts.max_bad_records_per_page,
                reasons.join(", ")
            ),
        })
    }

    /// One page, with retries of retryable failures (each retry is a request).
    async fn fetch(
        &self,
        after: i64,
        t: &mut Tick,
        keeper: &Keeper,
        shutdown: &watch::Receiver<bool>,
    ) -> Result<Page, TickOutcome> {
        let mut backoff = self.opts.retry_backoff;
        let mut attempt = 0;
        loop {
            // A stop cancels the request in flight (and its wait for the budget): the
            // daemon must release the lease and exit within seconds, not after a 120 s
            // timeout or a 65 s minute window. Nothing is stored from it.
            let Some(r) = cancellable(self.client.fetch_after(after), shutdown).await else {
                return Err(TickOutcome::Interrupted);
            };
            match r {
                Ok(p) => {
                    t.requests += 1;
                    return Ok(p);
                }
                Err(SourceError::NotGranted(g)) => return Err(gate_outcome(g)),
                Err(e) if e.is_retryable() && attempt < self.opts.max_retries => {
                    t.requests += 1;
                    attempt += 1;
                    tracing::warn!(after, attempt, error = %e, "retryable source failure; retrying");
                    let mut sd = shutdown.clone();
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = sd.wait_for(|v| *v) => return Err(TickOutcome::Interrupted),
                    }
                    backoff *= 2;
                    if keeper.lost() {
                        return Err(TickOutcome::LeaseLost {
                            reason: "lease renewal failed".into(),
                        });
                    }
                }
                Err(e) => {
                    t.requests += 1;
                    return Err(TickOutcome::SourceError {
                        class: e.class().into(),
                        after,
                        error: e.to_string(),
                    });
                }
            }
        }
    }
}

/// `f`, unless `shutdown` turns true first (then `f` is dropped, cancelling it).
async fn cancellable<T>(
    f: impl std::future::Future<Output = T>,
    shutdown: &watch::Receiver<bool>,
) -> Option<T> {
    let mut sd = shutdown.clone();
    if *sd.borrow() {
        return None;
    }
    tokio::select! {
        r = f => Some(r),
        _ = sd.wait_for(|v| *v) => None,
    }
}

fn gate_outcome(g: GateError) -> TickOutcome {
    match g {
        GateError::BudgetExhausted { resets_at, .. } => TickOutcome::BudgetSpent { resets_at },
        GateError::RateLimited { retry_after } => TickOutcome::BudgetSpent {
            resets_at: format!("per-minute limit; retry in {retry_after:?}"),
        },
        GateError::Unavailable(e) => TickOutcome::StoreError {
            error: format!("budget: {e}"),
        },
    }
}
