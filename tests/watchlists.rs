//! Watchlists against the simulator with live growth: a list of debtors' IČOs and birth
//! numbers taken from the simulator's truth; its feed (API) and its webhook deliveries
//! (notifier) hold exactly the truth's actions of those debtors' cases after the list's
//! creation, in order, signatures verified with the Standard Webhooks reference library
//! (`standardwebhooks`), across a receiver outage and a kill -9 of the daemon
//! mid-delivery; and the entry validation, the admin listener and the CLI.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use common::Backend;
use isir::projection;
use isir::sim::{SimOptions, Simulator};
use isir::watchlist::{self, Entry, Kind, NewList, Roles};
use serde_json::Value;
use sha2::Digest;

const SEED: u64 = 77;
const START: usize = 4_000;
const GROWTH: usize = 3_000;

// ---------------------------------------------------------------------------------------
// A test receiver: records every request, answers 503 with `Retry-After` while `fail` is
// above zero, and waits `delay_ms` before answering.

#[derive(Debug, Clone)]
struct Got {
    id: String,
    status: u16,
    verified: bool,
    body: Value,
}

#[derive(Default)]
struct Receiver {
    got: Mutex<Vec<Got>>,
    fail: AtomicU32,
    delay_ms: AtomicU64,
    secret: Mutex<String>,
    started: AtomicU32,
    /// `webhook-id` of every request, as it arrives.
    arrivals: Mutex<Vec<String>>,
}

async fn receive(
    State(r): State<Arc<Receiver>>,
    headers: HeaderMap,
    body: bytes::Bytes,
) -> (StatusCode, HeaderMap) {
    r.arrivals.lock().unwrap().push(
        headers
            .get("webhook-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string(),
    );
    r.started.fetch_add(1, Ordering::SeqCst);
    let delay = r.delay_ms.load(Ordering::SeqCst);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let secret = r.secret.lock().unwrap().clone();
    // The reference implementation of the specification checks the signature and the
    // timestamp's tolerance.
    let verified = standardwebhooks::Webhook::new(&secret)
        .and_then(|w| w.verify(&body, &headers))
        .is_ok();
    let failing = r
        .fail
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |f| f.checked_sub(1))
        .is_ok();
    let status = if failing { 503 } else { 200 };
    r.got.lock().unwrap().push(Got {
        id: headers
            .get("webhook-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string(),
        status,
        verified,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    let mut h = HeaderMap::new();
    if failing {
        h.insert("retry-after", "1".parse().unwrap());
    }
    (StatusCode::from_u16(status).unwrap(), h)
}

async fn receiver() -> (Arc<Receiver>, String) {
    let r = Arc::new(Receiver::default());
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(receive))
        .with_state(r.clone());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await });
    (r, url)
}

