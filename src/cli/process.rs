//! The process commands: `poll --once` (one tick) and `demo` (the daemon against a
//! built-in simulator). `run` and `serve` call [`crate::daemon`] directly.

use std::path::Path;

use clap::Args;

use super::Exit;
use crate::app::App;
use crate::config::Settings;
use crate::sim::SimOptions;

#[derive(Args, Debug)]
pub struct PollArgs {
    /// Run exactly one tick (required: the daemon is `isir run`).
    #[arg(long, required = true)]
    pub once: bool,
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Actions the simulated register holds at start.
    #[arg(long, default_value_t = 20_000)]
    pub actions: usize,
    /// Seconds between ticks.
    #[arg(long, default_value_t = 5, value_name = "SECS")]
    pub period: u64,
    /// New actions a second in the simulated register.
    #[arg(long, default_value_t = 2.0, value_name = "PER_SEC")]
    pub live_rate: f64,
    /// Database of the demo.
    #[arg(long, default_value = "sqlite://isir-demo.db", value_name = "URL")]
    pub database: String,
    /// Address of the demo's read API [default: the setting `api.bind`, 127.0.0.1:8080].
    #[arg(long, value_name = "ADDR")]
    pub api_bind: Option<String>,
}

/// One tick, printed as JSON; the lease is given back so that a daemon started next
/// does not wait out the TTL.
pub async fn poll(app: &App) -> anyhow::Result<Exit> {
    let mut p = app.poller()?;
    let t = p.poll_once().await;
    p.release().await;
    outln!("{}", serde_json::to_string(&t)?);
    Ok(Exit::of_tick(&t.outcome))
}

pub async fn demo(config: Option<&Path>, a: DemoArgs) -> anyhow::Result<Exit> {
    let opts = SimOptions {
        actions: a.actions,
        live_rate: a.live_rate,
        daily_limit: None,
        per_minute_limit: None,
        ..SimOptions::default()
    };
    let mut settings = Settings::load(config)?;
    crate::logging::init(settings.log.format);
    super::log_settings_file(config);
    let (_sim, url, guard) = crate::sim::spawn(opts).await?;
    settings.source.url = url.clone();
    settings.database.url = a.database;
    settings.redis.url = None;
    settings.poll.period_secs = a.period;
    settings.poll.head_check_secs = 60;
    settings.phase.initial = "serve".into();
    if let Some(bind) = &a.api_bind {
        settings.api.bind = bind.clone();
    }
    settings.validate()?;
    let app = App::build(settings).await?;
    let (actions, live_rate, period) = (a.actions, a.live_rate, a.period);
    let api_bind = app.settings.api.bind.clone();
    outln!("isir demo: a simulated register of {actions} actions (+{live_rate}/s) at {url}");
    outln!(
        "  replicating into {} every {period} s; Ctrl-C to stop.",
        crate::app::redact(&app.settings.database.url)
    );
    outln!("  watch the log lines 'tick', or in another shell:");
    outln!(
        "    ISIR_DATABASE__URL={} isir status",
        app.settings.database.url
    );
    outln!(
        "  the simulator's own count: {}",
        url.replace(crate::sim::SERVICE_PATH, "/_sim/stats")
    );
    outln!("  the read API (phase serve), once the first tick has been projected:");
    outln!("    curl -s 'http://{api_bind}/v1/stats'");
    outln!("    curl -s 'http://{api_bind}/v1/cases?sort=latest&limit=3'");
    outln!("    curl -s 'http://{api_bind}/v1/cases/2008/1'");
    outln!("    curl -s 'http://{api_bind}/v1/subjects?name=novak&limit=5'");
    outln!("    curl -s 'http://{api_bind}/v1/events?after=0&limit=5'");
    outln!("    curl -s 'http://{api_bind}/openapi.json'");
    outln!(
        "  in a browser: the status page http://{api_bind}/ and the search http://{api_bind}/search?q=novák"
    );
    crate::daemon::run(&app, crate::daemon::shutdown_signal("the current page")).await?;
    app.store.close().await;
    guard.stop().await;
    Ok(Exit::Ok)
}
