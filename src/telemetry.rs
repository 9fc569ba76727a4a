//! Prometheus metrics: one process-wide recorder, rendered at `/metrics`.
//!
//! Owns the recorder and the names of the metrics; components record through the
//! `metrics` macros and never keep their own registries.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The process's recorder, installed on first use.
pub fn handle() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets(&[
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
            ])
            .expect("buckets")
            .build_recorder();
        let handle = recorder.handle();
        // Another recorder may exist (tests): then ours only renders what it was given.
        let _ = metrics::set_global_recorder(recorder);
        handle
    })
}

/// Makes sure the recorder exists before anything records.
pub fn init() {
    let _ = handle();
}
