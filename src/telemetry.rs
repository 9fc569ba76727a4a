//! Prometheus metrics: one process-wide recorder, rendered at `/metrics`, and the
//! catalogue of every metric this crate records, with its help text and unit.
//!
//! Conventions (Prometheus's): `isir_` prefix, base units in the name (`_seconds`,
//! `_bytes`), `_total` for counters, `_timestamp_seconds` for times to alert on,
//! outcomes as labels, `isir_build_info` for the version. Components record through
//! the `metrics` macros with a name from [`CATALOGUE`] and never keep their own
//! registries; a test checks that every name recorded in `src/` is in the catalogue.

use std::sync::OnceLock;

use metrics::Unit;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The kind of a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Every metric: name, kind, unit, help text.
pub const CATALOGUE: &[(&str, Kind, Option<Unit>, &str)] = &[
    // Watchlists and their notifier.
    (
        "isir_watch_deliveries_total",
        Kind::Counter,
        None,
        "Webhook delivery attempts of watchlist batches, by outcome (delivered, failed).",
    ),
    (
        "isir_watch_events_delivered_total",
        Kind::Counter,
        None,
        "Watchlist events delivered to webhooks (acknowledged with a 2xx).",
    ),
    (
        "isir_watch_failing",
        Kind::Gauge,
        None,
        "1 when a watchlist's pending batch has failed for longer than watch.failing_after_secs; by list. Read from the store at scrape time.",
    ),
    (
        "isir_watch_lag_ids",
        Kind::Gauge,
        None,
        "Feed positions between a watchlist's delivered cursor and the projection watermark; by list. Read from the store at scrape time.",
    ),
    // The listeners' connections.
    (
        "isir_http_connections_open",
        Kind::Gauge,
        None,
        "Connections being served, all listeners together.",
    ),
    (
        "isir_http_connections_refused_total",
        Kind::Counter,
        None,
        "New connections closed unread because a cap was reached, by cap (total: api.max_open_connections; per_client: api.max_connections_per_client).",
    ),
    (
        "isir_http_connections_timed_out_total",
        Kind::Counter,
        None,
        "Connections closed by a deadline, by wait (head: api.header_read_timeout_secs; idle: api.keep_alive_idle_secs; write: api.write_timeout_secs).",
    ),
    (
        "isir_api_streams_open",
        Kind::Gauge,
        None,
        "Whole-result stream answers (stream=all) in flight: their reader (holding a read transaction) or their buffered rows not yet taken by the connection.",
    ),
    // The read side's limits.
    (
        "isir_api_read_timeouts_total",
        Kind::Counter,
        None,
        "Reads answered 503 because a statement ran past api.statement_timeout_ms (cause statement) or no read connection was free within api.acquire_timeout_ms (cause pool).",
    ),
    (
        "isir_build_info",
        Kind::Gauge,
        None,
        "Always 1; the labels name the build (version).",
    ),
    // The writer.
    (
        "isir_ticks_total",
        Kind::Counter,
        None,
        "Poller ticks, by outcome (caught_up, batch_limit, lease_not_held, budget_spent, source_error, store_error, lease_lost, source_behind, disabled, interrupted).",
    ),
    (
        "isir_tick_duration_seconds",
        Kind::Histogram,
        Some(Unit::Seconds),
        "Duration of a poller tick that held the lease.",
    ),
    (
        "isir_last_successful_tick_timestamp_seconds",
        Kind::Gauge,
        Some(Unit::Seconds),
        "When the last tick that reached the register's head or its batch limit ended (Unix time); read from the store at scrape time.",
    ),
    (
        "isir_pages_stored_total",
        Kind::Counter,
        None,
        "Pages of actions stored by this process's poller.",
    ),
    (
        "isir_actions_stored_total",
        Kind::Counter,
        None,
        "Actions stored by this process's poller (new rows; a repeated page adds none).",
    ),
    (
        "isir_source_records_quarantined_total",
        Kind::Counter,
        None,
        "Records of the feed held back in the quarantine by this process's poller (not stored; the checkpoint moved past them), by reason (encoding, missing_field, bad_value, out_of_order).",
    ),
    (
        "isir_source_records_repaired_total",
        Kind::Counter,
        None,
        "Records of the feed repaired by this process's poller (windows-1250 letters decoded; stored, their bytes as received kept), by reason (cp1250).",
    ),
    (
        "isir_source_requests_total",
        Kind::Counter,
        None,
        "Requests sent to the register by this process's poller, each granted by the budget (retries included).",
    ),
    (
        "isir_writes_fenced_total",
        Kind::Counter,
        None,
        "Commits refused because a newer lease epoch exists (a paused or partitioned ex-holder).",
    ),
    (
        "isir_checkpoint_action_id",
        Kind::Gauge,
        None,
        "The replica's checkpoint: the last stored action ID.",
    ),
    (
        "isir_source_head_action_id",
        Kind::Gauge,
        None,
        "The register's last action ID, as last checked.",
    ),
    (
        "isir_replica_lag_ids",
        Kind::Gauge,
        None,
        "Action IDs between the replica's checkpoint and the register's head.",
    ),
    (
        "isir_source_behind_ids",
        Kind::Gauge,
        None,
        "How far the register's newest ID is below the replica's checkpoint (0 when it is not): above 0, the source was reset or source.url names another register, and nothing is fetched; read from the store at scrape time.",
    ),
    (
        "isir_lease_held",
        Kind::Gauge,
        None,
        "1 while this process holds the writer's lease, else 0.",
    ),
    (
        "isir_lease_epoch",
        Kind::Gauge,
        None,
        "The fencing epoch of this process's lease grant.",
    ),
    (
        "isir_budget_used_requests",
        Kind::Gauge,
        None,
        "Requests granted today (Europe/Prague) by the shared budget.",
    ),
    (
        "isir_budget_remaining_requests",
        Kind::Gauge,
        None,
        "Requests left today in the shared budget.",
    ),
    // The projections.
    (
        "isir_projection_cursor_action_id",
        Kind::Gauge,
        None,
        "The last action ID a projection builder applied, by builder.",
    ),
    (
        "isir_projection_lag_ids",
        Kind::Gauge,
        None,
        "Action IDs between the replica's checkpoint and a builder's cursor, by builder.",
    ),
    (
        "isir_projection_stopped",
        Kind::Gauge,
        None,
        "1 when a builder stopped on an action it cannot apply (see isir project status), by builder.",
    ),
    (
        "isir_projection_updated_timestamp_seconds",
        Kind::Gauge,
        Some(Unit::Seconds),
        "When a builder last moved its cursor (Unix time), by builder.",
    ),
    // The readers.
    (
        "isir_http_requests_total",
        Kind::Counter,
        None,
        "HTTP requests answered, by route template, method and status.",
    ),
    (
        "isir_http_request_duration_seconds",
        Kind::Histogram,
        Some(Unit::Seconds),
        "Time to answer an HTTP request, by route template.",
    ),
];

