//! Where webhooks go, probed as an attacker would (OWASP's SSRF prevention cheat sheet):
//! spellings of internal hosts the WHATWG parser reads as loopback, refused at
//! `isir watch add`, at `isir watch set`, on the admin routes and at delivery (a list
//! stored with such a URL must not reach a loopback listener that counts connections);
//! a daemon with `HTTP_PROXY`/`HTTPS_PROXY`/`ALL_PROXY` in its environment that never
//! connects to that proxy, and an explicit `watch.proxy` that is used; birth numbers only
//! over https; and an erasure (§ 425) applied while a receiver fails, after which no
//! request carries the erased debtor's match. Both back ends.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Backend;
use isir::store::sql::Tx;
use isir::watchlist::{self, Entry, Kind, NewList, Policy, Roles};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SEED: u64 = 91;

// ---------------------------------------------------------------------------------------
// A loopback listener that counts its connections and answers each HTTP request with
// `status`, recording the request line and body.

struct Listener {
    addr: SocketAddr,
    conns: Arc<AtomicUsize>,
    /// Head (request line and headers) and body of every request, in order of arrival.
    got: Arc<Mutex<Vec<(String, String)>>>,
    status: Arc<AtomicU16>,
}

impl Listener {
    async fn start(bind: &str) -> Listener {
        let l = tokio::net::TcpListener::bind(bind).await.unwrap();
        let me = Listener {
            addr: l.local_addr().unwrap(),
            conns: Arc::default(),
            got: Arc::default(),
            status: Arc::new(AtomicU16::new(200)),
        };
        let (conns, got, status) = (me.conns.clone(), me.got.clone(), me.status.clone());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                conns.fetch_add(1, Ordering::SeqCst);
                let (got, status) = (got.clone(), status.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 8192];
                    let head_end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                    let len: usize = head
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse().ok())?
                        })
                        .unwrap_or(0);
                    while buf.len() < head_end + len {
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let body = String::from_utf8_lossy(&buf[head_end..]).to_string();
                    got.lock().unwrap().push((head, body));
                    let st = status.load(Ordering::SeqCst);
                    let answer = format!(
                        "HTTP/1.1 {st} X\r\ncontent-length: 0\r\nretry-after: 1\r\nconnection: close\r\n\r\n"
                    );
                    let _ = s.write_all(answer.as_bytes()).await;
                    let _ = s.shutdown().await;
                });
            }
        });
        me
    }

    fn port(&self) -> u16 {
        self.addr.port()
    }

    fn lines(&self) -> Vec<String> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .map(|(h, _)| h.lines().next().unwrap_or_default().to_string())
            .collect()
    }

    fn bodies(&self) -> Vec<String> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .map(|(_, b)| b.clone())
            .collect()
    }
}

/// Loopback, private, documentation and Teredo/6to4/NAT64 spellings, each with the
/// listener's port: every one must be refused without `watch.allow_private_targets`.
/// The last is this machine's own name, which resolves to one of its internal addresses:
/// only a check of the resolved addresses refuses it.
fn spellings(port: u16) -> Vec<String> {
    let own = hostname::get().unwrap().to_string_lossy().to_string();
    [
        "http://127.0.0.1:{port}/hook",
        "http://127.0.0.1:{port}\\.x.example/hook",
        "http://%31%32%37.0.0.1:{port}/hook",
        "http://\u{ff11}\u{ff12}\u{ff17}.0.0.1:{port}/hook",
        "http://0x7f.1:{port}/hook",
        "http://2130706433:{port}/hook",
        "http://0177.0.0.1:{port}/hook",
        "http://127.0.0.1.:{port}/hook",
        "http://[::ffff:127.0.0.1]:{port}/hook",
        "http://[::7f00:1]:{port}/hook",
        "http://[64:ff9b::7f00:1]:{port}/hook",
        "http://[64:ff9b:1::808:808]:{port}/hook",
        "http://[fec0::1]:{port}/hook",
        "http://[2002:7f00:1::1]:{port}/hook",
        "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]:{port}/hook",
        "http://[2001:db8::1]:{port}/hook",
        "http://198.18.0.1:{port}/hook",
        "http://localhost:{port}/hook",
        "http://localhost.:{port}/hook",
        "http://LocalHost:{port}/hook",
        "http://foo.localhost:{port}/hook",
        "http://{own}:{port}/hook",
    ]
    .iter()
    .map(|s| {
        s.replace("{port}", &port.to_string())
            .replace("{own}", &own)
    })
    .collect()
}

