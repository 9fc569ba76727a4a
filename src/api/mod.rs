//! The read API for analysts: cases, their timelines, subjects, the change feed and
//! counts, served from the projections with the projection watermark on every answer;
//! the operations endpoints (`/healthz`, `/readyz`, `/openapi.json`, `/metrics`).
//!
//! One file per resource (`cases`, `subjects` and its bulk `lookup`, the name `search`, `events`,
//! `watchlists` (a list's feed), `stats`, `health`), with the
//! representations (`format`), paging (`pagination`), parameter descriptions (`params`)
//! and the OpenAPI document (`openapi`) in their own. It reads through [`crate::read`]
//! only: it never imports the source client, never reads `actions`, has no route that
//! writes, and never imports `web` (the composition root [`crate::http`] mounts both).

mod cases;
mod events;
mod format;
mod health;
mod lookup;
pub mod openapi;
mod pagination;
pub mod params;
mod schema;
mod search;
mod stats;
mod stream;
mod subjects;
mod watchlists;

use axum::Router;
use axum::routing::{get, post};

use crate::read::ReadState;

/// The public routes of the API (no middleware: [`crate::http`] adds it).
pub fn router(state: ReadState) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/openapi.json", get(openapi::openapi_json))
        .route("/v1/cases/{year}/{number}", get(cases::case))
        .route("/v1/cases/{year}/{number}/events", get(cases::case_events))
        .route("/v1/subjects", get(subjects::subjects))
        .route("/v1/subjects/lookup", post(lookup::lookup))
        .route("/v1/search", get(search::search))
        .route("/v1/cases", get(cases::case_list))
        .route("/v1/events", get(events::events))
        .route("/v1/stats", get(stats::stats))
        .route(
            "/v1/watchlists/{name}/events",
            get(watchlists::watch_events),
        )
        .with_state(state)
}

/// `/healthz` alone, for the admin listener.
pub fn health_router(state: ReadState) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .with_state(state)
}

/// The Prometheus scrape (an operator surface: [`crate::http`] guards it).
pub fn metrics_router(state: ReadState) -> Router {
    Router::new()
        .route("/metrics", get(health::metrics_text))
        .with_state(state)
}
