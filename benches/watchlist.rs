//! Watchlists at scale, on SQLite: a 100 000-entry list (every debtor key of the
//! simulated register, filled up with valid IČOs nobody has) over a replica of 200 000
//! actions, its feed read over the last 100 000 actions, against asking `/v1/events?ico=`
//! once per IČO (a sample, extrapolated); then the notifier's lag under a live stream
//! (the poller, projector and notifier of `isir run`, a webhook receiver on loopback).
//!
//! `cargo bench --bench watchlist`. Under `cargo test --benches` it runs a small smoke
//! version.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use isir::projection;
use isir::sim::{SimOptions, Simulator};
use isir::source::parse::parse_data_response;
use isir::source::write::data_response;
use isir::store::Store;
use isir::store::sql::Tx;
use isir::watchlist::{self, Entry, Kind, NewList, Roles};

fn valid_ico(n: u32) -> String {
    let d = format!("{:07}", 9_000_000 + n % 999_999);
    let sum: u32 = d
        .bytes()
        .enumerate()
        .map(|(k, c)| u32::from(c - b'0') * (8 - k as u32))
        .sum();
    format!("{d}{}", (11 - sum % 11) % 10)
}

async fn load(store: &Store, sim: &Simulator) {
    let epoch = store.register_epoch(1).await.unwrap();
    let mut after = -1;
    let mut cp = None;
    for c in sim.truth_all().chunks(1000) {
        let p = parse_data_response(data_response(c).as_bytes(), after).unwrap();
        after = p.last_id().unwrap();
        store.write_page(epoch, cp, &p).await.unwrap();
        cp = p.last_id();
    }
    for n in projection::NAMES {
        projection::catch_up(store, n, 5000).await.unwrap();
    }
}

