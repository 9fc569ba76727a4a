//! What a tick tells the operator: its one log line, its metrics, and one line and one
//! count per spoiled record of a stored page.
//!
//! Owns the wording and the labels of those. It logs IDs, counts and reasons, never a
//! value of a record (no personal data), and decides nothing about the tick.

use super::{Tick, TickOutcome};
use crate::lease::Grant;
use crate::source::Page;
use crate::store::{fmt_ms, now_ms};

pub(super) fn record_metrics(t: &Tick, held: Option<Grant>) {
    metrics::counter!("isir_ticks_total", "outcome" => t.outcome.name()).increment(1);
    if matches!(t.outcome, TickOutcome::CaughtUp | TickOutcome::BatchLimit) {
        metrics::gauge!("isir_last_successful_tick_timestamp_seconds")
            .set(now_ms() as f64 / 1000.0);
    }
    metrics::counter!("isir_pages_stored_total").increment(t.pages as u64);
    metrics::counter!("isir_actions_stored_total").increment(t.actions);
    metrics::counter!("isir_source_requests_total").increment(t.requests as u64);
    if let Some(c) = t.checkpoint {
        metrics::gauge!("isir_checkpoint_action_id").set(c as f64);
    }
    if let TickOutcome::SourceBehind { head, checkpoint } = t.outcome {
        metrics::gauge!("isir_source_behind_ids").set((checkpoint - head) as f64);
    } else if t.head.is_some() {
        metrics::gauge!("isir_source_behind_ids").set(0.0);
    }
    if let Some(h) = t.head {
        metrics::gauge!("isir_source_head_action_id").set(h as f64);
        if let Some(c) = t.checkpoint {
            metrics::gauge!("isir_replica_lag_ids").set((h - c).max(0) as f64);
        }
    }
    metrics::gauge!("isir_lease_held").set(if held.is_some() { 1.0 } else { 0.0 });
    if let Some(g) = held {
        metrics::gauge!("isir_lease_epoch").set(g.epoch as f64);
    }
}

pub(super) fn log(t: &Tick) {
    let o = &t.outcome;
    match o {
        TickOutcome::CaughtUp | TickOutcome::BatchLimit | TickOutcome::Interrupted => {
            tracing::info!(
                outcome = o.name(),
                pages = t.pages,
                actions = t.actions,
                requests = t.requests,
                quarantined = t.quarantined,
                repaired = t.repaired,
                checkpoint = t.checkpoint,
                head = t.head,
                "tick"
            )
        }
        TickOutcome::LeaseNotHeld { holder, until } => {
            tracing::info!(outcome = o.name(), %holder, until = until.map(fmt_ms).as_deref(), "tick skipped: lease held elsewhere")
        }
        TickOutcome::SourceBehind { head, checkpoint } => tracing::warn!(
            outcome = o.name(),
            head,
            checkpoint,
            requests = t.requests,
            "tick stopped: {}",
            crate::store::behind_text(*head, *checkpoint)
        ),
        TickOutcome::Disabled { phase } => {
            tracing::debug!(outcome = o.name(), %phase, "tick skipped: ingestion disabled")
        }
        other => tracing::warn!(
            outcome = other.name(), detail = ?other, pages = t.pages, actions = t.actions,
            requests = t.requests, checkpoint = t.checkpoint, "tick stopped"
        ),
    }
}

/// One log line and one count per spoiled record of a stored page: the action ID and
/// the reason, never a value (no personal data).
pub(super) fn note_spoiled(page: &Page, t: &mut Tick) {
    for s in &page.spoiled {
        let reason = s.reason.as_str();
        if s.reason.is_repair() {
            t.repaired += 1;
            metrics::counter!("isir_source_records_repaired_total", "reason" => reason)
                .increment(1);
            tracing::info!(
                action_id = s.id,
                reason,
                "record repaired and stored; its bytes as received are kept"
            );
        } else {
            t.quarantined += 1;
            metrics::counter!("isir_source_records_quarantined_total", "reason" => reason)
                .increment(1);
            tracing::warn!(action_id = s.id, reason, detail = %s.detail, "record held back in the quarantine");
        }
    }
}
