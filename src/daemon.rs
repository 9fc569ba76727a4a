//! The long-running processes, composed from their parts: the writer's daemon (poller,
//! projector, watchlist notifier, nightly export and the HTTP server, until a shutdown
//! signal) and the
//! read-only server of `isir serve`.
//!
//! Owns what runs beside what, and that every task it spawns stops with the shutdown
//! signal before it returns. It decides nothing a component decides: each tick is the
//! poller's, each chunk the projector's.

use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;

use crate::app::App;
use crate::config::Settings;
use crate::poller::TickOutcome;

/// A channel that turns true on SIGINT or SIGTERM; the log line says what the process
/// does then (`finishing`: "the current page" for the writer, "the answers in flight"
/// for a reader).
pub fn shutdown_signal(finishing: &'static str) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM handler");
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        #[cfg(not(unix))]
        let _ = ctrl_c.await;
        tracing::info!("shutdown requested; finishing {finishing}");
        let _ = tx.send(true);
    });
    rx
}

/// The daemon: a tick every `poll.period_secs` until `shutdown`, with the projector, the
/// nightly export (when `export.schedule` is set) and the HTTP server beside it. The
/// lease is released on the way out.
pub async fn run(app: &App, mut shutdown: watch::Receiver<bool>) -> anyhow::Result<()> {
    app.record_settings().await?;
    let mut poller = app.poller()?;
    let period = Duration::from_secs(app.settings.poll.period_secs);
    let bar = crate::logging::Bar::new(
        true,
        0,
        "{spinner} backfill {pos}/{len} IDs {wide_bar} {msg}",
    );
    tracing::info!(source = %app.settings.source.url, database = %crate::app::redact(&app.settings.database.url),
        redis = app.redis.is_some(), holder = app.lease.holder(), "daemon started");
    // The daemon's HTTP server runs whatever the phase; `/v1` answers from `serve` up.
    let api = {
        let privacy = crate::store::key::resolve(
            app.settings.database.privacy_key_file.as_deref(),
            &app.store,
        )
        .await?;
        let listeners = crate::http::bind(&app.settings).await?;
        let state = crate::http::state(&app.settings, app.store.clone(), app.status_source())
            .with_privacy(privacy);
        let sd = shutdown.clone();
        tokio::spawn(async move {
            if let Err(e) = crate::http::serve(listeners, state, sd).await {
                tracing::error!(error = %e, "the HTTP server stopped");
            }
        })
    };
    let nightly = match app.settings.export.schedule.as_deref() {
        Some(at) => {
            let n = crate::export::Nightly {
                at: crate::export::parse_schedule(at).context("export.schedule must be HH:MM")?,
                dir: app.settings.export.dir.clone().into(),
                keep: app.settings.export.keep,
                gzip: app.settings.export.gzip,
                include_pii: app.settings.export.include_pii,
                formula_guard: app.settings.export.formula_guard,
                tables: app
                    .settings
                    .export
                    .tables
                    .iter()
                    .map(|t| crate::export::Table::parse(t).map_err(anyhow::Error::msg))
                    .collect::<Result<_, _>>()?,
                formats: app.settings.export.formats()?,
            };
            Some(tokio::spawn(crate::export::run_nightly(
                app.store.clone(),
                n,
                shutdown.clone(),
            )))
        }
        None => None,
    };
    let projector = tokio::spawn(crate::projector::run(
        app.store.clone(),
        poller.stored_signal(),
        crate::projector::ProjectorOptions {
            chunk: app.settings.projection.chunk,
            debounce: Duration::from_millis(app.settings.projection.debounce_ms),
            every: Duration::from_secs(app.settings.projection.every_secs),
            analyze_every: Duration::from_secs(app.settings.projection.analyze_every_secs),
        },
        shutdown.clone(),
    ));
    // The watchlists' notifier: its own cursors, its own tasks; nothing here waits for it.
    let notifier = tokio::spawn(crate::watchlist::notify::run(
        app.store.clone(),
        crate::watchlist::notify::NotifierOptions::from_settings(
            &app.settings.watch,
            app.lease.holder(),
        ),
        shutdown.clone(),
    ));
    loop {
        let tick = poller.poll_once_until(&shutdown).await;
        if let (Some(b), Some(head), Some(cp)) = (&bar, tick.head, tick.checkpoint) {
            let start = app.settings.poll.start_id.max(0) as u64;
            b.set_length((head as u64).saturating_sub(start));
            b.set_position((cp as u64).saturating_sub(start));
            b.set_message(crate::status::eta_text(&app.settings, cp, head));
        }
        if *shutdown.borrow() || matches!(tick.outcome, TickOutcome::Interrupted) {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = shutdown.wait_for(|v| *v) => break,
        }
    }
    poller.release().await;
    let _ = projector.await;
    let _ = notifier.await;
    let _ = api.await;
    if let Some(n) = nightly {
        let _ = n.await;
    }
    drop(bar);
    tracing::info!("daemon stopped");
    Ok(())
}

/// The read API on `api.bind` (and the operator pages) until shutdown, for `isir serve`:
/// the lease and budget are only shown, never taken.
pub async fn serve(
    settings: &Settings,
    store: crate::store::Store,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    // Every unscoped answer needs the replica's privacy key (made by `migrate`; in
    // `database.privacy_key_file` for a reader role): a replica that has none is
    // refused at start, not with a 500 at every request.
    let privacy = crate::store::key::resolve(settings.database.privacy_key_file.as_deref(), &store)
        .await
        .context("the read API masks personal data with the replica's key")?;
    let (lease, _, _) = App::lease_and_budget(settings, &store)?;
    let status = crate::status::StatusSource {
        settings: settings.clone(),
        store: store.clone(),
        lease: std::sync::Arc::new(lease),
    };
    let listeners = crate::http::bind(settings).await?;
    let mut state = crate::http::state(settings, store, status).with_privacy(privacy);
    state.read_only_admin();
    crate::http::serve(listeners, state, shutdown).await
}