/// The process's recorder, installed on first use, with every metric described and
/// `isir_build_info` set.
pub fn handle() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets(&[
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
                60.0,
            ])
            .expect("buckets")
            .build_recorder();
        let handle = recorder.handle();
        // Another recorder may exist (tests): then ours only renders what it was given.
        let _ = metrics::set_global_recorder(recorder);
        describe();
        metrics::gauge!("isir_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
        handle
    })
}

fn describe() {
    for (name, kind, unit, help) in CATALOGUE {
        let (name, help) = (*name, *help);
        match (kind, unit) {
            (Kind::Counter, Some(u)) => metrics::describe_counter!(name, *u, help),
            (Kind::Counter, None) => metrics::describe_counter!(name, help),
            (Kind::Gauge, Some(u)) => metrics::describe_gauge!(name, *u, help),
            (Kind::Gauge, None) => metrics::describe_gauge!(name, help),
            (Kind::Histogram, Some(u)) => metrics::describe_histogram!(name, *u, help),
            (Kind::Histogram, None) => metrics::describe_histogram!(name, help),
        }
    }
}

/// Makes sure the recorder exists before anything records.
/// A read stopped by the read side's limits (`cause`: statement or pool).
pub fn read_timeout(cause: &'static str) {
    metrics::counter!("isir_api_read_timeouts_total", "cause" => cause).increment(1);
}

pub fn init() {
    let _ = handle();
}

#[cfg(test)]
mod tests {
    /// Every metric name recorded anywhere in `src/` is in the catalogue (so it has HELP
    /// text), and every catalogued name follows the conventions.
    #[test]
    fn every_recorded_metric_is_catalogued() {
        let names: Vec<&str> = super::CATALOGUE.iter().map(|c| c.0).collect();
        for (name, kind, unit, _) in super::CATALOGUE {
            assert!(name.starts_with("isir_"), "{name}");
            if *kind == super::Kind::Counter {
                assert!(name.ends_with("_total"), "{name}: a counter ends in _total");
            }
            if unit.is_some() {
                assert!(name.ends_with("_seconds"), "{name}: the unit in the name");
            }
        }
        let mut stack = vec![std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src"
        ))];
        let mut seen = 0;
        while let Some(p) = stack.pop() {
            if p.is_dir() {
                stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            for m in ["counter!(\"", "gauge!(\"", "histogram!(\""] {
                for (i, _) in text.match_indices(m) {
                    let rest = &text[i + m.len()..];
                    let name = &rest[..rest.find('"').unwrap()];
                    seen += 1;
                    assert!(
                        names.contains(&name),
                        "{name} ({}) has no HELP text in the catalogue",
                        p.display()
                    );
                }
            }
        }
        assert!(seen > 10, "the scan found the recording sites");
    }
}
