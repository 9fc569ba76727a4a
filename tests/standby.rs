//! Readers on a PostgreSQL hot standby: a primary and its streaming standby
//! (`pg_basebackup -R`) of their own, on free ports, so that stopping the primary
//! disturbs no other test. The real `isir serve` binary against the standby starts
//! (no migration, no write: a standby refuses both), answers with the standby's replay
//! lag in its watermark, follows what the writer adds on the primary, and keeps
//! answering once the primary is stopped.
//!
//! Needs PostgreSQL's server binaries (`initdb`, `pg_ctl`, `pg_basebackup`), which
//! `scripts/test.sh` installs; run as root, the clusters run as `postgres`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The directory of PostgreSQL's server binaries (`ISIR_PG_BIN`, or Debian's).
fn bindir() -> PathBuf {
    if let Ok(d) = std::env::var("ISIR_PG_BIN") {
        return d.into();
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|r| r.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    found.retain(|p| p.join("pg_basebackup").exists() && p.join("initdb").exists());
    found.sort();
    found.pop().unwrap_or_else(|| {
        panic!("PostgreSQL's server binaries are required (initdb, pg_ctl, pg_basebackup under /usr/lib/postgresql/N/bin, or ISIR_PG_BIN); scripts/test.sh installs them")
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Runs a PostgreSQL tool, as `postgres` when we are root (the server refuses root).
fn pg(tool: &str, args: &[&str]) {
    let bin = bindir().join(tool);
    let out = if is_root() {
        Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(&bin)
            .args(args)
            .output()
    } else {
        Command::new(&bin).args(args).output()
    }
    .unwrap_or_else(|e| panic!("{tool}: {e}"));
    assert!(
        out.status.success(),
        "{tool} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The two clusters; stopped when dropped.
struct Clusters {
    dir: tempfile::TempDir,
    primary: u16,
    standby: u16,
}

impl Clusters {
    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    fn start(&self, name: &str, port: u16) {
        let opts = format!(
            "-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c hot_standby=on -c fsync=off",
            self.dir.path().display()
        );
        pg(
            "pg_ctl",
            &[
                "-D",
                &self.path(name),
                "-l",
                &self.path(&format!("{name}.log")),
                "-o",
                &opts,
                "-w",
                "start",
            ],
        );
    }

    fn stop(&self, name: &str) {
        let d = self.path(name);
        if Path::new(&d).join("postmaster.pid").exists() {
            pg("pg_ctl", &["-D", &d, "-m", "fast", "-w", "stop"]);
        }
    }

    fn new() -> Clusters {
        let dir = tempfile::tempdir().unwrap();
        if is_root() {
            let ok = Command::new("chown")
                .args(["postgres:postgres", &dir.path().display().to_string()])
                .status()
                .unwrap()
                .success();
            assert!(ok, "chown the clusters' directory to postgres");
        }
        let c = Clusters {
            dir,
            primary: free_port(),
            standby: free_port(),
        };
        pg(
            "initdb",
            &[
                "-D",
                &c.path("primary"),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
            ],
        );
        c.start("primary", c.primary);
        c
    }

    fn make_standby(&self) {
        pg(
            "pg_basebackup",
            &[
                "-D",
                &self.path("standby"),
                "-h",
                "127.0.0.1",
                "-p",
                &self.primary.to_string(),
                "-U",
                "postgres",
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
            ],
        );
        self.start("standby", self.standby);
    }
}

impl Drop for Clusters {
    fn drop(&mut self) {
        for n in ["standby", "primary"] {
            let d = self.path(n);
            if Path::new(&d).join("postmaster.pid").exists() {
                let _ = Command::new(if is_root() { "runuser" } else { "true" })
                    .args(["-u", "postgres", "--"])
                    .arg(bindir().join("pg_ctl"))
                    .args(["-D", &d, "-m", "immediate", "stop"])
                    .output();
                if !is_root() {
                    let _ = Command::new(bindir().join("pg_ctl"))
                        .args(["-D", &d, "-m", "immediate", "stop"])
                        .output();
                }
            }
        }
    }
}

/// `isir serve`, the real binary; killed when dropped.
/// `isir serve` as a process, with its log file: stopped when dropped, and its log
/// printed when the test failed (the temporary directory goes with the test).
struct Serve(std::process::Child, std::path::PathBuf);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.1).unwrap_or_default();
            eprintln!("---- isir serve's log ({}) ----\n{log}", self.1.display());
        }
    }
}

async fn get(http: &reqwest::Client, url: &str) -> (u16, reqwest::header::HeaderMap, Value) {
    let r = http.get(url).send().await.unwrap();
    let s = r.status().as_u16();
    let h = r.headers().clone();
    (s, h, r.json().await.unwrap_or(Value::Null))
}

async fn wait_for<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let t = Instant::now();
    while !f().await {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "waited a minute for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn serve_reads_a_hot_standby_and_outlives_its_primary() {
    use sqlx::Connection;
    let clusters = Clusters::new();
    let primary_url = format!("postgres://postgres@127.0.0.1:{}/isir", clusters.primary);
    let mut c = sqlx::PgConnection::connect(&format!(
        "postgres://postgres@127.0.0.1:{}/postgres",
        clusters.primary
    ))
    .await
    .unwrap();
    sqlx::query("CREATE DATABASE isir")
        .execute(&mut c)
        .await
        .unwrap();
    drop(c);

    // The writer fills the primary: replica, projections, phase serve.
    let (sim, url, _g) = common::sim(5_000, 1000, 53).await;
    let db = common::TestDb::at(&primary_url);
    let mut s = common::settings(&url, &db);
    s.poll.max_batches_per_tick = 1000;
    let app = common::app(s).await;
    app.poller().unwrap().poll_once().await;
    for n in isir::projection::NAMES {
        isir::projection::catch_up(&app.store, n, 5000)
            .await
            .unwrap();
    }
    app.store.set_setting("phase", "serve").await.unwrap();
    let head = sim.head_id().unwrap();

    clusters.make_standby();
    let standby_url = format!("postgres://postgres@127.0.0.1:{}/isir", clusters.standby);

    // `isir serve` on the standby.
    let port = free_port();
    let log_path = clusters.dir.path().join("serve.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let serve = Serve(
        Command::new(env!("CARGO_BIN_EXE_isir"))
            .arg("serve")
            .env("ISIR_DATABASE__URL", &standby_url)
            .env("ISIR_API__BIND", format!("127.0.0.1:{port}"))
            .env("ISIR_API__META_CACHE_MS", "0")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
        log_path,
    );
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    wait_for("isir serve on the standby", || {
        let http = http.clone();
        let u = format!("{base}/v1/cases?limit=1");
        async move { http.get(u).send().await.is_ok_and(|r| r.status() == 200) }
    })
    .await;

    // It answers from the standby, with the standby's lag in its watermark.
    let (st, h, body) = get(&http, &format!("{base}/v1/cases?limit=5")).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["cases"].as_array().unwrap().len(), 5);
    assert_eq!(body["watermark"]["action_id"], head);
    assert_eq!(
        body["watermark"]["standby_lag_seconds"], 0,
        "a standby that has replayed all it received lags by nothing: {body}"
    );
    assert_eq!(h["isir-standby-lag-seconds"], "0");
    // A reader of the primary reports no standby lag at all.
    let (primary_base, _stop) = common::serve_api(isir::read::ReadState::new(
        app.store.clone(),
        isir::read::ReadOptions::default(),
    ))
    .await;
    let (st, h, body) = get(&http, &format!("{primary_base}/v1/cases?limit=1")).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["watermark"]["action_id"], head);
    assert!(
        body["watermark"]
            .get("standby_lag_seconds")
            .is_none_or(Value::is_null),
        "the primary is no standby: {body}"
    );
    assert!(!h.contains_key("isir-standby-lag-seconds"), "{h:?}");
    // It never wrote: the standby is read-only, and it holds what the primary has.
    let mut sb = sqlx::PgConnection::connect(&standby_url).await.unwrap();
    let recovering: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
        .fetch_one(&mut sb)
        .await
        .unwrap();
    assert!(recovering, "the standby is a standby");
    drop(sb);

    // What the writer adds on the primary reaches the reader through the standby. While
    // the standby's replay is paused it receives the new WAL but does not apply it: its
    // reader still answers the old head and reports a lag of at least the time since
    // the last transaction it replayed.
    let mut sb = sqlx::PgConnection::connect(&standby_url).await.unwrap();
    sqlx::query("SELECT pg_wal_replay_pause()")
        .execute(&mut sb)
        .await
        .unwrap();
    sim.publish(2_000);
    app.poller().unwrap().poll_once().await;
    for n in isir::projection::NAMES {
        isir::projection::catch_up(&app.store, n, 5000)
            .await
            .unwrap();
    }
    // (The writer's own watermark on the primary: what the standby must reach.)
    let head2: i64 = common::texts(
        &app.store,
        "SELECT CAST(MIN(cursor) AS TEXT) FROM proj_meta",
        &[],
    )
    .await
    .remove(0)
    .parse()
    .unwrap();
    assert!(head2 > head);
    let t = Instant::now();
    while !sqlx::query_scalar::<_, bool>(
        "SELECT pg_last_wal_receive_lsn() > pg_last_wal_replay_lsn()",
    )
    .fetch_one(&mut sb)
    .await
    .unwrap()
    {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "waited a minute for the standby to receive the new WAL"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let paused_at = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (st, h, body) = get(&http, &format!("{base}/v1/cases?limit=1")).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["watermark"]["action_id"], head, "replay is paused");
    let lag = body["watermark"]["standby_lag_seconds"]
        .as_i64()
        .unwrap_or(-1);
    assert!(
        lag >= 3 && h["isir-standby-lag-seconds"] == lag.to_string().as_str(),
        "a standby behind reports its lag (>= 3 s, paused {:?} ago): {body}",
        paused_at.elapsed()
    );
    sqlx::query("SELECT pg_wal_replay_resume()")
        .execute(&mut sb)
        .await
        .unwrap();
    drop(sb);
    wait_for("the standby to replay the new actions", || {
        let http = http.clone();
        let u = format!("{base}/v1/cases?limit=1");
        async move {
            let r = http.get(u).send().await.unwrap();
            let v: Value = r.json().await.unwrap_or(Value::Null);
            v["watermark"]["action_id"] == head2
        }
    })
    .await;
    drop(app);

    // The primary stops; the standby's reader goes on answering.
    clusters.stop("primary");
    for path in [
        "/v1/cases?limit=3",
        "/v1/events?limit=3",
        "/v1/search?q=nov",
        "/v1/stats",
        "/readyz",
    ] {
        let (st, _, body) = get(&http, &format!("{base}{path}")).await;
        assert_eq!(st, 200, "{path} with the primary stopped: {body}");
    }
    let (_, _, body) = get(&http, &format!("{base}/v1/cases?limit=1")).await;
    assert_eq!(body["watermark"]["action_id"], head2);
    drop(serve);
    clusters.stop("standby");
}
