//! The read API for analysts (first part): cases, their timelines and subjects, served
//! from the projections, with the projection watermark on every answer.
//!
//! Owns HTTP shapes, parameter validation and problem details (RFC 9457). It reads the
//! projection views only: it never imports the source client, never reads `actions`,
//! and has no route that writes. `run(listener, state, shutdown)` serves on a listener
//! it is given.

pub(crate) mod guard;
pub mod openapi;
mod problem;
pub(crate) mod queries;
pub(crate) mod routes;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;

use crate::store::Store;
pub use problem::Problem;
pub use queries::subjects_sql;

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
    /// How long the phase and the watermark are reused between requests (0: read for
    /// every request).
    pub meta_cache: Duration,
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
            meta_cache: Duration::ZERO,
        }
    }
}

/// Where the operator surfaces (status page, `/metrics`) are served and who may see them.
#[derive(Clone, Debug, Default)]
pub struct AdminOptions {
    /// Served by [`run_admin`] on their own listener, not by [`run`].
    pub separate: bool,
    /// SHA-256 (hex) of the admin key they require.
    pub key_sha256: Option<String>,
}

/// What every handler reads, shared behind one `Arc`: a request clones the state a few
/// times (router, middleware), and one reference count is cheaper than one per field.
#[derive(Clone)]
pub struct ApiState(Arc<Shared>);

pub struct Shared {
    pub store: Store,
    pub opts: ApiOptions,
    pub(crate) limiter: guard::Limiter,
    pub(crate) meta: std::sync::Mutex<Option<(std::time::Instant, (routes::Watermark, bool))>>,
    /// What the status page reads; without it the page says so.
    pub status: Option<crate::status::StatusSource>,
    pub admin: AdminOptions,
    /// Direct read connections for one-statement answers on a SQLite file (see
    /// [`crate::store::direct`]); `None` on PostgreSQL.
    pub(crate) direct: Option<Arc<crate::store::direct::Pool>>,
    /// The replica's privacy key, read once from the store at the first use.
    privacy: tokio::sync::OnceCell<crate::privacy::Privacy>,
}

impl std::ops::Deref for ApiState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl ApiState {
    pub fn new(store: Store, opts: ApiOptions) -> Self {
        crate::telemetry::init();
        ApiState(Arc::new(Shared {
            limiter: guard::limiter(opts.rate_per_second, opts.burst),
            opts,
            meta: std::sync::Mutex::new(None),
            status: None,
            admin: AdminOptions::default(),
            direct: crate::store::direct::Pool::for_store(&store, 16),
            privacy: tokio::sync::OnceCell::new(),
            store,
        }))
    }

    /// The replica's privacy key (person references, cursors), read from the store once.
    pub async fn privacy(&self) -> Result<&crate::privacy::Privacy, Problem> {
        self.privacy
            .get_or_try_init(|| crate::privacy::Privacy::load(&self.store))
            .await
            .map_err(Problem::internal)
    }

    /// The state while it is being configured, before any clone exists.
    fn building(&mut self) -> &mut Shared {
        Arc::get_mut(&mut self.0).expect("the API state is configured before it is shared")
    }

    pub fn with_status(mut self, src: crate::status::StatusSource) -> Self {
        self.building().status = Some(src);
        self
    }

    pub fn with_admin(mut self, admin: AdminOptions) -> Self {
        self.building().admin = admin;
        self
    }
}

/// The public routes with their protections: the rate limit and API keys, a request
/// timeout, a body limit (the API takes no bodies), gzip compression of answers. The
/// operator surfaces (status page, `/metrics`) are included unless they are separate.
pub fn router(state: ApiState) -> Router {
    let mut r = routes::router(state.clone()).merge(crate::web::reader_router(state.clone()));
    if !state.admin.separate {
        r = r.merge(operator_routes(state.clone()));
    }
    protect(r.route_layer(axum::middleware::from_fn_with_state(state, guard::guard)))
}

/// The operator surfaces alone (with `/healthz`), for `admin.bind`.
pub fn admin_router(state: ApiState) -> Router {
    protect(operator_routes(state).route("/healthz", axum::routing::get(routes::healthz)))
}

fn operator_routes(state: ApiState) -> Router {
    crate::web::status_router(state.clone())
        .merge(
            Router::new()
                .route("/metrics", axum::routing::get(routes::metrics_text))
                .with_state(state.clone()),
        )
        .route_layer(axum::middleware::from_fn_with_state(state, guard::admin))
}

fn protect(r: Router) -> Router {
    r.layer(axum::middleware::from_fn(guard::headers))
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

/// Serves the operator surfaces on their own `listener` (`admin.bind`) until `shutdown`.
pub async fn run_admin(
    listener: tokio::net::TcpListener,
    state: ApiState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    tracing::info!(addr = %listener.local_addr()?, "admin listening");
    axum::serve(listener, admin_router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

/// A request timeout for every route.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
