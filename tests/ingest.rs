//! Ingestion on both back ends: replica equals source with the minimum of requests,
//! idempotence and order, fencing, leases, the durable budget, faults during a backfill.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{BOTH, Backend};
use isir::budget::Budget;
use isir::lease::{Acquire, Lease};
use isir::poller::TickOutcome;
use isir::sim::{FaultKind, FaultPlan};
use isir::source::parse::parse_data_response;
use isir::source::write::data_response;
use isir::source::{Gate, GateError, Operation, Page};
use isir::store::StoreError;

async fn backfill_equals_source(b: Backend) {
    let (sim, url, _g) = common::sim(50_000, 1000, 11).await;
    let db = common::fresh_db(b).await;
    let app = common::app(common::settings(&url, &db)).await;
    let mut p = app.poller().unwrap();
    let t1 = p.poll_once().await;
    assert_eq!(t1.outcome, TickOutcome::BatchLimit, "{t1:?}");
    assert_eq!((t1.pages, t1.requests), (20, 21), "head check + 20 pages");
    let t2 = p.poll_once().await;
    assert_eq!(t2.outcome, TickOutcome::BatchLimit);
    assert_eq!(
        (t2.pages, t2.requests),
        (20, 20),
        "the head check is not repeated within the hour"
    );
    let t3 = p.poll_once().await;
    assert_eq!(t3.outcome, TickOutcome::CaughtUp, "{t3:?}");
    assert_eq!(
        t3.pages, 10,
        "the page that reaches the known head ends the tick"
    );
    assert_eq!(common::all_actions(&app.store).await, sim.truth_all());
    assert_eq!(app.store.checkpoint().await.unwrap(), sim.head_id());
    // The minimum: one head check and one request per page; no extra empty page.
    assert_eq!(sim.stats().requests_total, 51);
    // An idle tick costs exactly one request.
    let t4 = p.poll_once().await;
    assert_eq!(
        (t4.outcome.clone(), t4.requests),
        (TickOutcome::CaughtUp, 1)
    );
    sim.publish(37);
    let t5 = p.poll_once().await;
    assert_eq!(
        (t5.outcome.clone(), t5.requests, t5.actions),
        (TickOutcome::CaughtUp, 1, 37),
        "a short page past the head ends the tick"
    );
    assert_eq!(sim.stats().requests_total, 53);
    assert_eq!(common::all_actions(&app.store).await, sim.truth_all());
    // The budget counted exactly what the simulator saw.
    assert_eq!(app.budget.usage().await.unwrap().used, 53);
}

#[tokio::test]
async fn replica_equals_source_sqlite() {
    backfill_equals_source(Backend::Sqlite).await;
}

#[tokio::test]
async fn replica_equals_source_postgres() {
    backfill_equals_source(Backend::Postgres).await;
}

fn page_of(sim: &isir::sim::Simulator, after: i64, n: usize) -> Page {
    let xml = data_response(&sim.truth_after(after, n));
    parse_data_response(xml.as_bytes(), after).unwrap()
}

#[tokio::test]
async fn idempotence_order_and_checkpoint_mismatch() {
    let sim = isir::sim::Simulator::new(isir::sim::SimOptions {
        actions: 300,
        ..Default::default()
    });
    for b in BOTH {
        let db = common::fresh_db(b).await;
        let store = common::store(&db).await;
        let e = store.register_epoch(1).await.unwrap();
        let p1 = page_of(&sim, -1, 100);
        assert_eq!(store.write_page(e, None, &p1).await.unwrap(), 100);
        let c1 = p1.last_id();
        // Replaying the same page: refused, nothing changes.
        assert!(matches!(
            store.write_page(e, None, &p1).await,
            Err(StoreError::CheckpointMismatch { .. })
        ));
        assert!(matches!(
            store.write_page(e, c1, &p1).await,
            Err(StoreError::OutOfOrder(_))
        ));
        assert_eq!(store.count_actions().await.unwrap(), 100);
        // A page that skips ahead does not follow the checkpoint.
        let p3 = page_of(&sim, sim.truth_all()[199].id, 50);
        assert!(matches!(
            store.write_page(e, c1, &p3).await,
            Err(StoreError::OutOfOrder(_))
        ));
        // Stating a wrong expected checkpoint.
        let p2 = page_of(&sim, c1.unwrap(), 100);
        assert!(matches!(
            store.write_page(e, Some(c1.unwrap() - 1), &p2).await,
            Err(StoreError::CheckpointMismatch { .. })
        ));
        assert_eq!(store.checkpoint().await.unwrap(), c1);
        // The right page goes in; an empty page changes nothing.
        assert_eq!(store.write_page(e, c1, &p2).await.unwrap(), 100);
        let empty = Page {
            after: p2.last_id().unwrap(),
            records: vec![],
            spoiled: vec![],
        };
        assert_eq!(store.write_page(e, p2.last_id(), &empty).await.unwrap(), 0);
        assert_eq!(store.checkpoint().await.unwrap(), p2.last_id());
        assert_eq!(
            common::all_actions(&store).await,
            sim.truth_after(-1, 200),
            "{b:?}"
        );
        // A lower epoch is fenced.
        store.register_epoch(5).await.unwrap();
        let p4 = page_of(&sim, p2.last_id().unwrap(), 10);
        assert!(matches!(
            store.write_page(4, p2.last_id(), &p4).await,
            Err(StoreError::Fenced {
                mine: 4,
                current: 5
            })
        ));
        assert_eq!(store.count_actions().await.unwrap(), 200);
        // The checkpoint moved back (an operator's repair): a page that holds stored
        // actions and new ones inserts only the new ones, and leaves the stored ones
        // as they are (on PostgreSQL a page that overlaps the replica does not take the
        // bulk path, which would refuse it).
        let truth = sim.truth_after(-1, 300);
        let back = truth[149].id;
        store.set_checkpoint(5, Some(back)).await.unwrap();
        let p5 = page_of(&sim, back, 100);
        assert_eq!(store.write_page(5, Some(back), &p5).await.unwrap(), 50);
        assert_eq!(store.checkpoint().await.unwrap(), Some(truth[249].id));
        // All of a page already stored: nothing inserted, the checkpoint moves.
        store.set_checkpoint(5, Some(back)).await.unwrap();
        assert_eq!(store.write_page(5, Some(back), &p5).await.unwrap(), 0);
        assert_eq!(store.checkpoint().await.unwrap(), Some(truth[249].id));
        // And the next page, none of it stored, goes in whole.
        let p6 = page_of(&sim, truth[249].id, 50);
        assert_eq!(
            store.write_page(5, Some(truth[249].id), &p6).await.unwrap(),
            50
        );
        assert_eq!(common::all_actions(&store).await, truth, "{b:?}");
    }
}

