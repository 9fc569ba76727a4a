//! The ISIR simulator: the public web service on loopback, speaking the real protocol,
//! with deterministic data, the real usage limits and injectable faults.
//!
//! Owns the simulated register (`stream`), its fault plan (`faults`) and the HTTP face
//! (`server`). It never touches the replica's store: tests compare the store with the
//! ground truth it exposes (in process, or as JSON under `/_sim/`).

pub mod faults;
mod names;
mod render;
pub use render::TruthNote;
pub mod server;
pub mod spoil;
pub mod stream;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::source::model::Action;
pub use faults::{FaultKind, FaultPlan};
use stream::Generator;

/// The path of the real service.
pub const SERVICE_PATH: &str = "/isir_public_ws/IsirWsPublicService";

#[derive(Debug, Clone)]
pub struct SimOptions {
    pub seed: u64,
    /// Actions published at start.
    pub actions: usize,
    /// The first action's ID is at or above this.
    pub start_id: i64,
    /// Records a response at most.
    pub page: usize,
    /// Actions appended a second while running.
    pub live_rate: f64,
    /// The register's usage limits (None: unlimited).
    pub daily_limit: Option<u64>,
    pub per_minute_limit: Option<u64>,
    pub faults: FaultPlan,
    /// How late a `slow` fault answers.
    pub slow: Duration,
    /// Added to every SOAP answer (the real service is not instant).
    pub latency: Duration,
}

impl Default for SimOptions {
    fn default() -> Self {
        Self {
            seed: 1,
            actions: 10_000,
            start_id: 1246,
            page: 1000,
            live_rate: 0.0,
            daily_limit: Some(3000),
            per_minute_limit: Some(50),
            faults: FaultPlan::none(),
            slow: Duration::from_secs(5),
            latency: Duration::ZERO,
        }
    }
}

/// What the simulator has served; exposed at `/_sim/stats`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SimStats {
    pub requests_total: u64,
    pub requests_today: u64,
    pub by_operation: BTreeMap<String, u64>,
    pub over_limit: u64,
    pub faults_served: BTreeMap<String, u64>,
    pub wsdl_requests: u64,
    pub actions_published: usize,
    pub head_id: Option<i64>,
}

/// One served SOAP request; `/_sim/requests`.
#[derive(Debug, Clone, Serialize)]
pub struct RequestLog {
    pub n: u64,
    pub operation: String,
    pub after: Option<i64>,
    pub outcome: String,
    pub records: usize,
    pub last_id: Option<i64>,
}

struct Counters {
    stats: SimStats,
    day: chrono::NaiveDate,
    minute: VecDeque<Instant>,
    log: VecDeque<RequestLog>,
}

const LOG_KEEP: usize = 200_000;

pub(crate) struct Inner {
    opts: SimOptions,
    generator: RwLock<Generator>,
    started: Instant,
    /// Actions appended by [`Simulator::publish`] on top of the initial count.
    extra: Mutex<usize>,
    counters: Mutex<Counters>,
    faults: Mutex<FaultPlan>,
    /// The spoiled records served, by action ID: their bytes exactly as sent.
    spoiled_sent: Mutex<BTreeMap<i64, Vec<u8>>>,
}

/// A debtor of the simulated register ([`Simulator::truth_debtors`]).
#[derive(Debug, Clone)]
pub struct TruthDebtor {
    pub case_number: String,
    pub erased: bool,
    /// Whether an action naming the debtor (its person block with the debtor's role) is
    /// published yet: a case whose petition is out but not its debtor's block has no
    /// debtor row in a replica of the stream so far.
    pub named: bool,
    pub person: crate::source::model::Person,
}

/// A handle on a simulated register. Cheap to clone.
#[derive(Clone)]
pub struct Simulator {
    pub(crate) inner: Arc<Inner>,
}

fn prague_today() -> chrono::NaiveDate {
    chrono::Utc::now()
        .with_timezone(&chrono_tz::Europe::Prague)
        .date_naive()
}

impl Simulator {
    pub fn new(opts: SimOptions) -> Self {
        let mut g = Generator::new(opts.seed, opts.start_id);
        g.extend_to(opts.actions);
        let faults = opts.faults.clone();
        Self {
            inner: Arc::new(Inner {
                opts,
                generator: RwLock::new(g),
                started: Instant::now(),
                extra: Mutex::new(0),
                counters: Mutex::new(Counters {
                    stats: SimStats::default(),
                    day: prague_today(),
                    minute: VecDeque::new(),
                    log: VecDeque::new(),
                }),
                faults: Mutex::new(faults),
                spoiled_sent: Mutex::new(BTreeMap::new()),
            }),
        }
    }

    pub fn options(&self) -> &SimOptions {
        &self.inner.opts
    }

    /// Replaces the fault plan (tests change faults between ticks).
    pub fn set_faults(&self, plan: FaultPlan) {
        *self.inner.faults.lock().unwrap() = plan;
    }

    /// Publishes `n` more actions now (a deterministic alternative to the live rate).
    pub fn publish(&self, n: usize) {
        *self.inner.extra.lock().unwrap() += n;
        self.ensure();
    }