/// A fresh PostgreSQL database (from ISIR_TEST_PG, default the local one): its URL.
async fn pg_database() -> String {
    use sqlx::Connection;
    let admin = std::env::var("ISIR_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let mut c = sqlx::PgConnection::connect(&admin)
        .await
        .expect("PostgreSQL for the bench (ISIR_TEST_PG)");
    let name = format!("isir_wbench_{}", std::process::id());
    for q in [
        format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        format!("CREATE DATABASE {name}"),
    ] {
        sqlx::query(&q).execute(&mut c).await.unwrap();
    }
    format!("{}/{name}", admin.rsplit_once('/').unwrap().0)
}

async fn scale(actions: usize, entries: usize, sample: usize, pg: bool) {
    let dir = tempfile::tempdir().unwrap();
    // WATCH_BENCH_DB keeps the SQLite database for a look at it afterwards.
    let url = if pg {
        pg_database().await
    } else {
        match std::env::var("WATCH_BENCH_DB") {
            Ok(p) => format!("sqlite://{p}"),
            Err(_) => format!("sqlite://{}", dir.path().join("w.db").display()),
        }
    };
    println!("--- {}", if pg { "PostgreSQL" } else { "SQLite" });
    let store = Store::connect(&url, 8).await.unwrap();
    store.migrate().await.unwrap();
    let sim = Simulator::new(SimOptions {
        seed: 3,
        actions,
        ..Default::default()
    });
    let t = Instant::now();
    load(&store, &sim).await;
    if let Store::Postgres(p) = &store {
        // What autovacuum does after such a load, done now rather than waited for.
        sqlx::query("ANALYZE").execute(p).await.unwrap();
    }
    println!(
        "replica: {actions} actions stored and projected in {:.1} s (PostgreSQL: and analyzed)",
        t.elapsed().as_secs_f64()
    );
    store.set_setting("phase", "serve").await.unwrap();
    let mut set: BTreeSet<Entry> = BTreeSet::new();
    for d in sim.truth_debtors() {
        match (&d.person.ico, &d.person.birth_number) {
            (Some(i), _) => set.insert(Entry {
                kind: Kind::Ico,
                key: i.clone(),
            }),
            (None, Some(r)) => set.insert(Entry {
                kind: Kind::Rc,
                key: r.clone(),
            }),
            _ => false,
        };
    }
    let real = set.len();
    let mut n = 0;
    while set.len() < entries {
        set.insert(Entry {
            kind: Kind::Ico,
            key: valid_ico(n),
        });
        n += 1;
    }
    let icos: Vec<String> = set
        .iter()
        .filter(|e| e.kind == Kind::Ico)
        .map(|e| e.key.clone())
        .collect();
    let t = Instant::now();
    watchlist::create(
        &store,
        NewList {
            name: "big".into(),
            roles: Roles::Debtor,
            webhook_url: None,
            secret: None,
            entries: set,
        },
        &watchlist::Policy {
            allow_private: true,
            allow_http_with_birth_numbers: true,
            proxy: None,
        },
    )
    .await
    .unwrap();
    println!(
        "list: {entries} entries ({real} debtors of the register) created in {:.2} s",
        t.elapsed().as_secs_f64()
    );
    // Its feed over the last half of the replica, as if it had been made then.
    let all = sim.truth_all();
    let from = all[all.len() / 2].id;
    let mut tx = Tx::single(&store).await.unwrap();
    tx.exec(
        "UPDATE watchlists SET created_watermark = $1, cursor = $1 WHERE name = 'big'",
        &[from.into()],
    )
    .await
    .unwrap();
    drop(tx);
    let until = all.last().unwrap().id;
    // The feed's plan: the list's entries drive (index probes into the parties), the
    // matched cases drive the timeline (its (case, action) index); never a scan of either.
    for drive in [watchlist::feed::Drive::List, watchlist::feed::Drive::Window] {
        let Store::Sqlite(pool) = &store else { break };
        println!("  plan driven by {drive:?}:");
        let sql = format!(
            "EXPLAIN QUERY PLAN {}",
            watchlist::feed::positions_sql(Roles::Debtor, drive, false)
        );
        let rows = sqlx::query(&sql)
            .bind("big")
            .bind(from)
            .bind(from)
            .bind(i64::MAX)
            .bind(from + 10_000)
            .bind(1001i64)
            .fetch_all(pool)
            .await
            .unwrap();
        use sqlx::Row;
        for r in rows {
            println!("  plan: {}", r.get::<String, _>(3));
        }
    }
    let t = Instant::now();
    let (mut after, mut events, mut pages) = (from, 0usize, 0usize);
    let mut worst = 0f64;
    loop {
        let p0 = Instant::now();
        let mut tx = Tx::begin_read(&store).await.unwrap();
        let page = watchlist::feed::page(
            &mut tx,
            "big",
            Roles::Debtor,
            from,
            after,
            until,
            1000,
            false,
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        worst = worst.max(p0.elapsed().as_secs_f64());
        events += page.events.len();
        pages += 1;
        match page.next {
            Some(n) => after = n,
            None => break,
        }
    }
    let feed_secs = t.elapsed().as_secs_f64();
    println!(
        "feed: {events} events over {} actions in {pages} pages of 1000: {feed_secs:.2} s ({:.0} ms a page, slowest {:.0} ms)",
        all.len() / 2,
        feed_secs * 1000.0 / pages as f64,
        worst * 1000.0
    );
    // The alternative without watchlists: one `/v1/events?ico=` request per IČO.
    let state = isir::read::ReadState::new(
        store.clone(),
        isir::read::ReadOptions {
            rate_per_second: 1_000_000,
            burst: 1_000_000,
            ..Default::default()
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(isir::http::run(listener, state, std::future::pending()));
    let http = reqwest::Client::new();
    let step = (icos.len() / sample).max(1);
    let picked: Vec<&String> = icos.iter().step_by(step).take(sample).collect();
    let t = Instant::now();
    let mut found = 0usize;
    for i in &picked {
        let r = http
            .get(format!("{base}/v1/events?ico={i}&after={from}&limit=1000"))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
        let v: serde_json::Value = r.json().await.unwrap();
        found += v["events"].as_array().map_or(0, |a| a.len());
    }
    let per = t.elapsed().as_secs_f64() / picked.len() as f64;
    let total = per * icos.len() as f64;
    println!(
        "one request per IČO: {} requests in {:.2} s ({:.2} ms each, {found} events); all {} IČOs: {:.0} s estimated; the list's feed is {:.0}x faster",
        picked.len(),
        per * picked.len() as f64,
        per * 1000.0,
        icos.len(),
        total,
        total / feed_secs
    );
}

/// The notifier's lag under a live stream: the register publishes `rate` actions a second
/// for `secs`; the daemon's parts poll every second, project, and deliver to a receiver
/// on loopback. Lag: from an action's publication to its delivery.
async fn live(rate: usize, secs: u64, drain: u64) {
    let (sim, url, _g) = isir::sim::spawn(SimOptions {
        seed: 9,
        actions: 5_000,
        page: 1000,
        daily_limit: None,
        per_minute_limit: None,
        ..Default::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut s = isir::config::Settings::default();
    s.source.url = url;
    s.database.url = format!("sqlite://{}", dir.path().join("l.db").display());
    s.budget.daily = 1_000_000;
    s.budget.per_minute = 1_000_000;
    s.poll.max_batches_per_tick = 1000;
    s.phase.initial = "project".into();
    let app = isir::app::App::build(s).await.unwrap();
    app.record_settings().await.unwrap();
    let mut poller = app.poller().unwrap();
    poller.poll_once().await;
    for n in projection::NAMES {
        projection::catch_up(&app.store, n, 5000).await.unwrap();
    }
    // Every debtor of the register, including those of cases yet to come.
    let ahead = Simulator::new(SimOptions {
        seed: 9,
        actions: 5_000 + rate * secs as usize + rate,
        ..Default::default()
    });
    let mut set = BTreeSet::new();
    for d in ahead.truth_debtors() {
        if let Some(i) = d.person.ico {
            set.insert(Entry {
                kind: Kind::Ico,
                key: i,
            });
        } else if let Some(r) = d.person.birth_number {
            set.insert(Entry {
                kind: Kind::Rc,
                key: r,
            });
        }
    }
    // The receiver: when each action arrived.
    let got: Arc<Mutex<Vec<(i64, Instant)>>> = Arc::default();
    let g2 = got.clone();
    let recv = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: axum::Json<serde_json::Value>| {
            let g = g2.clone();
            async move {
                let now = Instant::now();
                let mut g = g.lock().unwrap();
                for e in body["data"]["events"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                {
                    g.push((e["action_id"].as_i64().unwrap(), now));
                }
                "ok"
            }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, recv).await });
    watchlist::create(
        &app.store,
        NewList {
            name: "live".into(),
            roles: Roles::Debtor,
            webhook_url: Some(hook),
            secret: None,
            entries: set,
        },
        &watchlist::Policy {
            allow_private: true,
            allow_http_with_birth_numbers: true,
            proxy: None,
        },
    )
    .await
    .unwrap();
    let (stop, sd) = tokio::sync::watch::channel(false);
    let settings = isir::config::WatchSettings {
        allow_private_targets: true,
        allow_http_with_birth_numbers: true,
        every_ms: 1000,
        ..Default::default()
    };
    let notifier = tokio::spawn(watchlist::notify::run(
        app.store.clone(),
        watchlist::notify::NotifierOptions::from_settings(&settings, "bench"),
        sd.clone(),
    ));
    let projector = tokio::spawn(isir::projector::run(
        app.store.clone(),
        poller.stored_signal(),
        isir::projector::ProjectorOptions {
            chunk: 5000,
            debounce: Duration::from_millis(200),
            every: Duration::from_secs(1),
            analyze_every: Duration::from_secs(3600),
        },
        sd,
    ));
    // Publication: `rate` actions at the start of every second; when each ID appeared.
    let mut published: Vec<(i64, Instant)> = Vec::new();
    let mut head = sim.head_id().unwrap();
    let t0 = Instant::now();
    for i in 0..secs {
        tokio::time::sleep_until((t0 + Duration::from_secs(i)).into()).await;
        sim.publish(rate);
        let now = Instant::now();
        for a in sim.truth_after(head, usize::MAX) {
            published.push((a.id, now));
        }
        head = sim.head_id().unwrap();
        // The daemon's poll period, shortened to a second.
        poller.poll_once().await;
    }
    // Let the last ones through.
    for _ in 0..drain {
        poller.poll_once().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    stop.send(true).unwrap();
    let _ = notifier.await;
    let _ = projector.await;
    let at: std::collections::HashMap<i64, Instant> = published.into_iter().collect();
    let mut lags: Vec<f64> = got
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(id, when)| at.get(id).map(|p| when.duration_since(*p).as_secs_f64()))
        .collect();
    lags.sort_by(f64::total_cmp);
    if lags.is_empty() {
        println!("live: nothing delivered");
        return;
    }
    let q = |p: f64| lags[((lags.len() - 1) as f64 * p) as usize];
    println!(
        "live: {rate} actions/s for {secs} s, {} watched events delivered; lag from publication to delivery p50 {:.2} s, p95 {:.2} s, max {:.2} s (poll every 1 s, notifier every 1 s)",
        lags.len(),
        q(0.5),
        q(0.95),
        lags[lags.len() - 1]
    );
}

fn main() {
    let quick = std::env::args().all(|a| a != "--bench");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        if quick {
            scale(4_000, 2_000, 20, false).await;
            live(50, 2, 3).await;
        } else {
            if std::env::var("WATCH_BENCH_ONLY_PG").is_err() {
                scale(200_000, 100_000, 2_000, false).await;
            }
            scale(200_000, 100_000, 2_000, true).await;
            if std::env::var("WATCH_BENCH_ONLY_PG").is_ok() {
                return;
            }
            live(200, 60, 15).await;
        }
    });
}
