//! The database down under a running writer: between the writer and PostgreSQL sits a
//! TCP proxy that the test cuts (dropping every connection and refusing new ones) and
//! restores. While the database is unreachable a tick ends as a store error without
//! spending a request (by the simulator's own count) and without moving the
//! checkpoint; when it is back, the writer resumes at its checkpoint and the replica
//! ends equal to the source.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::Backend;
use isir::poller::TickOutcome;
use tokio::net::{TcpListener, TcpStream};

/// A proxy to `target` that can be cut: while cut, it drops the connections it carries
/// and closes new ones at once.
struct Proxy {
    addr: std::net::SocketAddr,
    up: Arc<AtomicBool>,
    generation: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Proxy {
    async fn start(target: std::net::SocketAddr) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let up = Arc::new(AtomicBool::new(true));
        let (gen_tx, gen_rx) = tokio::sync::watch::channel(0u64);
        let generation = Arc::new(gen_tx);
        let up2 = up.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = l.accept().await else {
                    return;
                };
                if !up2.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let mut cut = gen_rx.clone();
                cut.borrow_and_update();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Proxy {
            addr,
            up,
            generation,
        }
    }
    fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }
    fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_down_spends_nothing_and_resumes() {
    let (sim, url, _g) = common::sim(10_000, 1000, 71).await;
    let db = common::fresh_db(Backend::Postgres).await;
    // The same database, reached through the proxy.
    let proxy = Proxy::start("127.0.0.1:5432".parse().unwrap()).await;
    let via = db
        .url
        .replacen("127.0.0.1:5432", &proxy.addr.to_string(), 1);
    assert_ne!(via, db.url, "the test database is on 127.0.0.1:5432");
    let mut s = common::settings(&url, &db);
    s.database.url = via;
    s.poll.max_batches_per_tick = 3;
    let app = common::app(s).await;
    let mut p = app.poller().unwrap();
    let t = p.poll_once().await;
    assert_eq!(t.actions, 3000, "{t:?}");
    let cp = t.checkpoint;

    proxy.cut();
    let before = sim.stats().requests_total;
    for _ in 0..2 {
        let t = p.poll_once().await;
        eprintln!("while cut: {:?}", t.outcome);
        assert!(
            matches!(t.outcome, TickOutcome::StoreError { .. }),
            "{:?}",
            t.outcome
        );
        assert_eq!(t.requests, 0);
    }
    assert_eq!(
        sim.stats().requests_total,
        before,
        "no request is spent while the database is down"
    );
    proxy.restore();
    let direct = common::store(&db).await;
    assert_eq!(
        direct.checkpoint().await.unwrap(),
        cp,
        "the checkpoint did not move"
    );

    // Back: the writer resumes at its checkpoint and catches up.
    loop {
        let t = p.poll_once().await;
        eprintln!("after restore: {:?} {:?}", t.outcome, t.checkpoint);
        if t.checkpoint == sim.head_id() {
            break;
        }
        assert!(
            !matches!(t.outcome, TickOutcome::StoreError { .. }) || t.requests == 0,
            "{:?}",
            t.outcome
        );
    }
    let got = common::all_actions(&direct).await;
    assert!(
        got == sim.truth_all(),
        "replica equals source after the outage"
    );

    // Cut in the middle of a tick: the page in hand is not stored, the checkpoint stays
    // before it, and the next tick stores it.
    sim.publish(5000);
    let cut_after = {
        let proxy_up = proxy.up.clone();
        let g = proxy.generation.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(30)).await;
            proxy_up.store(false, Ordering::SeqCst);
            g.send_modify(|x| *x += 1);
        })
    };
    let t = p.poll_once().await;
    eprintln!("cut mid-tick: {:?}", t.outcome);
    cut_after.await.unwrap();
    proxy.restore();
    let stored_cp = direct.checkpoint().await.unwrap();
    assert_eq!(
        direct.count_actions().await.unwrap() as usize,
        sim.truth_all()
            .iter()
            .filter(|a| Some(a.id) <= stored_cp)
            .count(),
        "nothing beyond the checkpoint, nothing missing below it ({t:?})"
    );
    for _ in 0..20 {
        let t = p.poll_once().await;
        eprintln!("end: {:?} {:?}", t.outcome, t.checkpoint);
        if t.checkpoint == sim.head_id() {
            break;
        }
    }
    assert!(common::all_actions(&direct).await == sim.truth_all());
}