/// The events of the 2xx deliveries, first occurrence of each action kept.
fn delivered(r: &Receiver) -> Vec<Value> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for g in r.got.lock().unwrap().iter().filter(|g| g.status == 200) {
        for e in g.body["data"]["events"]
            .as_array()
            .cloned()
            .unwrap_or_default()
        {
            if seen.insert(e["action_id"].as_i64().unwrap()) {
                out.push(e);
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// The truth: which debtors to watch, and what their feed must hold.

struct Truth {
    entries: BTreeSet<Entry>,
    /// Watched cases and, for each, the first action naming the watched debtor.
    first: HashMap<String, i64>,
    actions: Vec<isir::source::Action>,
}

/// About 120 debtors of the final register (after growth): some of cases open before the
/// list is made, some of cases opened after; IČOs for companies and traders, birth
/// numbers for other people; never one of an erased case (§ 425: its matches vanish).
fn truth() -> Truth {
    let sim = Simulator::new(SimOptions {
        seed: SEED,
        actions: START + GROWTH,
        ..SimOptions::default()
    });
    let actions = sim.truth_all();
    let debtors = sim.truth_debtors();
    let key_of = |d: &isir::sim::TruthDebtor| match &d.person.ico {
        Some(i) => (Kind::Ico, i.clone()),
        None => (Kind::Rc, d.person.birth_number.clone().unwrap()),
    };
    let erased_keys: BTreeSet<_> = debtors.iter().filter(|d| d.erased).map(key_of).collect();
    let usable: Vec<_> = debtors
        .iter()
        .filter(|d| !d.erased && !erased_keys.contains(&key_of(d)))
        .collect();
    let picked: Vec<_> = usable.iter().step_by(usable.len() / 120 + 1).collect();
    let entries: BTreeSet<Entry> = picked
        .iter()
        .map(|d| {
            let (kind, key) = key_of(d);
            Entry { kind, key }
        })
        .collect();
    // Every case of a watched key (a key may be a debtor in more than one case).
    let mut first = HashMap::new();
    for d in &usable {
        let (kind, key) = key_of(d);
        if !entries.contains(&Entry {
            kind,
            key: key.clone(),
        }) {
            continue;
        }
        let tag = match kind {
            Kind::Ico => format!("<ic>{key}</ic>"),
            _ => format!("<rc>{key}</rc>"),
        };
        let f = actions
            .iter()
            .find(|a| {
                a.case_number == d.case_number
                    && a.note.as_deref().is_some_and(|n| n.contains(&tag))
            })
            .map(|a| a.id);
        // A case whose petition is published but not yet its debtor's record names no
        // watched party: nothing of it is in the feed yet.
        if let Some(f) = f {
            first.insert(d.case_number.clone(), f);
        }
    }
    Truth {
        entries,
        first,
        actions,
    }
}

impl Truth {
    /// The feed the list must have between `created` and `until`: the actions of the
    /// watched cases, ordered by position (an action before the debtor's record comes
    /// with it), then ID.
    fn expected(&self, created: i64, until: i64) -> Vec<(i64, i64)> {
        let mut v: Vec<(i64, i64)> = self
            .actions
            .iter()
            .filter(|a| a.id > created && a.id <= until)
            .filter_map(|a| self.first.get(&a.case_number).map(|f| (a.id.max(*f), a.id)))
            .filter(|(pos, _)| *pos <= until)
            .collect();
        v.sort();
        v
    }

    /// The actions that first name a watched debtor after `created`.
    fn new_parties(&self, created: i64, until: i64) -> BTreeSet<i64> {
        self.first
            .values()
            .copied()
            .filter(|f| *f > created && *f <= until)
            .collect()
    }
}

fn ids(events: &[Value]) -> Vec<(i64, i64)> {
    events
        .iter()
        .map(|e| {
            (
                e["position"].as_i64().unwrap(),
                e["action_id"].as_i64().unwrap(),
            )
        })
        .collect()
}

async fn catch_up(app: &isir::app::App) {
    loop {
        let t = app.poller().unwrap().poll_once().await;
        if matches!(t.outcome, isir::poller::TickOutcome::CaughtUp) {
            break;
        }
    }
    for n in projection::NAMES {
        projection::catch_up(&app.store, n, 5000).await.unwrap();
    }
}

async fn watermark(store: &isir::store::Store) -> i64 {
    projection::metas(store)
        .await
        .unwrap()
        .iter()
        .filter(|m| !m.name.contains('#'))
        .map(|m| m.cursor)
        .min()
        .unwrap()
}

/// The receivers of these tests are on loopback, over plain http.
fn open_policy() -> watchlist::Policy {
    watchlist::Policy {
        allow_private: true,
        allow_http_with_birth_numbers: true,
        proxy: None,
    }
}

fn opts(holder: &str) -> watchlist::notify::NotifierOptions {
    watchlist::notify::NotifierOptions {
        every: Duration::from_millis(50),
        batch: 40,
        timeout: Duration::from_secs(5),
        retry_min: Duration::from_millis(50),
        retry_max: Duration::from_millis(400),
        failing_after: Duration::ZERO,
        targets: open_policy(),
        claim_ttl: Duration::from_secs(30),
        holder: holder.into(),
    }
}

async fn feed_and_webhook(b: Backend) {
    let truth = truth();
    let (sim, url, _g) = common::sim(START, 500, SEED).await;
    let db = common::fresh_db(b).await;
    let mut s = common::settings(&url, &db);
    s.poll.max_batches_per_tick = 1000;
    let app = common::app(s).await;
    catch_up(&app).await;
    app.store.set_setting("phase", "serve").await.unwrap();

    let (rx, hook) = receiver().await;
    let secret = watchlist::new_secret();
    *rx.secret.lock().unwrap() = secret.clone();
    let (list, _) = watchlist::create(
        &app.store,
        NewList {
            name: "bank".into(),
            roles: Roles::Debtor,
            webhook_url: Some(hook),
            secret: Some(secret),
            entries: truth.entries.clone(),
        },
        &open_policy(),
    )
    .await
    .unwrap();
    let created = list.created_watermark;
    assert_eq!(created, watermark(&app.store).await);
    // A list of any role: an insolvency administrator's IČO, from the truth (the IČO in
    // the first administrator's person record), read through the API-free feed below.
    let admin_ico = truth
        .actions
        .iter()
        .filter_map(|a| a.note.as_deref())
        .find(|n| n.contains("<druhRoleVRizeni>SPRÁVCE</druhRoleVRizeni>"))
        .and_then(|n| {
            n.split("<ic>")
                .nth(1)?
                .split("</ic>")
                .next()
                .map(String::from)
        })
        .expect("an administrator in the truth");
    watchlist::create(
        &app.store,
        NewList {
            name: "admins".into(),
            roles: Roles::All,
            webhook_url: None,
            secret: None,
            entries: [Entry {
                kind: Kind::Ico,
                key: admin_ico.clone(),
            }]
            .into(),
        },
        &open_policy(),
    )
    .await
    .unwrap();

    // A second list whose receiver never answers in time: it must not delay the first.
    let (slow_rx, slow_hook) = receiver().await;
    slow_rx.delay_ms.store(60_000, Ordering::SeqCst);
    watchlist::create(
        &app.store,
        NewList {
            name: "slow".into(),
            roles: Roles::Debtor,
            webhook_url: Some(slow_hook),
            secret: None,
            entries: truth.entries.clone(),
        },
        &open_policy(),
    )
    .await
    .unwrap();
    // The register grows; the receiver is down for its first three requests.
    sim.publish(GROWTH);
    catch_up(&app).await;
    let until = watermark(&app.store).await;
    let expected = truth.expected(created, until);
    assert!(
        expected.len() > 80 && !truth.new_parties(created, until).is_empty(),
        "the list must see ongoing and new cases ({} events)",
        expected.len()
    );
    rx.fail.store(3, Ordering::SeqCst);
    let (stop, sd) = tokio::sync::watch::channel(false);
    let notifier = tokio::spawn(watchlist::notify::run(app.store.clone(), opts("t1"), sd));
    let t0 = Instant::now();
    let mut saw_failing = false;
    loop {
        let l = watchlist::get(&app.store, "bank").await.unwrap();
        if l.failing == 1 {
            saw_failing = true;
            assert_eq!(l.cursor, created, "a failing list keeps its cursor");
            assert!(l.last_error.as_deref().unwrap_or("").contains("503"));
        }
        if l.cursor == expected.last().unwrap().0 {
            assert_eq!(l.failing, 0);
            assert!(l.last_error.is_none());
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the notifier did not catch up: {l:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let slow = watchlist::get(&app.store, "slow").await.unwrap();
    assert!(
        slow_rx.started.load(Ordering::SeqCst) >= 1 && slow.delivered_batches == 0,
        "the slow list was being delivered meanwhile, and is still stuck: {slow:?}"
    );
    assert_eq!(
        slow.cursor, created,
        "an unacknowledged list keeps its cursor"
    );
    // The status shows each list's lag.
    let status = isir::status::collect(&app.status_source()).await.unwrap();
    let lag = |n: &str| {
        status
            .watchlists
            .iter()
            .find(|w| w.list.name == n)
            .unwrap()
            .lag_ids
    };
    assert_eq!(lag("bank"), Some(until - expected.last().unwrap().0));
    assert_eq!(lag("slow"), Some(until - created));
    let t0 = Instant::now();
    stop.send(true).unwrap();
    notifier.await.unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "a shutdown does not wait for a hanging receiver"
    );
    assert!(saw_failing, "the list was marked failing during the outage");
    watchlist::remove(&app.store, "slow").await.unwrap();

    let got = rx.got.lock().unwrap().clone();
    assert!(got.iter().all(|g| g.verified), "every request verifies");
    // The retries of the first batch carry its ID.
    assert_eq!(got[0].status, 503);
    assert!(
        got[..4].iter().all(|g| g.id == got[0].id),
        "retries keep the webhook-id"
    );
    assert_eq!(got[3].status, 200);
    let ids_sent: BTreeSet<&str> = got
        .iter()
        .filter(|g| g.status == 200)
        .map(|g| g.id.as_str())
        .collect();
    assert_eq!(
        ids_sent.len(),
        got.iter().filter(|g| g.status == 200).count(),
        "one ID a batch"
    );
    let d = delivered(&rx);
    assert_eq!(
        ids(&d),
        expected,
        "exactly the truth's events, in feed order"
    );
    let marked: BTreeSet<i64> = d
        .iter()
        .filter(|e| e["new_party"] == true)
        .map(|e| e["action_id"].as_i64().unwrap())
        .collect();
    assert_eq!(
        marked,
        truth.new_parties(created, until),
        "new petitions marked"
    );

    // The API's feed: the same events, paged, for a key scoped to the list only.
    let hash = |k: &str| hex::encode(sha2::Sha256::digest(k.as_bytes()));
    let keys = vec![
        isir::config::ApiKey {
            name: "bank".into(),
            sha256: hash("bank-key"),
            scopes: vec!["watch:bank".into()],
        },
        isir::config::ApiKey {
            name: "other".into(),
            sha256: hash("other-key"),
            scopes: vec!["watch:other".into(), "pii".into()],
        },
    ];
    let (base, _tx) = common::serve_api(
        isir::read::ReadState::new(
            app.store.clone(),
            isir::read::ReadOptions {
                keys,
                rate_per_second: 10_000,
                burst: 10_000,
                // Streams read in many pages even where the feed is short.
                stream_page: 7,
                ..Default::default()
            },
        )
        .with_status(app.status_source()),
    )
    .await;
    let http = reqwest::Client::new();
    let page = http
        .get(format!("{base}/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let bank_lag = until - expected.last().unwrap().0;
    assert!(
        page.contains(&format!("id=\"watch-bank-lag\">{bank_lag}<")),
        "the status page shows the list's lag"
    );
    let metrics = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(&format!("isir_watch_lag_ids{{list=\"bank\"}} {bank_lag}\n"))
            && metrics.contains("isir_watch_failing{list=\"bank\"} 0"),
        "{metrics}"
    );
    for (key, want) in [(None, 403), (Some("other-key"), 403)] {
        let mut r = http.get(format!("{base}/v1/watchlists/bank/events"));
        if let Some(k) = key {
            r = r.header("X-API-Key", k);
        }
        let r = r.send().await.unwrap();
        assert_eq!(r.status().as_u16(), want);
    }
    let mut next = Some("/v1/watchlists/bank/events?limit=37".to_string());
    let mut pages = Vec::new();
    while let Some(n) = next {
        let r = http
            .get(format!("{base}{n}"))
            .header("X-API-Key", "bank-key")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.headers()["ISIR-Watermark"].to_str().unwrap(),
            until.to_string()
        );
        let v: Value = r.json().await.unwrap();
        pages.extend(v["events"].as_array().unwrap().clone());
        next = v["next"].as_str().map(String::from);
    }
    assert_eq!(ids(&pages), expected, "the API's feed is the truth's");
    // The whole feed as one stream (NDJSON, then CSV): the pages' events, in order.
    let r = http
        .get(format!(
            "{base}/v1/watchlists/bank/events?format=ndjson&stream=all"
        ))
        .header("X-API-Key", "bank-key")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let streamed: Vec<Value> = r
        .text()
        .await
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(streamed, pages, "the stream is the pages");
    let r = http
        .get(format!(
            "{base}/v1/watchlists/bank/events?format=csv&stream=all"
        ))
        .header("X-API-Key", "bank-key")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body = r.text().await.unwrap();
    assert_eq!(
        csv::Reader::from_reader(body.as_bytes()).records().count(),
        pages.len()
    );
    // Positions at the ends of the range (found by Schemathesis: `after` = i64::MIN once
    // widened the page's window forever).
    for (after, want) in [(i64::MIN, expected.len()), (i64::MAX, 0)] {
        let r = http
            .get(format!(
                "{base}/v1/watchlists/bank/events?after={after}&limit=1000"
            ))
            .header("X-API-Key", "bank-key")
            .send()
            .await
            .unwrap();
        let v: Value = r.json().await.unwrap();
        assert_eq!(
            v["events"].as_array().unwrap().len(),
            want.min(1000),
            "after={after}"
        );
    }
    // Both ways of finding a page's matches give the same feed, page by page.
    for drive in [watchlist::feed::Drive::List, watchlist::feed::Drive::Window] {
        let mut tx = isir::store::sql::Tx::begin_read(&app.store).await.unwrap();
        let (mut after, mut all) = (created, Vec::new());
        loop {
            let p = watchlist::feed::page_driven(
                &mut tx,
                "bank",
                Roles::Debtor,
                created,
                after,
                until,
                23,
                false,
                Some(drive),
            )
            .await
            .unwrap();
            all.extend(p.events);
            match p.next {
                Some(n) => after = n,
                None => break,
            }
        }
        tx.commit().await.unwrap();
        assert_eq!(ids(&all), expected, "driven by {drive:?}");
    }
    // Birth numbers stay hidden from a key without the `pii` scope.
    let rcs: Vec<&Value> = pages
        .iter()
        .flat_map(|e| e["watched"].as_array().unwrap())
        .filter(|w| w["kind"] == "rc")
        .collect();
    assert!(!rcs.is_empty() && rcs.iter().all(|w| w["key"].is_null()));
    // The administrator's list: every action of its cases from its first person record
    // on (a party that is not the debtor brings no earlier action), in action-ID order.
    let tag = format!("<ic>{admin_ico}</ic>");
    let mut first_of: HashMap<&str, i64> = HashMap::new();
    for a in &truth.actions {
        if a.note.as_deref().is_some_and(|n| n.contains(&tag)) {
            first_of.entry(a.case_number.as_str()).or_insert(a.id);
        }
    }
    let want: Vec<(i64, i64)> = truth
        .actions
        .iter()
        .filter(|a| a.id > created && a.id <= until)
        .filter(|a| {
            first_of
                .get(a.case_number.as_str())
                .is_some_and(|f| a.id >= *f)
        })
        .map(|a| (a.id, a.id))
        .collect();
    let mut tx = isir::store::sql::Tx::begin_read(&app.store).await.unwrap();
    let p = watchlist::feed::page(
        &mut tx,
        "admins",
        Roles::All,
        created,
        created,
        until,
        100_000,
        false,
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert!(!want.is_empty());
    assert_eq!(
        ids(&p.events),
        want,
        "an administrator's cases from its appointment on"
    );
    // A replay from a position delivers again from there.
    let mid = expected[expected.len() / 2].0;
    watchlist::change(
        &app.store,
        "bank",
        watchlist::Change {
            cursor: Some(mid),
            ..Default::default()
        },
        &open_policy(),
    )
    .await
    .unwrap();
    let before = rx.got.lock().unwrap().len();
    let (stop, sd) = tokio::sync::watch::channel(false);
    let notifier = tokio::spawn(watchlist::notify::run(app.store.clone(), opts("t2"), sd));
    let t0 = Instant::now();
    while watchlist::get(&app.store, "bank").await.unwrap().cursor != expected.last().unwrap().0 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the replay did not finish"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.send(true).unwrap();
    notifier.await.unwrap();
    let again: Vec<(i64, i64)> = rx.got.lock().unwrap()[before..]
        .iter()
        .flat_map(|g| {
            g.body["data"]["events"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|e| {
            (
                e["position"].as_i64().unwrap(),
                e["action_id"].as_i64().unwrap(),
            )
        })
        .collect();
    let want: Vec<(i64, i64)> = expected.iter().copied().filter(|(p, _)| *p > mid).collect();
    assert_eq!(
        again, want,
        "a replay resends exactly what follows the position"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn feed_and_webhook_sqlite() {
    feed_and_webhook(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn feed_and_webhook_postgres() {
    feed_and_webhook(Backend::Postgres).await;
}

// ---------------------------------------------------------------------------------------
// Validation and management.

#[tokio::test]
async fn entries_are_validated_and_nothing_is_half_imported() {
    let db = common::fresh_db(Backend::Sqlite).await;
    let store = common::store(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("partners.csv");
    // Lines 3 and 5 are bad: a wrong check digit and a birth number with no date.
    std::fs::write(
        &csv,
        "ico,rc,name\n25596641,,Alfa\n25596642,,Beta\n,736028/5163,Gama\n,731328/5163,Delta\n",
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_isir");
    let run = |args: &[&str]| {
        std::process::Command::new(bin)
            .args(args)
            .env("ISIR_DATABASE__URL", &db.url)
            .env("ISIR_WATCH__ALLOW_PRIVATE_TARGETS", "false")
            .output()
            .unwrap()
    };
    let o = run(&[
        "watch",
        "add",
        "p",
        "--from-file",
        csv.to_str().unwrap(),
        "--ico",
        "12",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("line 3") && err.contains("line 5") && err.contains("ico \"12\""),
        "{err}"
    );
    assert!(!err.contains("line 2") && !err.contains("line 4"), "{err}");
    assert!(
        watchlist::list(&store).await.unwrap().is_empty(),
        "nothing imported"
    );

    std::fs::write(&csv, "ico,rc\n25596641,\n,736028/5163\n").unwrap();
    // A webhook to a loopback address is refused without watch.allow_private_targets.
    let o = run(&[
        "watch",
        "add",
        "p",
        "--from-file",
        csv.to_str().unwrap(),
        "--webhook",
        "http://127.0.0.1:9/x",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("allow_private_targets"));
    let o = run(&[
        "watch",
        "add",
        "p",
        "--from-file",
        csv.to_str().unwrap(),
        "--case",
        "INS 12/2024",
        "--roles",
        "all",
        "--webhook",
        "https://8.8.8.8/hook",
        "--json",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["watchlist"]["entries"], 3);
    assert!(
        v["secret"].as_str().unwrap().starts_with("whsec_"),
        "a generated secret is shown once"
    );
    assert!(v["watchlist"].get("secret").is_none());
    let o = run(&["watch", "show", "p", "--json", "--entries"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["entries_by_kind"],
        serde_json::json!({"ico": 1, "rc": 1, "case": 1})
    );
    assert_eq!(v["watchlist"]["roles"], "all");
    let o = run(&["watch", "add", "p", "--ico", "25596641"]);
    assert_eq!(o.status.code(), Some(1), "a name is taken once");
    let o = run(&["watch", "list", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["watchlists"].as_array().unwrap().len(), 1);
    assert_eq!(run(&["watch", "remove", "p"]).status.code(), Some(0));
    assert_eq!(run(&["watch", "remove", "p"]).status.code(), Some(1));
    assert!(watchlist::entries(&store, "p").await.unwrap().is_empty());
}

#[tokio::test]
async fn admin_listener_manages_lists_and_the_public_one_cannot() {
    let db = common::fresh_db(Backend::Sqlite).await;
    let store = common::store(&db).await;
    let hash = |k: &str| hex::encode(sha2::Sha256::digest(k.as_bytes()));
    let state = isir::read::ReadState::new(store.clone(), Default::default()).with_admin(
        isir::read::AdminOptions {
            separate: true,
            key_sha256: Some(hash("ops")),
            targets: Default::default(),
            read_only: false,
        },
    );
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let abase = format!("http://{}", admin.local_addr().unwrap());
    tokio::spawn(isir::http::run_admin(
        admin,
        state.clone(),
        std::future::pending(),
    ));
    let (pbase, _tx) = common::serve_api(state).await;
    let http = reqwest::Client::new();
    let body = serde_json::json!({"name": "leasing", "ico": ["25596641", "45274649"], "case": ["INS 1/2020"]});
    // The public listener has no such route; the admin one needs the key.
    let r = http
        .post(format!("{pbase}/admin/watchlists"))
        .header("X-Admin-Key", "ops")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = http
        .post(format!("{abase}/admin/watchlists"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // A write takes the key from the header only: in the query it does not count.
    let r = http
        .post(format!("{abase}/admin/watchlists?admin_key=ops"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        401,
        "a key in the URL does not authenticate a write"
    );
    assert!(
        watchlist::list(&store).await.unwrap().is_empty(),
        "nothing created"
    );
    let r = http
        .post(format!("{abase}/admin/watchlists"))
        .header("X-Admin-Key", "ops")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    for m in [reqwest::Method::PATCH, reqwest::Method::DELETE] {
        let r = http
            .request(
                m.clone(),
                format!("{abase}/admin/watchlists/leasing?admin_key=ops"),
            )
            .json(&serde_json::json!({"cursor": 5}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{m} with the key in the URL");
    }
    let l = watchlist::get(&store, "leasing").await.unwrap();
    assert_ne!(l.cursor, 5, "not changed");
    // A read (a browser's) may still carry it in the query.
    let r = http
        .get(format!("{abase}/admin/watchlists/leasing?admin_key=ops"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let bad = serde_json::json!({"name": "x", "csv": "ico\n25596641\n123\n"});
    let r = http
        .post(format!("{abase}/admin/watchlists"))
        .header("X-Admin-Key", "ops")
        .json(&bad)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let p: Value = r.json().await.unwrap();
    assert!(p["detail"].as_str().unwrap().contains("line 3"), "{p}");
    // A 100 000-entry list fits the admin body limit.
    let big: Vec<String> = (0..100_000u32)
        .map(|i| {
            let base = 1_000_000 + i;
            let d = format!("{base:07}");
            let sum: u32 = d
                .bytes()
                .enumerate()
                .map(|(k, c)| u32::from(c - b'0') * (8 - k as u32))
                .sum();
            format!("{d}{}", (11 - sum % 11) % 10)
        })
        .collect();
    let r = http
        .post(format!("{abase}/admin/watchlists"))
        .header("X-Admin-Key", "ops")
        .json(&serde_json::json!({"name": "big", "ico": big}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    let r = http
        .get(format!("{abase}/admin/watchlists/big"))
        .header("X-Admin-Key", "ops")
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["entries_by_kind"]["ico"], 100_000);
    let r = http
        .patch(format!("{abase}/admin/watchlists/leasing"))
        .header("X-Admin-Key", "ops")
        .json(&serde_json::json!({"webhook": "http://10.0.0.1/x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400, "a private target is refused");
    let r = http
        .delete(format!("{abase}/admin/watchlists/leasing"))
        .header("X-Admin-Key", "ops")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let names: Vec<String> = watchlist::list(&store)
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(names, vec!["big".to_string()]);
}

// ---------------------------------------------------------------------------------------
// The real daemon, killed with SIGKILL while a delivery is in flight.

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_mid_delivery_resends_the_batch_and_skips_nothing() {
    let truth = truth();
    let (sim, url, _g) = common::sim(START, 500, SEED).await;
    let db = common::fresh_db(Backend::Sqlite).await;
    let store = common::store(&db).await;
    let (rx, hook) = receiver().await;
    let secret = watchlist::new_secret();
    *rx.secret.lock().unwrap() = secret.clone();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("daemon.log");
    let env: Vec<(&str, String)> = vec![
        ("ISIR_SOURCE__URL", url.clone()),
        ("ISIR_DATABASE__URL", db.url.clone()),
        ("ISIR_POLL__PERIOD_SECS", "1".into()),
        ("ISIR_POLL__MAX_BATCHES_PER_TICK", "1000".into()),
        ("ISIR_BUDGET__DAILY", "1000000".into()),
        ("ISIR_BUDGET__PER_MINUTE", "1000000".into()),
        ("ISIR_PROJECTION__EVERY_SECS", "1".into()),
        ("ISIR_PROJECTION__DEBOUNCE_MS", "50".into()),
        ("ISIR_PHASE__INITIAL", "project".into()),
        ("ISIR_API__BIND", "127.0.0.1:0".into()),
        ("ISIR_WATCH__ALLOW_PRIVATE_TARGETS", "true".into()),
        ("ISIR_WATCH__ALLOW_HTTP_WITH_BIRTH_NUMBERS", "true".into()),
        ("ISIR_WATCH__EVERY_MS", "100".into()),
        ("ISIR_WATCH__BATCH", "15".into()),
        ("ISIR_WATCH__RETRY_MIN_MS", "100".into()),
        ("ISIR_WATCH__TIMEOUT_SECS", "3".into()),
        ("ISIR_WATCH__CLAIM_TTL_SECS", "4".into()),
        ("WEBHOOK_SECRET", secret.clone()),
        ("ISIR_LOG", "info,sqlx=warn".into()),
    ];
    let bin = env!("CARGO_BIN_EXE_isir");
    let daemon = || {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        std::process::Command::new(bin)
            .arg("run")
            .envs(env.iter().cloned())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap()
    };
    let wait_for = |what: &'static str, secs: u64| {
        let store = store.clone();
        let log = log.clone();
        move |target: i64| {
            let store = store.clone();
            let log = log.clone();
            async move {
                let t0 = Instant::now();
                loop {
                    let w = projection::metas(&store)
                        .await
                        .ok()
                        .and_then(|ms| {
                            ms.iter()
                                .filter(|m| !m.name.contains('#'))
                                .map(|m| m.cursor)
                                .min()
                        })
                        .unwrap_or(-1);
                    if w >= target {
                        return w;
                    }
                    assert!(
                        t0.elapsed() < Duration::from_secs(secs),
                        "{what}: watermark {w} < {target}\n{}",
                        std::fs::read_to_string(&log).unwrap_or_default()
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    };
    let mut child = daemon();
    wait_for("backfill", 120)(sim.head_id().unwrap()).await;

    // The list, made with the CLI while the daemon runs.
    let csv = dir.path().join("list.csv");
    let mut text = String::from("ico,rc\n");
    for e in &truth.entries {
        match e.kind {
            Kind::Ico => text.push_str(&format!("{},\n", e.key)),
            _ => text.push_str(&format!(",{}\n", e.key)),
        }
    }
    std::fs::write(&csv, text).unwrap();
    let o = std::process::Command::new(bin)
        .args([
            "watch",
            "add",
            "bank",
            "--from-file",
            csv.to_str().unwrap(),
            "--webhook",
            &hook,
            "--secret-env",
            "WEBHOOK_SECRET",
            "--json",
        ])
        .envs(env.iter().cloned())
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let created = watchlist::get(&store, "bank")
        .await
        .unwrap()
        .created_watermark;

    // Growth; every answer takes 1.5 s, and the daemon is killed while the third is
    // outstanding.
    rx.delay_ms.store(1500, Ordering::SeqCst);
    sim.publish(GROWTH);
    let t0 = Instant::now();
    while rx.started.load(Ordering::SeqCst) < 3 {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "no deliveries\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // While the third request is outstanding the cursor is at the last event of the
    // batches the receiver acknowledged, not past the one in flight.
    let acked = |rx: &Receiver| -> (usize, i64) {
        let got = rx.got.lock().unwrap();
        let last = got
            .iter()
            .filter(|g| g.status == 200)
            .flat_map(|g| ids(g.body["data"]["events"].as_array().unwrap()))
            .map(|(p, _)| p)
            .max()
            .unwrap_or(created);
        (got.len(), last)
    };
    let (answered, last_acked) = acked(&rx);
    let cursor_at_kill = watchlist::get(&store, "bank").await.unwrap().cursor;
    assert_eq!(
        acked(&rx),
        (answered, last_acked),
        "the third request was still outstanding while the cursor was read"
    );
    assert_eq!(answered, 2, "two batches answered before the third");
    assert_eq!(
        cursor_at_kill, last_acked,
        "the cursor moved with the acknowledged batches only"
    );
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let in_flight = rx.arrivals.lock().unwrap()[2].clone();
    assert_eq!(
        watchlist::get(&store, "bank").await.unwrap().cursor,
        cursor_at_kill,
        "the unacknowledged batch did not move the cursor"
    );

    // The killed writer's lease stays until its TTL; the operator's forced release lets
    // the next one start at once. Its claim on the list lapses after watch.claim_ttl_secs.
    store.lease_force_release("isir:lease").await.unwrap();
    rx.delay_ms.store(0, Ordering::SeqCst);
    let mut child = daemon();
    let until = wait_for("growth", 120)(sim.head_id().unwrap()).await;
    let expected = truth.expected(created, until);
    let t0 = Instant::now();
    while watchlist::get(&store, "bank").await.unwrap().cursor != expected.last().unwrap().0 {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the restarted notifier did not catch up\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ok = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    child.wait().unwrap();

    let arrivals = rx.arrivals.lock().unwrap().clone();
    assert!(
        arrivals[3..].contains(&in_flight),
        "the batch in flight at the kill was sent again after the restart"
    );
    assert!(rx.got.lock().unwrap().iter().all(|g| g.verified));
    assert_eq!(
        ids(&delivered(&rx)),
        expected,
        "nothing skipped, nothing else, in order"
    );
}
