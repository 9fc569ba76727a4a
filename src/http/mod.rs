//! The HTTP composition root: mounts the JSON API ([`crate::api`]) and the HTML pages
//! ([`crate::web`]) on one router with their protections, and serves the public and the
//! admin listener it is given until a shutdown signal.
//!
//! Owns the middleware stack (API keys and rate limit, request log and metrics, answer
//! headers, timeout, body limit, compression) and listener binding; [`conn`] serves the
//! listeners with their connection limits (deadlines, caps). It holds no route of
//! its own and no query: `api` and `web` own their routes and never import each other.

pub mod conn;
pub mod guard;

use std::time::Duration;

use anyhow::Context;
use axum::Router;
use tokio::sync::watch;

use crate::config::Settings;
use crate::read::ReadState;

/// The largest body a request may carry (beyond it, 413): far above the largest bulk
/// lookup (1 000 keys of up to 12 characters, some 16 KiB as JSON), so that an oversized
/// lookup is read and refused with a 400 that says why (too many keys, a bad key),
/// while a body that is no lookup at all cannot make the server buffer without bound.
/// Every other route takes no body.
pub const MAX_BODY: usize = 1024 * 1024;

/// The public routes with their protections: the rate limit and API keys, a request
/// timeout (`api.request_timeout_secs`), a body limit ([`MAX_BODY`]), gzip compression of answers. The
/// operator surfaces (status page, `/metrics`) are included unless they are separate.
pub fn router(state: ReadState) -> Router {
    let g = guard::Guard::new(&state.opts, &state.admin);
    let mut r = crate::api::router(state.clone()).merge(crate::web::reader_router(state.clone()));
    if !state.admin.separate {
        r = r.merge(operator_routes(state.clone(), g.clone()));
    }
    let timeout = state.opts.conn.request_timeout;
    protect(
        r.route_layer(axum::middleware::from_fn_with_state(g, guard::guard)),
        MAX_BODY,
        timeout,
    )
}

/// The operator surfaces alone (with `/healthz`), for `admin.bind`, and the watchlist
/// management routes, which only this listener serves (behind the admin key, with a body
/// limit for a list of 100 000 entries).
pub fn admin_router(state: ReadState) -> Router {
    let g = guard::Guard::new(&state.opts, &state.admin);
    let timeout = state.opts.conn.request_timeout;
    let manage = crate::watchlist::admin::router(state.clone()).route_layer(
        axum::middleware::from_fn_with_state(g.clone(), guard::admin),
    );
    let small = protect(
        operator_routes(state.clone(), g).merge(crate::api::health_router(state)),
        MAX_BODY,
        timeout,
    );
    small.merge(protect(
        manage,
        crate::watchlist::admin::MAX_ADMIN_BODY,
        timeout,
    ))
}

fn operator_routes(state: ReadState, g: guard::Guard) -> Router {
    crate::web::status_router(state.clone())
        .merge(crate::api::metrics_router(state))
        .route_layer(axum::middleware::from_fn_with_state(g, guard::admin))
}

fn protect(r: Router, max_body: usize, timeout: Duration) -> Router {
    r.layer(axum::middleware::from_fn(guard::unrouted))
        .layer(axum::middleware::from_fn(guard::headers))
        .layer(tower_http::compression::CompressionLayer::new().gzip(true))
        .layer(tower_http::limit::RequestBodyLimitLayer::new(max_body))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            timeout,
        ))
}

/// Serves the public routes on `listener` until `shutdown` completes.
pub async fn run(
    listener: tokio::net::TcpListener,
    state: ReadState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    tracing::info!(addr = %listener.local_addr()?, "API listening");
    let opts = state.opts.clone();
    conn::serve(listener, router(state), &opts, shutdown).await
}

/// Serves the operator surfaces on their own `listener` (`admin.bind`) until `shutdown`.
pub async fn run_admin(
    listener: tokio::net::TcpListener,
    state: ReadState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    tracing::info!(addr = %listener.local_addr()?, "admin listening");
    let opts = state.opts.clone();
    conn::serve(listener, admin_router(state), &opts, shutdown).await
}

/// The public listener and, when `admin.bind` is set, the admin one.
pub type Listeners = (tokio::net::TcpListener, Option<tokio::net::TcpListener>);

/// Binds `api.bind` and, when set, `admin.bind`: a process that cannot listen does not
/// start.
pub async fn bind(settings: &Settings) -> anyhow::Result<Listeners> {
    let listener = tokio::net::TcpListener::bind(&settings.api.bind)
        .await
        .with_context(|| format!("binding api.bind = {}", settings.api.bind))?;
    let admin = match &settings.admin.bind {
        Some(b) => Some(
            tokio::net::TcpListener::bind(b)
                .await
                .with_context(|| format!("binding admin.bind = {b}"))?,
        ),
        None => None,
    };
    Ok((listener, admin))
}

/// The read state of `settings` (options from `api`, operator surfaces from `admin`)
/// with the status page's source.
pub fn state(
    settings: &Settings,
    store: crate::store::Store,
    status: crate::status::StatusSource,
) -> ReadState {
    ReadState::new(
        store,
        crate::read::ReadOptions::from_settings(&settings.api),
    )
    .with_status(status)
    .with_admin(crate::read::AdminOptions {
        separate: settings.admin.bind.is_some(),
        key_sha256: settings.admin.key_sha256.clone(),
        targets: crate::watchlist::Policy::from_settings(&settings.watch),
        read_only: false,
    })
}

/// Serves the API and, on its own listener when configured, the operator surfaces,
/// until `shutdown`.
pub async fn serve(
    (listener, admin): Listeners,
    state: ReadState,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let stop = |mut sd: watch::Receiver<bool>| async move {
        let _ = sd.wait_for(|v| *v).await;
    };
    let public = run(listener, state.clone(), stop(shutdown.clone()));
    match admin {
        Some(l) => {
            let (a, b) = tokio::join!(public, run_admin(l, state, stop(shutdown)));
            a?;
            b?;
        }
        None => public.await?,
    }
    Ok(())
}