/// The machine's own name resolves to an internal address here (else the last
/// spelling proves nothing).
async fn own_name_is_internal() {
    let own = hostname::get().unwrap().to_string_lossy().to_string();
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((own.as_str(), 0))
        .await
        .unwrap_or_else(|e| panic!("this host's name {own} must resolve: {e}"))
        .collect();
    assert!(
        addrs
            .iter()
            .any(|a| watchlist::target::internal(a.ip()).is_some()),
        "{own} resolves to {addrs:?}: no internal address to test the resolver with"
    );
}

async fn exec(store: &isir::store::Store, sql: &str, binds: &[isir::store::sql::Val]) {
    let mut tx = Tx::single(store).await.unwrap();
    tx.exec(sql, binds).await.unwrap();
}

/// A stored list whose feed starts at the beginning, with `url` written straight into
/// the table (as an older version, or a setting changed since, left it).
async fn stored_list(store: &isir::store::Store, name: &str, entries: BTreeSet<Entry>, url: &str) {
    watchlist::create(
        store,
        NewList {
            name: name.into(),
            roles: Roles::Debtor,
            webhook_url: None,
            secret: Some(watchlist::new_secret()),
            entries,
        },
        &Policy::default(),
    )
    .await
    .unwrap();
    exec(
        store,
        "UPDATE watchlists SET webhook_url = $2, created_watermark = -1, cursor = -1 WHERE name = $1",
        &[name.into(), url.into()],
    )
    .await;
}

/// A simulated register of 1 500 actions stored and projected, in the `serve` phase.
async fn fixture(
    b: Backend,
) -> (
    isir::sim::Simulator,
    isir::app::App,
    isir::sim::SimGuard,
    common::TestDb,
) {
    let (sim, url, g) = common::sim(1500, 500, SEED).await;
    let db = common::fresh_db(b).await;
    let app = common::projected(&url, &db).await;
    app.store.set_setting("phase", "serve").await.unwrap();
    (sim, app, g, db)
}

/// The admin listener with the key `ops`, checking targets with `targets`: its base URL.
async fn admin_listener(store: &isir::store::Store, targets: &Policy) -> String {
    let hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"ops"));
    let state = isir::read::ReadState::new(store.clone(), Default::default()).with_admin(
        isir::read::AdminOptions {
            separate: true,
            key_sha256: Some(hash),
            targets: targets.clone(),
            read_only: false,
        },
    );
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", admin.local_addr().unwrap());
    tokio::spawn(isir::http::run_admin(admin, state, std::future::pending()));
    base
}

fn notifier_opts(targets: Policy) -> watchlist::notify::NotifierOptions {
    watchlist::notify::NotifierOptions {
        every: Duration::from_millis(50),
        batch: 1000,
        timeout: Duration::from_secs(5),
        retry_min: Duration::from_millis(50),
        retry_max: Duration::from_millis(400),
        failing_after: Duration::from_secs(3600),
        targets,
        claim_ttl: Duration::from_secs(30),
        holder: "t".into(),
    }
}

/// Cases of the simulated register that are not erased, for case-number entries.
fn cases(sim: &isir::sim::Simulator, n: usize) -> BTreeSet<Entry> {
    sim.truth_debtors()
        .into_iter()
        .filter(|d| !d.erased)
        .take(n)
        .map(|d| Entry {
            kind: Kind::Case,
            key: d.case_number,
        })
        .collect()
}