async fn lease_contract(mk: impl Fn(isir::store::Store, Duration) -> Lease, b: Backend) {
    let db = common::fresh_db(b).await;
    let store = common::store(&db).await;
    let ttl = Duration::from_millis(1500);
    let a = mk(store.clone(), ttl);
    let c = mk(store.clone(), ttl);
    assert_eq!(a.ttl(), ttl);
    let ttl_ms = ttl.as_millis() as i64;
    let before = isir::store::now_ms();
    let Acquire::Granted(ga) = a.acquire().await.unwrap() else {
        panic!()
    };
    // A grant runs one TTL from when it was made.
    assert!(
        ga.expires_at >= before + ttl_ms - 200 && ga.expires_at <= isir::store::now_ms() + ttl_ms,
        "{ga:?} from {before}"
    );
    // `lease show` names the holder, its epoch and when it expires.
    let info = c.show().await.unwrap();
    assert_eq!(info.holder.as_deref(), Some(a.holder()));
    assert_eq!(info.epoch, Some(ga.epoch));
    let e = info.expires_at.unwrap();
    assert!(
        e > isir::store::now_ms() && e <= isir::store::now_ms() + ttl_ms,
        "{info:?}"
    );
    // Exactly one holder.
    match c.acquire().await.unwrap() {
        Acquire::HeldBy { holder, expires_at } => {
            assert_eq!(holder, a.holder());
            let e = expires_at.unwrap();
            let now = isir::store::now_ms();
            assert!(e > now && e <= now + ttl_ms, "{e} at {now}");
        }
        other => panic!("{other:?}"),
    }
    // Re-acquiring as the holder keeps the epoch; renewal works.
    let Acquire::Granted(again) = a.acquire().await.unwrap() else {
        panic!()
    };
    assert_eq!(again.epoch, ga.epoch);
    assert!(a.renew(ga.epoch).await.unwrap());
    // The holder pauses past its TTL; another takes over with a higher epoch.
    tokio::time::sleep(ttl + Duration::from_millis(300)).await;
    // An expired lease has no holder; the last epoch is still told.
    let info = c.show().await.unwrap();
    assert_eq!(
        (info.holder.as_deref(), info.epoch, info.expires_at),
        (None, Some(ga.epoch), None),
        "{info:?}"
    );
    let Acquire::Granted(gc) = c.acquire().await.unwrap() else {
        panic!("expired lease must be free")
    };
    assert!(gc.epoch > ga.epoch);
    // The woken ex-holder can neither renew nor write.
    assert!(!a.renew(ga.epoch).await.unwrap());
    let sim = isir::sim::Simulator::new(isir::sim::SimOptions {
        actions: 10,
        ..Default::default()
    });
    let p = page_of(&sim, -1, 10);
    assert!(matches!(
        store.write_page(ga.epoch, None, &p).await,
        Err(StoreError::Fenced { .. })
    ));
    assert_eq!(store.write_page(gc.epoch, None, &p).await.unwrap(), 10);
    // Release by compare-and-delete: the ex-holder's release does nothing.
    assert!(!a.release(ga.epoch).await.unwrap());
    assert!(c.release(gc.epoch).await.unwrap());
    let Acquire::Granted(ga2) = a.acquire().await.unwrap() else {
        panic!()
    };
    assert!(ga2.epoch > gc.epoch);
    // An operator's forced release removes whoever holds it, and says whether one did.
    assert!(c.force_release().await.unwrap());
    assert_eq!(c.show().await.unwrap().holder, None);
    assert!(!c.force_release().await.unwrap());
    assert!(!a.renew(ga2.epoch).await.unwrap());
}

#[tokio::test]
async fn database_lease_contract() {
    for b in BOTH {
        lease_contract(|s, ttl| Lease::database("writer", s, ttl), b).await;
    }
}

#[tokio::test]
async fn redis_lease_contract() {
    for b in BOTH {
        let conn = Arc::new(isir::redis_conn::RedisConn::new(&common::redis_url()).unwrap());
        let key = common::redis_prefix();
        lease_contract(
            |s, ttl| Lease::redis(conn.clone(), &key, &format!("{key}:epoch"), s, ttl),
            b,
        )
        .await;
    }
}