    /// How many actions are published now.
    pub fn published(&self) -> usize {
        let live =
            (self.inner.started.elapsed().as_secs_f64() * self.inner.opts.live_rate) as usize;
        self.inner.opts.actions + live + *self.inner.extra.lock().unwrap()
    }

    fn ensure(&self) -> usize {
        let n = self.published();
        if self.inner.generator.read().unwrap().len() < n {
            self.inner.generator.write().unwrap().extend_to(n);
        }
        n
    }

    /// Ground truth: the published actions with an ID above `after`, at most `limit`.
    pub fn truth_after(&self, after: i64, limit: usize) -> Vec<Action> {
        self.page_after(after, limit).1
    }

    /// The published actions above `after`, at most `limit`, with the 0-based position
    /// of the first in the stream.
    pub(crate) fn page_after(&self, after: i64, limit: usize) -> (usize, Vec<Action>) {
        let n = self.ensure();
        let g = self.inner.generator.read().unwrap();
        let evs = &g.events[..n];
        let start = evs.partition_point(|e| e.id <= after);
        let page = evs[start..]
            .iter()
            .take(limit)
            .map(|e| g.render(e))
            .collect();
        (start, page)
    }

    /// The spoiled records served so far (record defects of the fault plan), by action
    /// ID, with their bytes exactly as sent (the last time each was sent).
    pub fn spoiled_sent(&self) -> BTreeMap<i64, Vec<u8>> {
        self.inner.spoiled_sent.lock().unwrap().clone()
    }

    /// Ground truth: every published action.
    pub fn truth_all(&self) -> Vec<Action> {
        self.truth_after(i64::MIN, usize::MAX)
    }

    /// Ground truth as the generator made it: every published action without its note,
    /// and the note's model ([`TruthNote`]) before it was written as XML. Tests of what
    /// is built from the notes take their expectations from here, so that a field the
    /// note writer and the parser both get wrong cannot hide.
    pub fn truth_models(&self) -> Vec<(Action, TruthNote)> {
        let n = self.ensure();
        let g = self.inner.generator.read().unwrap();
        g.events[..n].iter().map(|e| g.render_model(e)).collect()
    }

    /// Ground truth of the people the register names as debtors: for every case opened
    /// by a published action, its debtor as the generator made it, and whether an
    /// erasure (§ 425) of the case is published. Independent of the parser and of the
    /// builders, for the privacy tests.
    pub fn truth_debtors(&self) -> Vec<TruthDebtor> {
        let n = self.ensure();
        let g = self.inner.generator.read().unwrap();
        let evs = &g.events[..n];
        let mut opened = std::collections::BTreeSet::new();
        let mut erased = std::collections::HashSet::new();
        let mut named = std::collections::HashSet::new();
        for e in evs.iter().filter(|e| e.case != u32::MAX) {
            opened.insert(e.case);
            match e.step {
                stream::Step::Erasure => {
                    erased.insert(e.case);
                }
                stream::Step::DebtorPerson | stream::Step::AddressChange => {
                    named.insert(e.case);
                }
                _ => {}
            }
        }
        opened
            .into_iter()
            .map(|i| {
                let c = g.cases[i as usize];
                TruthDebtor {
                    case_number: format!("INS {}/{}", c.number, c.year),
                    erased: erased.contains(&i),
                    named: named.contains(&i),
                    person: g.debtor(i, &c, false, stream::base_time()),
                }
            })
            .collect()
    }

    /// Cases opened by the published actions (and those generated ahead of them).
    pub fn case_count(&self) -> usize {
        self.ensure();
        self.inner.generator.read().unwrap().cases.len()
    }

    /// The newest published ID.
    pub fn head_id(&self) -> Option<i64> {
        let n = self.ensure();
        let g = self.inner.generator.read().unwrap();
        g.events[..n].last().map(|e| e.id)
    }

    pub fn stats(&self) -> SimStats {
        let n = self.ensure();
        let mut s = self.inner.counters.lock().unwrap().stats.clone();
        s.actions_published = n;
        s.head_id = n
            .checked_sub(1)
            .map(|i| self.inner.generator.read().unwrap().events[i].id);
        s
    }

    pub fn requests(&self) -> Vec<RequestLog> {
        self.inner
            .counters
            .lock()
            .unwrap()
            .log
            .iter()
            .cloned()
            .collect()
    }

    /// Serves the simulator on `listener` until `shutdown` completes.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        axum::serve(listener, server::router(self))
            .with_graceful_shutdown(shutdown)
            .await
    }
}

/// Starts a simulator on an ephemeral loopback port in the background; returns its
/// service URL and a guard that stops it when dropped. For tests, benches and the demo.
pub async fn spawn(opts: SimOptions) -> std::io::Result<(Simulator, String, SimGuard)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let sim = Simulator::new(opts);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(sim.clone().serve(listener, async move {
        let _ = rx.await;
    }));
    Ok((
        sim,
        format!("http://{addr}{SERVICE_PATH}"),
        SimGuard {
            tx: Some(tx),
            task: Some(task),
        },
    ))
}

/// Stops a spawned simulator when dropped.
pub struct SimGuard {
    tx: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl SimGuard {
    pub async fn stop(mut self) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for SimGuard {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}