/// Waits until `done` holds for the list, at most `secs`.
async fn wait_list(
    store: &isir::store::Store,
    name: &str,
    secs: u64,
    done: impl Fn(&watchlist::Watchlist) -> bool,
) -> watchlist::Watchlist {
    let t0 = Instant::now();
    loop {
        let l = watchlist::get(store, name).await.unwrap();
        if done(&l) {
            return l;
        }
        assert!(t0.elapsed() < Duration::from_secs(secs), "{name}: {l:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

// ---------------------------------------------------------------------------------------
// Every spelling at add, set, the admin routes and delivery.

async fn refused_everywhere(b: Backend) {
    own_name_is_internal().await;
    let listener = Listener::start("127.0.0.1:0").await;
    let (sim, app, _g, db) = fixture(b).await;
    let store = &app.store;
    let entries = cases(&sim, 6);
    let case = entries.first().unwrap().key.clone();
    let closed = Policy::default();
    // A list with an acceptable webhook, to be changed.
    watchlist::create(
        store,
        NewList {
            name: "base".into(),
            roles: Roles::Debtor,
            webhook_url: Some("https://8.8.8.8/hook".into()),
            secret: None,
            entries: entries.clone(),
        },
        &closed,
    )
    .await
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_isir");
    let cli = |args: &[&str]| {
        std::process::Command::new(bin)
            .args(args)
            .env("ISIR_DATABASE__URL", &db.url)
            .env("ISIR_WATCH__ALLOW_PRIVATE_TARGETS", "false")
            .output()
            .unwrap()
    };
    let abase = admin_listener(store, &closed).await;
    let http = reqwest::Client::new();

    let urls = spellings(listener.port());
    for (i, u) in urls.iter().enumerate() {
        let name = format!("s{i}");
        let o = cli(&["watch", "add", &name, "--case", &case, "--webhook", u]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "watch add {u}: {err}");
        assert!(
            err.contains("allow_private_targets"),
            "watch add {u}: {err}"
        );
        let o = cli(&["watch", "set", "base", "--webhook", u]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "watch set {u}: {err}");
        assert!(
            err.contains("allow_private_targets"),
            "watch set {u}: {err}"
        );
        let r = http
            .post(format!("{abase}/admin/watchlists"))
            .header("X-Admin-Key", "ops")
            .json(&serde_json::json!({"name": name, "case": [case], "webhook": u}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "POST {u}");
        let r = http
            .patch(format!("{abase}/admin/watchlists/base"))
            .header("X-Admin-Key", "ops")
            .json(&serde_json::json!({"webhook": u}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "PATCH {u}");
    }
    let lists = watchlist::list(store).await.unwrap();
    assert_eq!(lists.len(), 1, "nothing was created");
    assert_eq!(
        lists[0].webhook_url.as_deref(),
        Some("https://8.8.8.8/hook")
    );
    watchlist::remove(store, "base").await.unwrap();

    // At delivery: each spelling stored straight into the table (allowed once, or
    // written by an older version), delivered by a notifier without
    // allow_private_targets.
    for (i, u) in urls.iter().enumerate() {
        stored_list(store, &format!("s{i}"), entries.clone(), u).await;
    }
    let (stop, sd) = tokio::sync::watch::channel(false);
    let notifier = tokio::spawn(watchlist::notify::run(
        store.clone(),
        notifier_opts(closed.clone()),
        sd,
    ));
    for (i, u) in urls.iter().enumerate() {
        let l = wait_list(store, &format!("s{i}"), 60, |l| l.last_error.is_some()).await;
        let e = l.last_error.unwrap();
        assert!(e.contains("allow_private_targets"), "{u}: {e}");
        assert_eq!(l.cursor, -1, "{u}: nothing acknowledged");
    }
    stop.send(true).unwrap();
    notifier.await.unwrap();
    assert_eq!(
        listener.conns.load(Ordering::SeqCst),
        0,
        "no connection reached the loopback listener"
    );

    // The same lists with the setting on reach it: the check above is what held them.
    let (stop, sd) = tokio::sync::watch::channel(false);
    let open = Policy {
        allow_private: true,
        ..Default::default()
    };
    let notifier = tokio::spawn(watchlist::notify::run(
        store.clone(),
        notifier_opts(open),
        sd,
    ));
    wait_list(store, "s0", 60, |l| l.delivered_batches >= 1).await;
    stop.send(true).unwrap();
    notifier.await.unwrap();
    assert!(listener.conns.load(Ordering::SeqCst) >= 1);
    // Allowed, a URL is stored as the client reads it: the host it connects to.
    let (l, _) = watchlist::create(
        store,
        NewList {
            name: "shown".into(),
            roles: Roles::Debtor,
            webhook_url: Some(format!("http://%31%32%37.0x0.0.1:{}\\x", listener.port())),
            secret: None,
            entries,
        },
        &Policy {
            allow_private: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        l.webhook_url,
        Some(format!("http://127.0.0.1:{}/x", listener.port()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn internal_spellings_are_refused_at_add_set_admin_and_delivery_sqlite() {
    refused_everywhere(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn internal_spellings_are_refused_at_add_set_admin_and_delivery_postgres() {
    refused_everywhere(Backend::Postgres).await;
}

// ---------------------------------------------------------------------------------------
// Proxies: never the environment's; `watch.proxy` when the operator sets it.

/// The real daemon with every proxy variable pointing at a loopback listener: the
/// deliveries go to the receiver, the proxy sees no connection. (The variables are the
/// process's: only a process of its own can hold them.) The receiver listens on
/// 127.0.0.2, and `NO_PROXY` exempts the simulator's 127.0.0.1 only, so that the
/// poller's own requests stay off the proxy too.
async fn environment_proxies_are_ignored(b: Backend) {
    let proxy = Listener::start("127.0.0.1:0").await;
    let receiver = Listener::start("127.0.0.2:0").await;
    let (sim, url, _g) = common::sim(1500, 500, SEED).await;
    let db = common::fresh_db(b).await;
    let store = common::store(&db).await;
    // Made before anything is stored: its feed is the whole register's for its cases.
    watchlist::create(
        &store,
        NewList {
            name: "env".into(),
            roles: Roles::Debtor,
            webhook_url: Some(format!("http://127.0.0.2:{}/hook", receiver.port())),
            secret: None,
            entries: cases(&sim, 5),
        },
        &Policy {
            allow_private: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let p = format!("http://127.0.0.1:{}", proxy.port());
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("daemon.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_isir"))
        .arg("run")
        .env("ISIR_SOURCE__URL", &url)
        .env("ISIR_DATABASE__URL", &db.url)
        .env("ISIR_POLL__PERIOD_SECS", "1")
        .env("ISIR_POLL__MAX_BATCHES_PER_TICK", "1000")
        .env("ISIR_BUDGET__DAILY", "1000000")
        .env("ISIR_BUDGET__PER_MINUTE", "1000000")
        .env("ISIR_PROJECTION__EVERY_SECS", "1")
        .env("ISIR_PROJECTION__DEBOUNCE_MS", "50")
        .env("ISIR_PHASE__INITIAL", "project")
        .env("ISIR_API__BIND", "127.0.0.1:0")
        .env("ISIR_WATCH__ALLOW_PRIVATE_TARGETS", "true")
        .env("ISIR_WATCH__EVERY_MS", "100")
        .env("ISIR_LOG", "info,sqlx=warn")
        .env_remove("no_proxy")
        .env("NO_PROXY", "127.0.0.1")
        .env("HTTP_PROXY", &p)
        .env("HTTPS_PROXY", &p)
        .env("ALL_PROXY", &p)
        .env("http_proxy", &p)
        .env("https_proxy", &p)
        .env("all_proxy", &p)
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    loop {
        let l = watchlist::get(&store, "env").await.unwrap();
        if l.delivered_batches >= 1 {
            break;
        }
        if t0.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!(
                "no delivery: {l:?}\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    child.wait().unwrap();
    assert_eq!(
        proxy.conns.load(Ordering::SeqCst),
        0,
        "the proxy of the environment saw {:?}",
        proxy.lines()
    );
    let got = receiver.lines();
    assert!(
        !got.is_empty() && got.iter().all(|line| line.starts_with("POST /hook ")),
        "the receiver got the deliveries, directly: {got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn environment_proxies_are_ignored_sqlite() {
    environment_proxies_are_ignored(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn environment_proxies_are_ignored_postgres() {
    environment_proxies_are_ignored(Backend::Postgres).await;
}

/// `watch.proxy`: every delivery goes through it (a name it alone resolves); address
/// hosts the check refuses are still refused before the proxy is asked.
async fn explicit_proxy(b: Backend) {
    let proxy = Listener::start("127.0.0.1:0").await;
    let (sim, app, _g, db) = fixture(b).await;
    let store = &app.store;
    let targets = Policy {
        proxy: Some(format!("http://127.0.0.1:{}", proxy.port())),
        ..Default::default()
    };
    let entries = cases(&sim, 5);
    for (name, hook) in [
        ("out", "http://hooks.example.invalid/isir"),
        ("in", "http://127.0.0.1:9/hook"),
    ] {
        stored_list(store, name, entries.clone(), hook).await;
    }
    let (stop, sd) = tokio::sync::watch::channel(false);
    let notifier = tokio::spawn(watchlist::notify::run(
        store.clone(),
        notifier_opts(targets),
        sd,
    ));
    wait_list(store, "out", 60, |l| l.delivered_batches >= 1).await;
    let l = wait_list(store, "in", 60, |l| l.last_error.is_some()).await;
    stop.send(true).unwrap();
    notifier.await.unwrap();
    assert!(l.last_error.unwrap().contains("allow_private_targets"));
    // A proxy the client cannot use stops start-up, naming the key.
    for bad in ["socks5://127.0.0.1:1080", "proxy:3128"] {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_isir"))
            .args(["watch", "list"])
            .env("ISIR_DATABASE__URL", &db.url)
            .env("ISIR_WATCH__PROXY", bad)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{bad}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("watch.proxy"),
            "{bad}"
        );
    }
    let lines = proxy.lines();
    assert!(
        !lines.is_empty()
            && lines
                .iter()
                .all(|l| l == "POST http://hooks.example.invalid/isir HTTP/1.1"),
        "{lines:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_explicit_proxy_carries_the_deliveries_sqlite() {
    explicit_proxy(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_explicit_proxy_carries_the_deliveries_postgres() {
    explicit_proxy(Backend::Postgres).await;
}

// ---------------------------------------------------------------------------------------
// Birth numbers in clear text.

async fn birth_numbers_only_over_https(b: Backend) {
    let listener = Listener::start("127.0.0.1:0").await;
    let (sim, app, _g, db) = fixture(b).await;
    let store = &app.store;
    // A debtor with a birth number, from the truth, and cases to watch beside it.
    let rc = sim
        .truth_debtors()
        .into_iter()
        .find(|d| !d.erased && d.person.ico.is_none() && d.person.birth_number.is_some())
        .and_then(|d| d.person.birth_number)
        .expect("a debtor with a birth number");
    let with_rc: BTreeSet<Entry> = cases(&sim, 5)
        .into_iter()
        .chain([Entry {
            kind: Kind::Rc,
            key: rc.clone(),
        }])
        .collect();
    let new = |name: &str, hook: &str, entries: &BTreeSet<Entry>| NewList {
        name: name.into(),
        roles: Roles::Debtor,
        webhook_url: Some(hook.into()),
        secret: None,
        entries: entries.clone(),
    };
    let closed = Policy::default();
    let allowing = Policy {
        allow_http_with_birth_numbers: true,
        ..Default::default()
    };
    // At add: refused over http, accepted over https or with the setting.
    let e = watchlist::create(store, new("a", "http://8.8.8.8/h", &with_rc), &closed)
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("https") && e.to_string().contains("allow_http_with_birth_numbers"),
        "{e}"
    );
    watchlist::create(store, new("a", "https://8.8.8.8/h", &with_rc), &closed)
        .await
        .unwrap();
    watchlist::create(store, new("b", "http://8.8.8.8/h", &with_rc), &allowing)
        .await
        .unwrap();
    watchlist::create(
        store,
        new("c", "http://8.8.8.8/h", &cases(&sim, 5)),
        &closed,
    )
    .await
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_isir");
    let cli = |args: &[&str], allow: &str| {
        std::process::Command::new(bin)
            .args(args)
            .env("ISIR_DATABASE__URL", &db.url)
            .env("ISIR_WATCH__ALLOW_HTTP_WITH_BIRTH_NUMBERS", allow)
            .output()
            .unwrap()
    };
    let add = [
        "watch",
        "add",
        "d",
        "--rc",
        &rc,
        "--webhook",
        "http://8.8.8.8/h",
    ];
    let o = cli(&add, "false");
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("allow_http_with_birth_numbers"));
    assert!(watchlist::get(store, "d").await.is_err(), "not stored");
    assert_eq!(cli(&add, "true").status.code(), Some(0));
    // At set: a list with birth numbers cannot move to http, by the CLI or the admin
    // route; one without can.
    let o = cli(
        &["watch", "set", "a", "--webhook", "http://8.8.8.8/h"],
        "false",
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("https"));
    let abase = admin_listener(store, &closed).await;
    let http = reqwest::Client::new();
    let r = http
        .patch(format!("{abase}/admin/watchlists/a"))
        .header("X-Admin-Key", "ops")
        .json(&serde_json::json!({"webhook": "http://8.8.8.8/h"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = http
        .post(format!("{abase}/admin/watchlists"))
        .header("X-Admin-Key", "ops")
        .json(&serde_json::json!({"name": "e", "rc": [rc], "webhook": "http://8.8.8.8/h"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(
        watchlist::get(store, "a")
            .await
            .unwrap()
            .webhook_url
            .as_deref(),
        Some("https://8.8.8.8/h")
    );
    assert_eq!(
        cli(
            &["watch", "set", "c", "--webhook", "http://8.8.8.9/h"],
            "false"
        )
        .status
        .code(),
        Some(0)
    );
    for n in ["a", "b", "c", "d"] {
        watchlist::remove(store, n).await.unwrap();
    }

    // At delivery: a list with a birth number whose webhook is http (allowed once)
    // sends nothing while the setting is off; one without birth numbers, to the same
    // receiver, is delivered.
    let hook = format!("http://127.0.0.1:{}/hook", listener.port());
    stored_list(store, "rc", with_rc, &hook).await;
    let (stop, sd) = tokio::sync::watch::channel(false);
    let open = Policy {
        allow_private: true,
        ..Default::default()
    };
    let notifier = tokio::spawn(watchlist::notify::run(
        store.clone(),
        notifier_opts(open),
        sd,
    ));
    let l = wait_list(store, "rc", 60, |l| l.last_error.is_some()).await;
    assert!(
        l.last_error
            .unwrap()
            .contains("allow_http_with_birth_numbers"),
        "refused, not failed"
    );
    assert_eq!(listener.conns.load(Ordering::SeqCst), 0, "nothing sent");
    stored_list(store, "plain", cases(&sim, 5), &hook).await;
    wait_list(store, "plain", 60, |l| l.delivered_batches >= 1).await;
    stop.send(true).unwrap();
    notifier.await.unwrap();
    assert_eq!(watchlist::get(store, "rc").await.unwrap().cursor, -1);
    assert!(
        listener.bodies().iter().all(|b| !b.contains(&rc)),
        "the birth number never went out in clear"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn birth_numbers_only_over_https_sqlite() {
    birth_numbers_only_over_https(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn birth_numbers_only_over_https_postgres() {
    birth_numbers_only_over_https(Backend::Postgres).await;
}

// ---------------------------------------------------------------------------------------
// An erasure (§ 425) while a receiver fails.

/// The header `name` of a recorded request head.
fn header(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
    })
}

/// A list watches an erased debtor (its only case) and a case that stays. The
/// receiver fails while the debtor's match is in the pending batch; the erasure is then
/// stored and projected, and the receiver recovers. From the first request built after
/// the erasure on, nothing carries the debtor's key or case, and the batch that goes
/// out is a new message (another `webhook-id`). Events carry no names (the timeline has
/// none): the match is the key beside its case.
async fn erasure_between_attempts(b: Backend) {
    const TOTAL: usize = 6000;
    let whole = isir::sim::Simulator::new(isir::sim::SimOptions {
        seed: SEED,
        actions: TOTAL,
        ..Default::default()
    });
    let actions = whole.truth_all();
    let debtors = whole.truth_debtors();
    let key_of = |d: &isir::sim::TruthDebtor| match &d.person.ico {
        Some(i) => Some((Kind::Ico, i.clone(), format!("<ic>{i}</ic>"))),
        None => d
            .person
            .birth_number
            .clone()
            .map(|r| (Kind::Rc, r.clone(), format!("<rc>{r}</rc>"))),
    };
    let mut uses = std::collections::HashMap::new();
    for d in &debtors {
        if let Some((_, k, _)) = key_of(d) {
            *uses.entry(k).or_insert(0) += 1;
        }
    }
    let erased_cases: BTreeSet<&str> = debtors
        .iter()
        .filter(|d| d.erased)
        .map(|d| d.case_number.as_str())
        .collect();
    // The erased debtor: its key in no other case, named before its erasure, with a
    // case that stays acting between the two.
    let (kind, key, case, f, e, control) = debtors
        .iter()
        .filter(|d| d.erased)
        .find_map(|d| {
            let (kind, key, tag) = key_of(d)?;
            (uses[&key] == 1).then_some(())?;
            let of_case = |i: &usize| actions[*i].case_number == d.case_number;
            let f = (0..actions.len()).find(|i| {
                of_case(i)
                    && actions[*i]
                        .note
                        .as_deref()
                        .is_some_and(|n| n.contains(&tag))
            })?;
            let e = (0..actions.len()).find(|i| {
                of_case(i) && isir::privacy::ERASURE_TYPES.contains(&actions[*i].type_code.trim())
            })?;
            let control = (f..e)
                .map(|i| &actions[i].case_number)
                .find(|c| **c != d.case_number && !erased_cases.contains(c.as_str()))?;
            (f >= 1 && f < e).then(|| (kind, key, d.case_number.clone(), f, e, control.clone()))
        })
        .expect("an erased debtor named before its erasure");

    let receiver = Listener::start("127.0.0.1:0").await;
    receiver.status.store(503, Ordering::SeqCst);
    let (sim, url, _g) = common::sim(f, 500, SEED).await;
    let db = common::fresh_db(b).await;
    let mut s = common::settings(&url, &db);
    s.poll.max_batches_per_tick = 1000;
    let app = common::app(s).await;
    let catch_up = || async {
        loop {
            let t = app.poller().unwrap().poll_once().await;
            if matches!(t.outcome, isir::poller::TickOutcome::CaughtUp) {
                break;
            }
        }
        for n in isir::projection::NAMES {
            isir::projection::catch_up(&app.store, n, 5000)
                .await
                .unwrap();
        }
    };
    catch_up().await;
    app.store.set_setting("phase", "serve").await.unwrap();
    let store = &app.store;
    watchlist::create(
        store,
        NewList {
            name: "erase".into(),
            roles: Roles::Debtor,
            webhook_url: Some(format!("http://127.0.0.1:{}/hook", receiver.port())),
            secret: None,
            entries: [
                Entry {
                    kind,
                    key: key.clone(),
                },
                Entry {
                    kind: Kind::Case,
                    key: control.clone(),
                },
            ]
            .into(),
        },
        &Policy {
            allow_private: true,
            allow_http_with_birth_numbers: true,
            proxy: None,
        },
    )
    .await
    .unwrap();
    // Up to the action before the erasure: the debtor's match is in the feed.
    sim.publish(e - f);
    catch_up().await;
    let (stop, sd) = tokio::sync::watch::channel(false);
    let notifier = tokio::spawn(watchlist::notify::run(
        store.clone(),
        notifier_opts(Policy {
            allow_private: true,
            allow_http_with_birth_numbers: true,
            proxy: None,
        }),
        sd,
    ));
    let carries = |body: &str| body.contains(&key) || body.contains(&case);
    let t0 = Instant::now();
    while !receiver.bodies().iter().any(|b| carries(b)) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the match was never sent"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The erasure and the rest of the register, stored and projected.
    sim.publish(TOTAL - e);
    catch_up().await;
    let mark = receiver.got.lock().unwrap().len();
    // Request mark+1 is built after the answer to request mark, which came after the
    // erasure was projected.
    let t0 = Instant::now();
    while receiver.got.lock().unwrap().len() < mark + 2 {
        assert!(t0.elapsed() < Duration::from_secs(60), "no retries");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    receiver.status.store(200, Ordering::SeqCst);
    wait_list(store, "erase", 60, |l| l.delivered_batches >= 1).await;
    stop.send(true).unwrap();
    notifier.await.unwrap();

    let got = receiver.got.lock().unwrap().clone();
    let before: BTreeSet<String> = got[..mark]
        .iter()
        .filter(|(_, b)| carries(b))
        .filter_map(|(h, _)| header(h, "webhook-id"))
        .collect();
    assert!(!before.is_empty());
    for (h, body) in &got[mark + 1..] {
        assert!(!carries(body), "sent after the erasure: {h}\n{body}");
        let id = header(h, "webhook-id").unwrap();
        assert!(!before.contains(&id), "another batch is another message");
    }
    assert!(
        got[mark + 1..].iter().any(|(_, b)| b.contains(&control)),
        "the case that stays was delivered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_erasure_between_attempts_is_never_sent_sqlite() {
    erasure_between_attempts(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_erasure_between_attempts_is_never_sent_postgres() {
    erasure_between_attempts(Backend::Postgres).await;
}