/// Redis restarted empty: the next grant still gets an epoch above the store's, so the
/// old holder stays fenced and nobody is locked out.
#[tokio::test]
async fn redis_restart_empty_keeps_epochs_growing() {
    let mut redis = common::OwnRedis::start();
    let db = common::fresh_db(Backend::Sqlite).await;
    let store = common::store(&db).await;
    let conn = Arc::new(isir::redis_conn::RedisConn::new(&redis.url()).unwrap());
    let ttl = Duration::from_secs(60);
    let a = Lease::redis(conn.clone(), "l", "l:epoch", store.clone(), ttl);
    let b = Lease::redis(conn.clone(), "l", "l:epoch", store.clone(), ttl);
    let mut last = 0;
    for _ in 0..3 {
        let Acquire::Granted(g) = a.acquire().await.unwrap() else {
            panic!()
        };
        assert!(g.epoch > last);
        a.release(g.epoch).await.unwrap();
        last = g.epoch;
    }
    let Acquire::Granted(ga) = a.acquire().await.unwrap() else {
        panic!()
    };
    redis.restart_empty();
    // While Redis is gone and back, the connection is re-established.
    let mut gb = None;
    for _ in 0..50 {
        match b.acquire().await {
            Ok(Acquire::Granted(g)) => {
                gb = Some(g);
                break;
            }
            Ok(other) => panic!("{other:?}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let gb = gb.expect("a grant after the restart");
    assert!(
        gb.epoch > ga.epoch,
        "epoch {} after restart must exceed {}",
        gb.epoch,
        ga.epoch
    );
    let sim = isir::sim::Simulator::new(isir::sim::SimOptions {
        actions: 10,
        ..Default::default()
    });
    assert!(matches!(
        store
            .write_page(ga.epoch, None, &page_of(&sim, -1, 10))
            .await,
        Err(StoreError::Fenced { .. })
    ));
    assert_eq!(
        store
            .write_page(gb.epoch, None, &page_of(&sim, -1, 10))
            .await
            .unwrap(),
        10
    );
}

#[tokio::test]
async fn redis_down_stops_the_writer_safely() {
    let mut redis = common::OwnRedis::start();
    let (sim, url, _g) = common::sim(5000, 1000, 12).await;
    let db = common::fresh_db(Backend::Sqlite).await;
    let app = common::app(common::with_redis(
        common::settings(&url, &db),
        &redis.url(),
    ))
    .await;
    let mut p = app.poller().unwrap();
    assert_eq!(p.poll_once().await.outcome, TickOutcome::CaughtUp);
    sim.publish(100);
    redis.stop();
    let t = p.poll_once().await;
    assert!(matches!(t.outcome, TickOutcome::StoreError { .. }), "{t:?}");
    assert_eq!(t.requests, 0);
    assert_eq!(
        sim.stats().requests_total,
        6,
        "no request without the lease and the budget"
    );
    assert_eq!(
        app.store.checkpoint().await.unwrap(),
        Some(sim.truth_all()[4999].id)
    );
}

async fn budget_holds(mk: &dyn Fn() -> Budget) {
    // Two instances and a "restart" share one durable count.
    let a = mk();
    let b = mk();
    for i in 0..5 {
        let g = if i % 2 == 0 { &a } else { &b };
        g.acquire(Operation::AfterId).await.unwrap();
    }
    let restarted = mk();
    match restarted.acquire(Operation::LastId).await {
        Err(GateError::BudgetExhausted {
            used: 5,
            limit: 5,
            resets_at,
        }) => {
            assert!(chrono::DateTime::parse_from_rfc3339(&resets_at).is_ok());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(restarted.usage().await.unwrap().used, 5);
    assert_eq!(restarted.usage().await.unwrap().left, 0);
}

#[tokio::test]
async fn budget_daily_limit_is_durable_and_shared() {
    for b in BOTH {
        let db = common::fresh_db(b).await;
        let store = common::store(&db).await;
        budget_holds(&|| Budget::database(store.clone(), 5, 100)).await;
    }
}

/// One budget for every process of a replica, whatever its configuration: the daemon
/// with Redis and an operator's command without it spend the same count, and Redis
/// restarting empty does not raise it.
#[tokio::test]
async fn one_budget_with_redis_or_without() {
    let mut redis = common::OwnRedis::start();
    for b in BOTH {
        let db = common::fresh_db(b).await;
        let mut s = common::settings("http://127.0.0.1:9/", &db);
        s.budget.daily = 5;
        let with = common::app(common::with_redis(s.clone(), &redis.url())).await;
        let without = common::app(s.clone()).await;
        for i in 0..5 {
            let app = if i % 2 == 0 { &with } else { &without };
            app.budget.acquire(Operation::AfterId).await.unwrap();
        }
        for app in [&with, &without] {
            assert!(matches!(
                app.budget.acquire(Operation::AfterId).await,
                Err(GateError::BudgetExhausted { used: 5, .. })
            ));
        }
        redis.restart_empty();
        let again = common::app(common::with_redis(s.clone(), &redis.url())).await;
        assert!(matches!(
            again.budget.acquire(Operation::AfterId).await,
            Err(GateError::BudgetExhausted { used: 5, .. })
        ));
        assert_eq!(again.budget.usage().await.unwrap().used, 5);
    }
}

/// The counter unreachable: nothing is granted, so nothing is sent (fail closed).
#[tokio::test]
async fn budget_fails_closed_when_its_counter_is_unreachable() {
    for b in BOTH {
        let (sim, url, _g) = common::sim(2000, 1000, 15).await;
        let db = common::fresh_db(b).await;
        let app = common::app(common::settings(&url, &db)).await;
        let client = app.client().unwrap();
        app.store.close().await;
        assert!(matches!(
            app.budget.acquire(Operation::AfterId).await,
            Err(GateError::Unavailable(_))
        ));
        assert!(client.fetch_after(-1).await.is_err());
        assert_eq!(
            sim.stats().requests_total,
            0,
            "{b:?}: no request without a grant"
        );
    }
}

/// A binding budget under source faults: failed requests and their retries are counted
/// like any other, and the register's own count never passes the budget.
#[tokio::test]
async fn a_binding_budget_holds_under_faults() {
    for b in BOTH {
        let (sim, url, _g) = common::sim(60_000, 1000, 16).await;
        let db = common::fresh_db(b).await;
        let mut s = common::settings(&url, &db);
        s.budget.daily = 17;
        s.source.timeout_secs = 1;
        sim.set_faults(FaultPlan::random(
            0.3,
            vec![FaultKind::Http500, FaultKind::Reset, FaultKind::Truncate],
            7,
        ));
        for _ in 0..8 {
            let app = common::app(s.clone()).await;
            let mut p = app.poller().unwrap();
            p.poll_once().await;
            p.release().await;
        }
        let app = common::app(s.clone()).await;
        assert_eq!(
            sim.stats().requests_total,
            17,
            "{b:?}: the register's count"
        );
        assert_eq!(app.budget.usage().await.unwrap().used, 17);
        // What was stored is a prefix of the source, in order.
        let stored = common::all_actions(&app.store).await;
        assert_eq!(stored[..], sim.truth_all()[..stored.len()]);
    }
}

#[tokio::test]
async fn budget_minute_window() {
    let db = common::fresh_db(Backend::Sqlite).await;
    let store = common::store(&db).await;
    let a = Budget::database(store.clone(), 100, 3).max_wait(Duration::ZERO);
    for _ in 0..3 {
        a.acquire(Operation::AfterId).await.unwrap();
    }
    // A restarted process (a new in-process limiter) still sees the window.
    let b = Budget::database(store.clone(), 100, 3).max_wait(Duration::ZERO);
    match b.acquire(Operation::AfterId).await {
        Err(GateError::RateLimited { retry_after }) => {
            // Counted over 60 s plus the margin for the time to reach the register,
            // which counts arrivals: a grant at the window's edge cannot arrive inside
            // the next minute with 3 more.
            assert!(
                retry_after > Duration::from_secs(60) && retry_after <= Duration::from_secs(66),
                "{retry_after:?}"
            )
        }
        other => panic!("{other:?}"),
    }
    let none = Budget::database(store.clone(), 100, 3)
        .margin(Duration::ZERO)
        .max_wait(Duration::ZERO);
    match none.acquire(Operation::AfterId).await {
        Err(GateError::RateLimited { retry_after }) => {
            assert!(retry_after <= Duration::from_secs(61), "{retry_after:?}")
        }
        other => panic!("{other:?}"),
    }
    // A margin set by hand is added to the 60 s, not taken from them.
    let wide = Budget::database(store.clone(), 100, 3)
        .margin(Duration::from_secs(20))
        .max_wait(Duration::ZERO);
    match wide.acquire(Operation::AfterId).await {
        Err(GateError::RateLimited { retry_after }) => assert!(
            retry_after > Duration::from_secs(75) && retry_after <= Duration::from_secs(81),
            "{retry_after:?}"
        ),
        other => panic!("{other:?}"),
    }
}

/// A full minute window that frees up within `max_wait` is waited out, and the request
/// granted; one that does not is refused at once with the wait it would need. The
/// window's requests are aged by hand (the register counts arrivals over 60 s).
#[tokio::test]
async fn a_budget_waits_out_a_full_minute_within_its_max_wait() {
    let db = common::fresh_db(Backend::Sqlite).await;
    let store = common::store(&db).await;
    // Each budget is another process: its own in-process limiter, the durable count.
    let budget = |wait: u64| {
        Budget::database(store.clone(), 100, 3)
            .margin(Duration::ZERO)
            .max_wait(Duration::from_secs(wait))
    };
    let first = budget(0);
    for _ in 0..3 {
        first.acquire(Operation::AfterId).await.unwrap();
    }
    // The window is full for a whole minute: a process that may wait 10 s does not
    // sleep in vain, it is refused at once with the wait it would need.
    let t0 = std::time::Instant::now();
    match budget(10).acquire(Operation::AfterId).await {
        Err(GateError::RateLimited { retry_after }) => {
            assert!(retry_after > Duration::from_secs(55), "{retry_after:?}")
        }
        other => panic!("{other:?}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    // The three were sent 59 s ago: the window frees up in about a second, which a
    // process with room to wait waits out.
    let isir::store::Store::Sqlite(pool) = &store else {
        unreachable!()
    };
    sqlx::query("UPDATE budget_log SET at = at - 59000")
        .execute(pool)
        .await
        .unwrap();
    let t0 = std::time::Instant::now();
    let patient = budget(10);
    patient.acquire(Operation::AfterId).await.unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(500),
        "granted after {:?}: it did not wait for the window",
        t0.elapsed()
    );
    assert_eq!(patient.usage().await.unwrap().used, 4);
}

/// The simulator itself counts: a poller with a budget of 7 sends exactly 7 requests,
/// across ticks and restarts, and then stops with the reset time.
#[tokio::test]
async fn budget_holds_by_the_simulators_count() {
    for b in BOTH {
        let (sim, url, _g) = common::sim(50_000, 1000, 13).await;
        let db = common::fresh_db(b).await;
        let mut s = common::settings(&url, &db);
        s.budget.daily = 7;
        let mut spent = 0;
        for _ in 0..4 {
            let app = common::app(s.clone()).await;
            let mut p = app.poller().unwrap();
            let t = p.poll_once().await;
            p.release().await;
            if let TickOutcome::BudgetSpent { resets_at } = &t.outcome {
                // The reset is the next day's start, in the future, as RFC 3339.
                let at = chrono::DateTime::parse_from_rfc3339(resets_at)
                    .unwrap_or_else(|e| panic!("{resets_at:?}: {e}"))
                    .with_timezone(&chrono::Utc);
                assert!(at > chrono::Utc::now(), "{resets_at}");
                assert!(
                    at - chrono::Utc::now() <= chrono::Duration::hours(25),
                    "{resets_at}"
                );
                spent += 1;
            }
        }
        // The first tick spends the 7 requests; every later one stops on the budget
        // before sending anything.
        assert!(spent >= 3, "{b:?}: {spent} ticks ended on the spent budget");
        assert_eq!(sim.stats().requests_total, 7, "{b:?}");
        let app = common::app(s.clone()).await;
        assert_eq!(
            app.store.count_actions().await.unwrap(),
            6000,
            "1 head check + 6 pages"
        );
    }
}

/// Each fault kind during a backfill: the right outcome, a correct checkpoint, and after
/// the fault the replica equals the source.
#[tokio::test]
async fn every_fault_kind_during_a_backfill() {
    for b in BOTH {
        for kind in FaultKind::ALL {
            let (sim, url, _g) = common::sim(5000, 1000, 14).await;
            let db = common::fresh_db(b).await;
            let mut s = common::settings(&url, &db);
            s.source.timeout_secs = 1;
            let app = common::app(s).await;
            // Request 1 is the head check; request 4 is the third page.
            sim.set_faults(FaultPlan::none().at(4, kind));
            let mut p = app.poller().unwrap();
            let t = p.poll_once().await;
            let third_page_after = sim.truth_all()[1999].id;
            match kind {
                FaultKind::Http500 | FaultKind::Truncate | FaultKind::Reset | FaultKind::Slow => {
                    assert_eq!(
                        t.outcome,
                        TickOutcome::CaughtUp,
                        "{kind:?}: retried within the tick"
                    );
                    assert_eq!(t.requests, 7, "{kind:?}: the retry is counted");
                }
                FaultKind::SoapFault | FaultKind::Chyba | FaultKind::Garbage => {
                    match &t.outcome {
                        TickOutcome::SourceError { after, class, .. } => {
                            assert_eq!(*after, third_page_after, "{kind:?}");
                            assert!(["fault", "refused", "invalid"].contains(&class.as_str()));
                        }
                        other => panic!("{kind:?}: {other:?}"),
                    }
                    assert_eq!(
                        app.store.checkpoint().await.unwrap(),
                        Some(third_page_after)
                    );
                    assert_eq!(app.store.count_actions().await.unwrap(), 2000);
                    assert_eq!(p.poll_once().await.outcome, TickOutcome::CaughtUp);
                }
            }
            assert_eq!(
                common::all_actions(&app.store).await,
                sim.truth_all(),
                "{kind:?} on {b:?}"
            );
            assert_eq!(
                app.budget.usage().await.unwrap().used,
                sim.stats().requests_total,
                "{kind:?}"
            );
        }
    }
}

#[tokio::test]
async fn retries_are_bounded() {
    let (sim, url, _g) = common::sim(3000, 1000, 15).await;
    let db = common::fresh_db(Backend::Sqlite).await;
    let mut s = common::settings(&url, &db);
    s.source.max_retries = 2;
    let app = common::app(s).await;
    sim.set_faults(FaultPlan::random(1.0, vec![FaultKind::Http500], 0));
    let mut p = app.poller().unwrap();
    let t = p.poll_once().await;
    assert!(
        matches!(t.outcome, TickOutcome::SourceError { ref class, .. } if class == "retryable"),
        "{t:?}"
    );
    assert_eq!(t.requests, 4, "head check + first try + 2 retries");
    assert_eq!(sim.stats().requests_total, 4);
    assert_eq!(app.store.checkpoint().await.unwrap(), None);
}

#[tokio::test]
async fn a_second_poller_does_not_spend_requests() {
    let (sim, url, _g) = common::sim(3000, 1000, 16).await;
    let db = common::fresh_db(Backend::Postgres).await;
    let s = common::with_redis(common::settings(&url, &db), &common::redis_url());
    let a = common::app(s.clone()).await;
    let b = common::app(s).await;
    let mut pa = a.poller().unwrap();
    let mut pb = b.poller().unwrap();
    assert_eq!(pa.poll_once().await.outcome, TickOutcome::CaughtUp);
    let before = sim.stats().requests_total;
    let t = pb.poll_once().await;
    assert!(
        matches!(t.outcome, TickOutcome::LeaseNotHeld { ref holder, .. } if holder == a.lease.holder()),
        "{t:?}"
    );
    assert_eq!(sim.stats().requests_total, before);
    pa.release().await;
    assert_eq!(pb.poll_once().await.outcome, TickOutcome::CaughtUp);
    assert_eq!(common::all_actions(&b.store).await, sim.truth_all());
}

#[tokio::test]
async fn phase_off_spends_nothing() {
    let (sim, url, _g) = common::sim(100, 1000, 17).await;
    let db = common::fresh_db(Backend::Sqlite).await;
    let mut s = common::settings(&url, &db);
    s.phase.initial = "off".into();
    let app = common::app(s).await;
    let t = app.poller().unwrap().poll_once().await;
    assert!(matches!(t.outcome, TickOutcome::Disabled { .. }));
    assert_eq!(sim.stats().requests_total, 0);
}

#[tokio::test]
async fn start_id_backfills_from_anywhere() {
    let (sim, url, _g) = common::sim(4000, 1000, 18).await;
    let db = common::fresh_db(Backend::Sqlite).await;
    let mut s = common::settings(&url, &db);
    let from = sim.truth_all()[2500].id;
    s.poll.start_id = from;
    let app = common::app(s).await;
    assert_eq!(
        app.poller().unwrap().poll_once().await.outcome,
        TickOutcome::CaughtUp
    );
    assert_eq!(
        common::all_actions(&app.store).await,
        sim.truth_after(from, usize::MAX)
    );
}

/// A SQLite replica written under the first schema (`actions` WITHOUT ROWID) keeps every
/// action, its checkpoint and its index through the migration to the rowid table, and
/// the writer goes on after it.
#[tokio::test]
async fn sqlite_upgrade_to_the_rowid_table_keeps_the_replica() {
    let sim = isir::sim::Simulator::new(isir::sim::SimOptions {
        actions: 300,
        ..Default::default()
    });
    let db = common::fresh_db(Backend::Sqlite).await;
    let store = isir::store::Store::connect(&db.url, 2).await.unwrap();
    let isir::store::Store::Sqlite(pool) = &store else {
        unreachable!()
    };
    let all = sqlx::migrate!("migrations/sqlite");
    let first_two = sqlx::migrate::Migrator {
        migrations: all.migrations[..2].to_vec().into(),
        ..sqlx::migrate::Migrator::DEFAULT
    };
    first_two.run(pool).await.unwrap();
    let table_sql = || async {
        sqlx::query_scalar::<_, String>(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'actions'",
        )
        .fetch_one(pool)
        .await
        .unwrap()
    };
    assert!(table_sql().await.contains("WITHOUT ROWID"));
    let p1 = page_of(&sim, -1, 200);
    // Written as that release wrote it: the source's fields, the checkpoint. (This
    // release's write reads tables that schema does not have yet.)
    let old: Vec<_> = p1.actions().cloned().collect();
    common::write_as_previous_release(&store, &old).await;

    store.migrate().await.unwrap();
    let e = store.register_epoch(1).await.unwrap();
    let sql = table_sql().await;
    assert!(
        !sql.contains("WITHOUT ROWID") && sql.contains("INTEGER PRIMARY KEY"),
        "{sql}"
    );
    assert_eq!(
        common::all_actions(&store).await,
        p1.actions().cloned().collect::<Vec<_>>()
    );
    assert_eq!(store.checkpoint().await.unwrap(), p1.last_id());
    let index: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM pragma_index_list('actions') WHERE name = 'actions_case'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(index, 1, "the actions_case index is there again");
    // The writer resumes after the upgrade, and the ID is still the one key.
    let p2 = page_of(&sim, p1.last_id().unwrap(), 100);
    store.write_page(e, p1.last_id(), &p2).await.unwrap();
    assert_eq!(store.count_actions().await.unwrap(), 300);
    let dup = sqlx::query(
        "INSERT INTO actions SELECT * FROM actions WHERE id = (SELECT MIN(id) FROM actions)",
    )
    .execute(pool)
    .await;
    assert!(
        dup.is_err(),
        "a second row with the same action ID is refused"
    );
}

/// Epochs are unique per grant: a new grant must claim an epoch above every one the
/// store has seen, so an epoch registered already cannot be claimed again.
#[tokio::test]
async fn an_epoch_is_claimed_once() {
    for b in BOTH {
        let db = common::fresh_db(b).await;
        let store = common::store(&db).await;
        let before = store.claim_epoch(5).await.unwrap();
        assert!(before < 5, "the first claim of 5 holds");
        assert_eq!(
            store.claim_epoch(5).await.unwrap(),
            5,
            "a second claim of 5 is refused"
        );
        assert!(store.claim_epoch(4).await.unwrap() >= 5);
        assert!(store.claim_epoch(6).await.unwrap() < 6);
    }
}

/// A holder whose epoch the store has overtaken (a snapshot restore, a grant Redis
/// forgot) notices at its next renewal or acquisition and takes a new grant above it,
/// within one tick; it never renews the stale epoch forever.
#[tokio::test]
async fn an_overtaken_holder_takes_a_new_grant() {
    let conn = Arc::new(isir::redis_conn::RedisConn::new(&common::redis_url()).unwrap());
    for b in BOTH {
        let key = common::redis_prefix();
        let mk: [Box<dyn Fn(isir::store::Store) -> Lease>; 2] = [
            Box::new(|s| Lease::database("writer", s, Duration::from_secs(60))),
            Box::new(|s| {
                Lease::redis(
                    conn.clone(),
                    &key,
                    &format!("{key}:epoch"),
                    s,
                    Duration::from_secs(60),
                )
            }),
        ];
        for mk in &mk {
            let db = common::fresh_db(b).await;
            let store = common::store(&db).await;
            let a = mk(store.clone());
            let Acquire::Granted(g) = a.acquire().await.unwrap() else {
                panic!()
            };
            store.register_epoch(g.epoch + 5).await.unwrap();
            let Acquire::Granted(g2) = a.acquire().await.unwrap() else {
                panic!("the holder itself takes a new grant")
            };
            assert!(g2.epoch > g.epoch + 5, "{} after {}", g2.epoch, g.epoch + 5);
            assert_eq!(store.writer_state().await.unwrap().epoch, g2.epoch);
        }
    }
}

/// The database lease does not renew an epoch the store has overtaken.
#[tokio::test]
async fn the_database_lease_does_not_renew_an_overtaken_epoch() {
    for b in BOTH {
        let db = common::fresh_db(b).await;
        let store = common::store(&db).await;
        let a = Lease::database("writer", store.clone(), Duration::from_secs(60));
        let Acquire::Granted(g) = a.acquire().await.unwrap() else {
            panic!()
        };
        assert!(a.renew(g.epoch).await.unwrap());
        store.register_epoch(g.epoch + 1).await.unwrap();
        assert!(!a.renew(g.epoch).await.unwrap(), "{b:?}");
    }
}

/// Fencing that can fail: the holder is cut off while a page request is in flight (a
/// slow answer), another writer takes the lease and advances; when the answer comes,
/// the old holder's commit is refused by the store's epoch check (the `Fenced`
/// outcome), and nothing of its stale epoch lands. Without the epoch check the store
/// would answer a checkpoint mismatch instead, and this test fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_cut_off_mid_request_is_fenced() {
    for b in BOTH {
        let (sim, url, _g) = isir::sim::spawn(isir::sim::SimOptions {
            seed: 24,
            actions: 5_000,
            page: 100,
            slow: Duration::from_secs(3),
            ..Default::default()
        })
        .await
        .unwrap();
        let db = common::fresh_db(b).await;
        let mut s = common::settings(&url, &db);
        s.source.timeout_secs = 20;
        s.poll.max_batches_per_tick = 5;
        let a = common::app(s.clone()).await;
        // Request 1: the head; 2: the first page; 3: the second page, answered slowly.
        sim.set_faults(FaultPlan::none().at(3, FaultKind::Slow));
        let mut pa = a.poller().unwrap();
        let ta = tokio::spawn(async move { pa.poll_once().await });
        let t0 = std::time::Instant::now();
        while sim.stats().requests_total < 3 {
            assert!(t0.elapsed() < Duration::from_secs(10));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let epoch_a = a.store.writer_state().await.unwrap().epoch;
        let cp_a = a.store.checkpoint().await.unwrap();
        assert_eq!(
            cp_a,
            Some(sim.truth_all()[99].id),
            "{b:?}: A stored its first page"
        );
        // A is cut off (as a pause past the TTL would): its lease goes to B, who advances.
        a.store.lease_force_release(&s.lease.key).await.unwrap();
        let bapp = common::app(s.clone()).await;
        let tb = bapp.poller().unwrap().poll_once().await;
        assert!(tb.pages > 0, "{b:?}: B advanced: {tb:?}");
        let epoch_b = bapp.store.writer_state().await.unwrap().epoch;
        assert!(epoch_b > epoch_a);
        let cp_b = bapp.store.checkpoint().await.unwrap();
        // A's answer comes; its commit is refused.
        let t = ta.await.unwrap();
        match &t.outcome {
            TickOutcome::LeaseLost { reason } => {
                assert!(reason.starts_with("fenced"), "{b:?}: {reason}")
            }
            other => panic!("{b:?}: A's stale commit must be fenced, not {other:?}"),
        }
        assert_eq!(bapp.store.checkpoint().await.unwrap(), cp_b, "{b:?}");
        let stale = common::texts(
            &bapp.store,
            "SELECT CAST(COUNT(*) AS TEXT) FROM actions WHERE epoch = $1 AND id > $2",
            &[epoch_a.into(), cp_a.unwrap().into()],
        )
        .await;
        assert_eq!(
            stale,
            vec!["0".to_string()],
            "{b:?}: nothing of the stale epoch landed"
        );
        let stored = common::all_actions(&bapp.store).await;
        assert_eq!(stored[..], sim.truth_all()[..stored.len()]);
    }
}

/// A move by hand reports where the checkpoint was (the head the replica reached, from
/// the simulator's truth) and where it put it, and the store's checkpoint is then that.
#[tokio::test]
async fn a_checkpoint_set_by_hand_reports_before_and_after() {
    let (sim, url, _g) = common::sim(2_500, 1000, 41).await;
    let db = common::fresh_db(Backend::Sqlite).await;
    let s = common::settings(&url, &db);
    let app = common::app(s.clone()).await;
    let mut poller = app.poller().unwrap();
    poller.poll_once().await;
    // The daemon stops first, giving the lease back (or a move by hand is refused).
    poller.release().await;
    let head = sim.head_id().unwrap();
    assert_eq!(
        isir::poller::by_hand::get(&app.store).await.unwrap(),
        Some(head)
    );
    let (lease, _, _) = isir::app::App::lease_and_budget(&s, &app.store).unwrap();
    let moved = isir::poller::by_hand::set_by_hand(&app.store, &lease, Some(head - 700), "test")
        .await
        .unwrap();
    assert_eq!(
        moved,
        isir::poller::by_hand::SetByHand::Set {
            before: Some(head),
            after: Some(head - 700)
        }
    );
    assert_eq!(
        isir::poller::by_hand::get(&app.store).await.unwrap(),
        Some(head - 700)
    );
}

/// A holder's identity is what `lease show` and the status page tell an operator: this
/// host's name, the process ID and eight lowercase letters that tell two processes of one
/// PID namespace apart (never `|`, the separator of the Redis lease's value).
#[test]
fn a_holder_identity_names_host_process_and_a_random_suffix() {
    let a = isir::lease::holder_identity();
    let b = isir::lease::holder_identity();
    let host = hostname::get().unwrap().to_string_lossy().into_owned();
    for id in [&a, &b] {
        let rest = id
            .strip_prefix(&format!("{host}:{}:", std::process::id()))
            .unwrap_or_else(|| panic!("{id}"));
        assert_eq!(rest.len(), 8, "{id}");
        assert!(rest.chars().all(|c| c.is_ascii_lowercase()), "{id}");
    }
    assert_ne!(a, b, "two identities in one process differ");
}

/// Two grants never share an epoch, even when another grant claims the very epoch Redis
/// handed out between the lease reading the store's epoch and claiming its own (a
/// restore, or a second Redis after a fail-over): the lease gives that epoch back and
/// takes one above. The race is made certain with a row lock on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_epoch_is_not_granted_twice() {
    let db = common::fresh_db(Backend::Postgres).await;
    let store = common::store(&db).await;
    let conn = Arc::new(isir::redis_conn::RedisConn::new(&common::redis_url()).unwrap());
    let key = common::redis_prefix();
    let lease = Lease::redis(
        conn,
        &key,
        &format!("{key}:epoch"),
        store.clone(),
        Duration::from_secs(60),
    );
    let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
    let mut other = pool.begin().await.unwrap();
    sqlx::query("SELECT epoch FROM writer_state WHERE singleton = 1 FOR UPDATE")
        .execute(&mut *other)
        .await
        .unwrap();
    // The lease reads epoch 0, Redis gives it 1, and its claim waits on the row.
    let task = tokio::spawn(async move { lease.acquire().await.unwrap() });
    let mut waiting = false;
    for _ in 0..100 {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        if n > 0 {
            waiting = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(waiting, "the lease's claim never waited on the row");
    // Meanwhile another grant claims epoch 1.
    sqlx::query("UPDATE writer_state SET epoch = 1 WHERE singleton = 1")
        .execute(&mut *other)
        .await
        .unwrap();
    other.commit().await.unwrap();
    let Acquire::Granted(g) = task.await.unwrap() else {
        panic!("the lease is free in Redis")
    };
    assert!(g.epoch > 1, "epoch {} was already claimed", g.epoch);
    assert_eq!(store.writer_state().await.unwrap().epoch, g.epoch);
}

/// A source whose newest ID is below the checkpoint (a restarted simulator, another
/// register at `source.url`) is never called caught up: the tick ends `source_behind`
/// after the one head request, with no page request, and the checkpoint stays. A new
/// poller reads the head on its first tick, though the stored head is fresh; while the
/// source stays behind, every tick reads it again; the right source again, and the feed
/// goes on. Heads and requests from the simulators' own truth and counts (issue 35).
#[tokio::test]
async fn a_source_behind_the_checkpoint_is_never_caught_up() {
    let (big, big_url, _g1) = common::sim(2_500, 1000, 41).await;
    let (small, small_url, _g2) = common::sim(300, 1000, 41).await;
    let db = common::fresh_db(Backend::Sqlite).await;
    let right = common::app(common::settings(&big_url, &db)).await;
    let mut p = right.poller().unwrap();
    while p.poll_once().await.outcome != TickOutcome::CaughtUp {}
    p.release().await;
    let cp = big.truth_all().last().unwrap().id;
    let head = small.truth_all().last().unwrap().id;
    assert!(head < cp, "the small register must end below the big one");
    assert_eq!(right.store.checkpoint().await.unwrap(), Some(cp));

    // The wrong source, within poll.head_check_secs of the last head read.
    let wrong = common::app(common::settings(&small_url, &db)).await;
    let mut w = wrong.poller().unwrap();
    for tick in 1..=2u64 {
        let t = w.poll_once().await;
        assert_eq!(
            t.outcome,
            TickOutcome::SourceBehind {
                head,
                checkpoint: cp
            },
            "tick {tick}"
        );
        let st = small.stats();
        assert_eq!(st.by_operation.get("last_id"), Some(&tick), "tick {tick}");
        assert_eq!(st.by_operation.get("after_id"), None, "a page was asked");
        assert_eq!(wrong.store.checkpoint().await.unwrap(), Some(cp));
    }
    let s = isir::status::collect(&wrong.status_source()).await.unwrap();
    assert_eq!(s.source_behind_ids, Some(cp - head));
    assert_eq!(s.lag_ids, None, "a lag of 0 would read as caught up");
    assert_eq!(s.progress, None);
    assert_eq!(s.backfill_eta, None);
    let text = s.render_text();
    assert!(text.contains("SOURCE BEHIND"), "{text}");
    assert!(!text.contains("caught up"), "{text}");
    let page = isir::web::status_page::render(&s);
    assert!(page.contains("id=\"source-behind\""), "{page}");
    assert_eq!(
        wrong.store.recent_ticks(1).await.unwrap()[0].outcome,
        "source_behind"
    );
    w.release().await;

    // The right source again: one head read, one empty page, caught up.
    let before = big.stats().requests_total;
    let mut p = right.poller().unwrap();
    assert_eq!(p.poll_once().await.outcome, TickOutcome::CaughtUp);
    assert_eq!(big.stats().requests_total - before, 2);
    let s = isir::status::collect(&right.status_source()).await.unwrap();
    assert_eq!(s.source_behind_ids, None);
    assert_eq!(s.lag_ids, Some(0));
}
