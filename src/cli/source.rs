//! The register's side: `isir fetch` (what the register answers after an ID, spending
//! budget like the poller) and `isir sim` (the simulator that speaks the protocol).

use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};

use super::Exit;
use crate::app::App;
use crate::sim::{FaultPlan, SimOptions, Simulator};

/// How `fetch` prints actions.
#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum Format {
    /// One JSON object a record.
    Ndjson,
    /// One line an action: ID, case, type, section, number, published, type name.
    Table,
}

#[derive(Args, Debug)]
pub struct FetchArgs {
    /// Print the actions after this ID (`-1`: from the first).
    #[arg(long, allow_hyphen_values = true, value_name = "ID")]
    pub after: i64,
    /// Pages to fetch (each one request, at most 1000 actions, spending the budget).
    #[arg(long, default_value_t = 1)]
    pub pages: u32,
    /// How to print them.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Args, Debug, Clone)]
pub struct SimArgs {
    /// Port to listen on (0: any free port; the log line gives the URL).
    #[arg(long, default_value_t = 8090)]
    pub port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1", value_name = "ADDR")]
    pub bind: String,
    /// Seed of the generated data (the same seed gives the same register).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Actions the register holds at start.
    #[arg(long, default_value_t = 10_000)]
    pub actions: usize,
    /// ID of the first action.
    #[arg(long, default_value_t = 1246, value_name = "ID")]
    pub start_id: i64,
    /// Actions an answer holds at most (the real register: 1000).
    #[arg(long, default_value_t = 1000)]
    pub page: usize,
    /// New actions a second while it runs.
    #[arg(long, default_value_t = 0.0, value_name = "PER_SEC")]
    pub live_rate: f64,
    /// Requests a day before CHYBA (0: unlimited).
    #[arg(long, default_value_t = 3000)]
    pub daily_limit: u64,
    /// Requests a minute before CHYBA (0: unlimited).
    #[arg(long, default_value_t = 50)]
    pub per_minute_limit: u64,
    /// Faults: `500@3,truncate@5,fault@7,chyba@9,garbage@11,slow@13,reset@15`, `rate=0.1`,
    /// `kinds=500+reset`, `seed=7`.
    #[arg(long, default_value = "", value_name = "PLAN")]
    pub faults: String,
    /// How late a `slow` fault answers, in ms.
    #[arg(long, default_value_t = 5000, value_name = "MS")]
    pub slow_ms: u64,
    /// Added to every answer, in ms.
    #[arg(long, default_value_t = 0, value_name = "MS")]
    pub latency_ms: u64,
}

impl SimArgs {
    pub fn options(&self) -> anyhow::Result<SimOptions> {
        Ok(SimOptions {
            seed: self.seed,
            actions: self.actions,
            start_id: self.start_id,
            page: self.page.max(1),
            live_rate: self.live_rate,
            daily_limit: (self.daily_limit > 0).then_some(self.daily_limit),
            per_minute_limit: (self.per_minute_limit > 0).then_some(self.per_minute_limit),
            faults: FaultPlan::parse(&self.faults).map_err(|e| anyhow::anyhow!("--faults: {e}"))?,
            slow: Duration::from_millis(self.slow_ms),
            latency: Duration::from_millis(self.latency_ms),
        })
    }
}

pub async fn sim(args: SimArgs) -> anyhow::Result<Exit> {
    let opts = args.options()?;
    let listener = tokio::net::TcpListener::bind((args.bind.as_str(), args.port))
        .await
        .with_context(|| format!("binding {}:{}", args.bind, args.port))?;
    let addr = listener.local_addr()?;
    let sim = Simulator::new(opts);
    tracing::info!(url = %format!("http://{addr}{}", crate::sim::SERVICE_PATH), head = sim.head_id(), "simulator listening");
    let mut rx = crate::daemon::shutdown_signal("the current page");
    sim.serve(listener, async move {
        let _ = rx.wait_for(|v| *v).await;
    })
    .await?;
    Ok(Exit::Ok)
}

pub async fn fetch(app: &App, a: FetchArgs) -> anyhow::Result<Exit> {
    let client = app.client()?;
    let mut after = a.after;
    for _ in 0..a.pages.max(1) {
        let page = client
            .fetch_after(after)
            .await
            .with_context(|| format!("fetching after {after}"))?;
        for r in &page.records {
            match a.format {
                Format::Ndjson => outln!("{}", serde_json::to_string(r)?),
                Format::Table => {
                    let x = &r.action;
                    outln!(
                        "{:>10}  {:<16} {:>5} {:<4} {:>3}  {}  {}",
                        x.id,
                        x.case_number,
                        x.type_code,
                        x.section.as_deref().unwrap_or("-"),
                        x.number_in_section
                            .map(|n| n.to_string())
                            .unwrap_or_else(|| "-".into()),
                        x.published,
                        x.type_name
                    );
                }
            }
        }
        match page.last_id() {
            Some(l) => after = l,
            None => {
                eprintln!("(no actions after {after}: caught up)");
                break;
            }
        }
    }
    Ok(Exit::Ok)
}
