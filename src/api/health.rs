//! The operations endpoints: liveness, readiness, the OpenAPI description and the
//! Prometheus scrape.
//!
//! `/healthz` answers whatever the phase; `/readyz` tells a load balancer whether this
//! replica should get traffic. Never writes.

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::read::{Problem, ReadState, Watermark, watermark};
use crate::store::sql::Tx;

/// Prometheus metrics.
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "Metrics in the Prometheus text format", body = String, content_type = "text/plain")))]
pub(crate) async fn metrics_text(State(state): State<ReadState>) -> Response {
    // Gauges read from the store at scrape time, so that every instance (also a read
    // replica without a poller) reports the shared state: checkpoint, projection cursors
    // and lag, the last successful tick, today's budget.
    if let Some(src) = &state.status {
        let ws = src.store.writer_state().await.ok();
        let cp = ws.as_ref().and_then(|w| w.checkpoint);
        if let Some(cp) = cp {
            metrics::gauge!("isir_checkpoint_action_id").set(cp as f64);
        }
        if let Some(w) = &ws {
            metrics::gauge!("isir_source_behind_ids").set(w.source_behind().unwrap_or(0) as f64);
        }
        let metas = crate::readmodel::meta::metas(&src.store)
            .await
            .unwrap_or_default();
        for m in metas.iter().filter(|m| !m.name.contains('#')) {
            metrics::gauge!("isir_projection_stopped", "builder" => m.name.clone())
                .set(if m.error.is_some() { 1.0 } else { 0.0 });
            metrics::gauge!("isir_projection_updated_timestamp_seconds", "builder" => m.name.clone())
                .set(m.updated_at as f64 / 1000.0);
            metrics::gauge!("isir_projection_cursor_action_id", "builder" => m.name.clone())
                .set(m.cursor as f64);
            if let Some(cp) = cp {
                metrics::gauge!("isir_projection_lag_ids", "builder" => m.name.clone())
                    .set((cp - m.cursor).max(0) as f64);
            }
        }
        let watermark = crate::readmodel::meta::watermark(&metas);
        for w in crate::status::watch_status(&src.store, watermark).await {
            if w.list.webhook_url.is_none() {
                continue;
            }
            metrics::gauge!("isir_watch_failing", "list" => w.list.name.clone())
                .set(w.list.failing as f64);
            if let Some(l) = w.lag_ids {
                metrics::gauge!("isir_watch_lag_ids", "list" => w.list.name.clone()).set(l as f64);
            }
        }
        if let Ok(Some(at)) = src.store.last_successful_tick().await {
            metrics::gauge!("isir_last_successful_tick_timestamp_seconds").set(at as f64 / 1000.0);
        }
        if let Ok(b) = src.budget().await {
            metrics::gauge!("isir_budget_used_requests").set(b.used as f64);
            metrics::gauge!("isir_budget_remaining_requests").set(b.left as f64);
        }
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        crate::telemetry::handle().render(),
    )
        .into_response()
}

/// The process is up (whatever the phase), and which replica it serves: `replica` is the
/// replica's public identifier (made at `migrate`; not a secret), so that `isir status`
/// can tell its own API from another process on the same port. Null while the store
/// cannot say.
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, description = "Up", body = crate::api::schema::Health)))]
pub(crate) async fn healthz(State(state): State<ReadState>) -> Json<Value> {
    // Liveness never waits on the store: at most a moment for the first read of the
    // identifier (cached once read).
    let replica = tokio::time::timeout(std::time::Duration::from_millis(500), state.replica_id())
        .await
        .ok()
        .flatten();
    Json(json!({"status": "ok", "replica": replica}))
}

/// Ready to serve: phase `serve` and the projections within `api.max_lag_ids` of the replica.
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses(
        (status = 200, description = "Ready", body = crate::api::schema::Ready),
        (status = 503, description = "Not ready, with the reason", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "The projection could not be read", body = Problem, content_type = "application/problem+json"),
    ))]
pub(crate) async fn readyz(State(state): State<ReadState>) -> Response {
    let r: Result<(Watermark, bool), Problem> = async {
        let mut tx = Tx::begin_read(&state.store).await?;
        let m = watermark::meta(&mut tx).await?;
        tx.commit().await?;
        Ok(m)
    }
    .await;
    match r {
        Ok((wm, true)) if wm.phase == "serve" && wm.lag_ids <= state.opts.max_lag_ids => {
            Json(json!({"ready": true, "watermark": wm})).into_response()
        }
        Ok((_, false)) => {
            Problem::unavailable("not ready: the projections are not built yet").into_response()
        }
        Ok((wm, true)) => Problem::unavailable(format!(
            "not ready: phase `{}`, projections {} IDs behind the replica (at most {})",
            wm.phase, wm.lag_ids, state.opts.max_lag_ids
        ))
        .into_response(),
        Err(p) => p.into_response(),
    }
}
