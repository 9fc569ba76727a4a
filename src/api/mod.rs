//! The read API for analysts (first part): cases, their timelines and subjects, served
//! from the projections, with the projection watermark on every answer.
//!
//! Owns HTTP shapes, parameter validation and problem details (RFC 9457). It reads the
//! projection views only: it never imports the source client, never reads `actions`,
//! and has no route that writes. `run(listener, state, shutdown)` serves on a listener
//! it is given.

mod guard;
pub mod openapi;
mod problem;
mod routes;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;

use crate::store::Store;
pub use problem::Problem;

#[derive(Clone, Debug)]
pub struct ApiOptions {
    /// Largest `limit` a list accepts.
    pub max_limit: i64,
    /// Default `limit`.
    pub default_limit: i64,
    /// `/readyz` says ready only within this lag of the projections behind the replica.
    pub max_lag_ids: i64,
    pub rate_per_second: u32,
    pub burst: u32,
    /// Configured keys (hashes and scopes).
    pub keys: Vec<crate::config::ApiKey>,
}

impl Default for ApiOptions {
    fn default() -> Self {
        Self {
            max_limit: 1000,
            default_limit: 50,
            max_lag_ids: 10_000,
            rate_per_second: 20,
            burst: 100,
            keys: Vec::new(),
        }
    }
}

#[derive(Clone)]
pub struct ApiState {
    pub store: Store,
    pub opts: Arc<ApiOptions>,
    pub(crate) limiter: Arc<guard::Limiter>,
}

impl ApiState {
    pub fn new(store: Store, opts: ApiOptions) -> Self {
        crate::telemetry::init();
        let limiter = Arc::new(guard::limiter(opts.rate_per_second, opts.burst));
        ApiState {
            store,
            opts: Arc::new(opts),
            limiter,
        }
    }
}

/// The routes with their protections: a request timeout, a body limit (the API takes no
/// bodies), gzip compression of answers.
pub fn router(state: ApiState) -> Router {
    routes::router(state.clone())
        .route_layer(axum::middleware::from_fn_with_state(state, guard::guard))
        .layer(tower_http::compression::CompressionLayer::new().gzip(true))
        .layer(tower_http::limit::RequestBodyLimitLayer::new(16 * 1024))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            REQUEST_TIMEOUT,
        ))
}

/// Serves the API on `listener` until `shutdown` completes.
pub async fn run(
    listener: tokio::net::TcpListener,
    state: ApiState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    tracing::info!(addr = %listener.local_addr()?, "API listening");
    axum::serve(
        listener,
        router(state).into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}

/// A request timeout for every route.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
