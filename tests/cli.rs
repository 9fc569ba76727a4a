//! The command line as operators meet it: help for every command and option, choices
//! that completions list, `--json` on the commands that print state, exit codes that
//! mean one thing each, JSON log lines, and the request log line of `isir serve`.
//! Expectations come from the exit-code table of the README and the settings, not from
//! the code under test.

mod common;

use std::process::{Command, Output};

use clap::CommandFactory;
use common::Backend;
use isir::cli::Cli;

fn isir(db_url: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_isir"))
        .args(args)
        .env("ISIR_DATABASE__URL", db_url)
        .env("ISIR_LOG", "info,sqlx=error")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

#[test]
fn every_command_and_option_has_help() {
    fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for sub in cmd.get_subcommands() {
            let p = format!("{path} {}", sub.get_name());
            if sub.get_about().is_none() {
                missing.push(format!("command `{p}`"));
            }
            walk(sub, &p, missing);
        }
        for a in cmd.get_arguments() {
            let id = a.get_id().as_str();
            if id == "help" || id == "version" {
                continue;
            }
            if a.get_help().is_none() && a.get_long_help().is_none() {
                missing.push(format!("`{path}` option `{id}`"));
            }
        }
    }
    let mut missing = Vec::new();
    walk(&Cli::command(), "isir", &mut missing);
    assert!(missing.is_empty(), "without help text: {missing:#?}");
}

#[test]
fn help_lists_the_exit_codes_and_completions_list_the_choices() {
    let out = Command::new(env!("CARGO_BIN_EXE_isir"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    // The README's table: each code and its meaning.
    for (code, words) in [
        (0, "done"),
        (1, "failed"),
        (2, "command line was wrong"),
        (3, "holds the writer's lease"),
        (4, "budget is spent"),
        (5, "register failed"),
        (6, "store failed"),
        (7, "ingestion is off"),
        (8, "precondition refused"),
        (9, "verify found differences"),
    ] {
        assert!(
            help.lines()
                .any(|l| l.trim_start().starts_with(&format!("{code} ")) && l.contains(words)),
            "exit code {code} ({words}) missing from --help:\n{help}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_isir"))
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let script = String::from_utf8_lossy(&out.stdout);
    // Commands, the phases, the projections and the export tables are all offered.
    for word in [
        "checkpoint",
        "snapshot",
        "completions",
        "ingest",
        "serve",
        "timeline",
        "parties",
        "stats",
    ] {
        assert!(script.contains(word), "the bash completion lacks {word}");
    }
    // A choice outside the list is a usage error (2), named.
    let out = Command::new(env!("CARGO_BIN_EXE_isir"))
        .args(["phase", "set", "later"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("possible values"));
}

#[tokio::test]
async fn state_commands_print_json_and_exit_codes_mean_one_thing() {
    let db = common::fresh_db(Backend::Sqlite).await;
    let url = db.url.clone();
    let run = |args: &[&str]| isir(&url, args, &[]);

    let m = run(&["migrate", "--json"]);
    assert!(m.status.success(), "{m:?}");
    assert_eq!(json(&m)["backend"], "sqlite");
    let st = run(&["status", "--json"]);
    assert!(st.status.success());
    assert!(json(&st).is_object());
    let cp = run(&["checkpoint", "get", "--json"]);
    assert_eq!(json(&cp)["checkpoint"], serde_json::Value::Null);
    let ph = run(&["phase", "get", "--json"]);
    assert_eq!(
        json(&ph)["phase"],
        "ingest",
        "a new database starts in phase.initial"
    );
    let ps = run(&["project", "status", "--json"]);
    assert_eq!(json(&ps)["builders"].as_array().unwrap().len(), 3);
    let ls = run(&["lease", "show", "--json"]);
    assert!(ls.status.success());
    json(&ls);

    // 7: ingestion is off. The tick ends before any request (the source URL is the
    // real register, which this machine cannot reach: a request would be exit 5).
    let off = run(&["phase", "set", "off", "--json"]);
    assert_eq!(json(&off)["to"], "off");
    let p = run(&["poll", "--once"]);
    assert_eq!(p.status.code(), Some(7), "{p:?}");
    assert_eq!(json(&p)["outcome"]["kind"], "disabled");

    // 3: another process holds the lease.
    // The binary's lease: the default key, in the database (no redis.url).
    let mut settings = common::settings("http://127.0.0.1:9/", &db);
    settings.lease = Default::default();
    let store = common::store(&db).await;
    let (lease, _, _) = isir::app::App::lease_and_budget(&settings, &store).unwrap();
    assert!(matches!(
        lease.acquire().await.unwrap(),
        isir::lease::Acquire::Granted(_)
    ));
    let set = run(&["checkpoint", "set", "5", "--force", "--reason", "test"]);
    assert_eq!(set.status.code(), Some(3), "{set:?}");
    assert!(String::from_utf8_lossy(&set.stderr).contains("held by"));
    run(&["phase", "set", "ingest"]);
    let p = run(&["poll", "--once"]);
    assert_eq!(p.status.code(), Some(3), "{p:?}");
    lease.force_release().await.unwrap();

    // 0, and the move is in the store.
    let set = run(&[
        "checkpoint",
        "set",
        "5",
        "--force",
        "--reason",
        "test",
        "--json",
    ]);
    assert_eq!(set.status.code(), Some(0), "{set:?}");
    assert_eq!(json(&set)["after"], 5);
    assert_eq!(store.checkpoint().await.unwrap(), Some(5));

    // 1: a failure (a configuration error names its key).
    let bad = isir(&url, &["status"], &[("ISIR_LEASE__TTL_SECS", "1")]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("lease.ttl_secs"));
    // 2: a wrong command line.
    assert_eq!(run(&["poll"]).status.code(), Some(2));
}

// Two workers: the commands run blocking while the simulator answers on the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_and_a_request_line_without_query_values() {
    let db = common::fresh_db(Backend::Sqlite).await;
    let url = db.url.clone();
    assert!(isir(&url, &["migrate"], &[]).status.success());
    // A JSON log line from a command that logs (a phase change is a warning).
    let o = isir(
        &url,
        &["phase", "set", "serve", "--force"],
        &[("ISIR_LOG__FORMAT", "json")],
    );
    assert!(o.status.success(), "{o:?}");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stderr)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let changed = lines
        .iter()
        .find(|l| l["message"] == "phase changed")
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert_eq!(changed["to"], "serve");
    assert_eq!(changed["level"], "WARN");
    // In text, to a pipe (as to a file): no terminal colour codes.
    let o = isir(&url, &["phase", "set", "off", "--force"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && err.contains("phase changed"), "{err}");
    assert!(
        !err.contains('\x1b'),
        "escape codes in a piped log: {err:?}"
    );

    // A tick's line gives its checkpoint and the source's head as numbers, not Rust's
    // `Some(…)`.
    let (sim, src, _g) = common::sim(1_500, 1000, 7).await;
    let last = sim.truth_all().last().unwrap().id;
    assert!(
        isir(&url, &["phase", "set", "ingest", "--force"], &[])
            .status
            .success()
    );
    let o = isir(
        &url,
        &["poll", "--once"],
        &[
            ("ISIR_LOG__FORMAT", "json"),
            ("ISIR_SOURCE__URL", src.as_str()),
        ],
    );
    let text = String::from_utf8_lossy(&o.stderr);
    let tick = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["message"] == "tick")
        .unwrap_or_else(|| panic!("no tick line:\n{text}"));
    assert_eq!(tick["checkpoint"], last, "{tick}");
    assert_eq!(tick["head"], last, "{tick}");

    // `isir serve` logs one line a request: route template, status, never the values.
    let dir = tempfile::tempdir().unwrap();
    let (bind, mut child, log) = serve_logged(&url, &[], dir.path()).await;
    let http = reqwest::Client::new();
    let secret = "4711180123";
    let r = http
        .get(format!("http://{bind}/v1/subjects?rc={secret}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // A path no route takes is logged too, as `unmatched`, without the path's values.
    let r = http
        .get(format!("http://{bind}/v1/nope/{secret}?rc={secret}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text.contains(secret),
        "a query value reached the log:\n{text}"
    );
    // A reader fetches no page: at shutdown it says what it does finish.
    assert!(
        text.contains("finishing the answers in flight") && !text.contains("current page"),
        "{text}"
    );
    let req = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["message"] == "request" && l["route"] == "/v1/subjects")
        .unwrap_or_else(|| panic!("no request line:\n{text}"));
    assert_eq!(req["status"], 403);
    assert_eq!(req["method"], "GET");
    assert!(req["duration_ms"].is_number());
    let unmatched = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["message"] == "request" && l["route"] == "unmatched")
        .unwrap_or_else(|| panic!("no line for the unknown path:\n{text}"));
    assert_eq!(unmatched["status"], 404);
}

/// `isir serve` on a free loopback port with JSON logs to a file, up once `/healthz`
/// answers: its address, the process, the log file (in `dir`).
async fn serve_logged(
    db_url: &str,
    env: &[(&str, &str)],
    dir: &std::path::Path,
) -> (String, std::process::Child, std::path::PathBuf) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let bind = format!("127.0.0.1:{port}");
    let log = dir.join("serve.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_isir"))
        .arg("serve")
        .env("ISIR_DATABASE__URL", db_url)
        .env("ISIR_API__BIND", &bind)
        .env("ISIR_LOG", "info")
        .env("ISIR_LOG__FORMAT", "json")
        .envs(env.iter().copied())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let http = reqwest::Client::new();
    for _ in 0..100 {
        if http
            .get(format!("http://{bind}/healthz"))
            .send()
            .await
            .is_ok()
        {
            return (bind, child, log);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("isir serve did not start");
}

/// Exit codes 4, 5, 6, 8 and 9 produced by their conditions (the table in `--help` and
/// the README), each against the simulator or a real store: a spent budget, garbage
/// from the register, the store lost mid-tick, `project verify` finding a difference,
/// and a phase change refused for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_come_from_their_conditions() {
    use isir::sim::{FaultKind, FaultPlan, SimOptions};
    let src = |faults: FaultPlan, latency_ms: u64| async move {
        isir::sim::spawn(SimOptions {
            seed: 31,
            actions: 3_000,
            page: 1000,
            daily_limit: None,
            per_minute_limit: None,
            faults,
            latency: std::time::Duration::from_millis(latency_ms),
            ..Default::default()
        })
        .await
        .unwrap()
    };
    let poll = |db: &str, source: &str, extra: &[(&str, &str)]| {
        let mut env = vec![("ISIR_SOURCE__URL", source)];
        env.extend_from_slice(extra);
        isir(db, &["poll", "--once"], &env)
    };

    // 4: a daily budget of 1 is spent by the head check; no page is asked for.
    let (sim, url, _g) = src(FaultPlan::none(), 0).await;
    let db = common::fresh_db(Backend::Sqlite).await;
    let p = poll(&db.url, &url, &[("ISIR_BUDGET__DAILY", "1")]);
    assert_eq!(p.status.code(), Some(4), "{p:?}");
    assert_eq!(json(&p)["outcome"]["kind"], "budget_spent");
    assert_eq!(sim.stats().requests_total, 1);

    // 5: the first page is garbage; nothing is stored.
    let (sim, url, _g) = src(FaultPlan::none().at(2, FaultKind::Garbage), 0).await;
    let db = common::fresh_db(Backend::Sqlite).await;
    let p = poll(&db.url, &url, &[]);
    assert_eq!(p.status.code(), Some(5), "{p:?}");
    assert_eq!(json(&p)["outcome"]["kind"], "source_error");
    assert_eq!(sim.stats().requests_total, 2, "garbage is not retried");
    let store = common::store(&db).await;
    assert_eq!(store.checkpoint().await.unwrap(), None);
    assert_eq!(store.count_actions().await.unwrap(), 0);

    // 6: the store is lost while the first page is on its way (its PostgreSQL database
    // dropped): nothing stored, exit 6.
    let (sim, url, _g) = src(FaultPlan::none(), 1500).await;
    let db = common::fresh_db(Backend::Postgres).await;
    common::store(&db).await; // migrated, so that the tick reaches its request at once
    let (db_url, source) = (db.url.clone(), url.clone());
    let kid = tokio::task::spawn_blocking(move || poll(&db_url, &source, &[]));
    let t0 = std::time::Instant::now();
    while sim.stats().requests_total < 2 {
        assert!(t0.elapsed().as_secs() < 30, "the page request never came");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let name = db.url.rsplit('/').next().unwrap().to_string();
    let mut admin = <sqlx::PgConnection as sqlx::Connection>::connect(&common::pg_admin_url())
        .await
        .unwrap();
    sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .execute(&mut admin)
        .await
        .unwrap();
    let p = kid.await.unwrap();
    assert_eq!(p.status.code(), Some(6), "{p:?}");
    assert_eq!(json(&p)["outcome"]["kind"], "store_error");

    let (_sim, url, _g) = src(FaultPlan::none(), 0).await;
    let db = common::fresh_db(Backend::Sqlite).await;
    assert_eq!(poll(&db.url, &url, &[]).status.code(), Some(0));
    // 9: `project verify` finds a case document that differs from the replica's.
    let c = isir(&db.url, &["project", "catch-up"], &[]);
    assert!(c.status.success(), "{c:?}");
    let v = isir(&db.url, &["project", "verify"], &[]);
    assert_eq!(v.status.code(), Some(0), "clean before: {v:?}");
    let store = common::store(&db).await;
    let version = common::count(
        &store,
        "SELECT version FROM proj_meta WHERE name = $1",
        "cases",
    )
    .await;
    let mut tx = isir::store::sql::Tx::begin(&store).await.unwrap();
    let changed = tx
        .exec(
            &format!(
                "UPDATE cases_v{version} SET doc = replace(doc, '\"documents\":', '\"documents\":9')"
            ),
            &[],
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(changed > 0);
    let v = isir(&db.url, &["project", "verify"], &[]);
    assert_eq!(v.status.code(), Some(9), "{v:?}");

    // 8: `phase set serve` while verify finds differences is refused, and the phase
    // stays; --force overrides.
    let set = isir(&db.url, &["phase", "set", "serve", "--json"], &[]);
    assert_eq!(set.status.code(), Some(8), "{set:?}");
    assert!(json(&set)["refused"].is_string(), "{set:?}");
    let ph = isir(&db.url, &["phase", "get", "--json"], &[]);
    assert_eq!(json(&ph)["phase"], "ingest");
    let set = isir(&db.url, &["phase", "set", "serve", "--force"], &[]);
    assert_eq!(set.status.code(), Some(0), "{set:?}");
}

/// A request that outlives `api.request_timeout_secs` is answered 408 and logged once as
/// a 408 under its route template (the claim of the request log), not left hanging: a
/// case read held behind a table lock on PostgreSQL, with the statement timeout longer
/// than the request timeout. The same read is answered once the lock is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_its_timeout_is_answered_and_logged_408() {
    let (sim, src, _g) = common::sim(2_000, 1000, 97).await;
    let db = common::fresh_db(Backend::Postgres).await;
    let app = common::projected(&src, &db).await;
    app.store.set_setting("phase", "serve").await.unwrap();
    // A case the register published, from the simulator's truth.
    let case = sim
        .truth_all()
        .into_iter()
        .find(|a| a.case_number != "INS -1/-1")
        .unwrap()
        .case_number;
    let (number, year) = case.strip_prefix("INS ").unwrap().split_once('/').unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (bind, mut child, log) = serve_logged(
        &db.url,
        &[
            ("ISIR_API__REQUEST_TIMEOUT_SECS", "1"),
            ("ISIR_API__STATEMENT_TIMEOUT_MS", "20000"),
        ],
        dir.path(),
    )
    .await;
    let http = reqwest::Client::new();
    let url = format!("http://{bind}/v1/cases/{year}/{number}");
    assert_eq!(http.get(&url).send().await.unwrap().status(), 200);

    // Another session holds the case table: the read waits behind the lock.
    let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
    let mut locker = pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE cases IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *locker)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let r = http
        .get(&url)
        .timeout(std::time::Duration::from_secs(15))
        .send()
        .await
        .expect("the server answers a request past its timeout");
    let took = started.elapsed();
    assert_eq!(r.status(), 408);
    assert!(
        took < std::time::Duration::from_secs(10),
        "answered after {took:?}, not at the 1 s request timeout"
    );
    locker.rollback().await.unwrap();
    assert_eq!(http.get(&url).send().await.unwrap().status(), 200);

    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|l: &serde_json::Value| l["message"] == "request")
        .collect();
    let timed_out: Vec<_> = lines.iter().filter(|l| l["status"] == 408).collect();
    assert_eq!(timed_out.len(), 1, "one 408 line:\n{text}");
    assert_eq!(timed_out[0]["route"], "/v1/cases/{year}/{number}");
    assert_eq!(timed_out[0]["method"], "GET");
    assert!(
        timed_out[0]["duration_ms"].as_f64().unwrap() >= 1000.0,
        "{text}"
    );
    assert!(
        !text.contains(&format!("{year}/{number}")),
        "the case number reached the log:\n{text}"
    );
}

/// A reader that stops early (`isir openapi | head -1`) ends the command quietly: exit 0
/// and nothing on stderr, not a panic. Each output here is larger than a pipe holds
/// (64 KiB), so the command is still writing when the reader goes.
#[test]
fn a_closed_pipe_ends_a_command_quietly() {
    use std::io::Read;
    for args in [
        &["openapi"][..],
        &["completions", "bash"],
        &["completions", "zsh"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_isir"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = [0u8; 1];
        // Read one byte, then close the pipe.
        child.stdout.take().unwrap().read_exact(&mut first).unwrap();
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{args:?}: {o:?}");
        assert!(
            o.stderr.is_empty(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// Settings come from exactly `./isir.toml` (or `--config`): a file of that name in a
/// parent directory is not read. The parent's file here is invalid, so reading it would
/// fail naming its key.
#[test]
fn settings_are_read_from_this_directory_only() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("isir.toml"), "[lease]\nttl_secs = 1\n").unwrap();
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let db = format!("sqlite://{}/r.db", sub.display());
    let run = |cwd: &std::path::Path, args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_isir"))
            .args(args)
            .current_dir(cwd)
            .env("ISIR_DATABASE__URL", &db)
            .output()
            .unwrap()
    };
    let here = run(dir.path(), &["migrate"]);
    assert_eq!(here.status.code(), Some(1), "{here:?}");
    assert!(String::from_utf8_lossy(&here.stderr).contains("lease.ttl_secs"));
    let below = run(&sub, &["migrate"]);
    assert!(below.status.success(), "{below:?}");
    assert!(
        !String::from_utf8_lossy(&below.stderr).contains("settings file read"),
        "{below:?}"
    );
    // The file read is named in the log.
    std::fs::write(sub.join("isir.toml"), "[poll]\nmax_batches_per_tick = 3\n").unwrap();
    let named = run(&sub, &["migrate"]);
    assert!(named.status.success(), "{named:?}");
    let err = String::from_utf8_lossy(&named.stderr);
    assert!(
        err.contains("settings file read") && err.contains("isir.toml"),
        "{err}"
    );
}

/// `isir demo` listens where the settings say (`api.bind` from `ISIR_API__BIND` or
/// `./isir.toml`), like every other command; `--api-bind` overrides them.
#[tokio::test]
async fn the_demo_listens_where_the_settings_say() {
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let dir = tempfile::tempdir().unwrap();
    let (env_port, toml_port) = (free(), free());
    std::fs::write(
        dir.path().join("isir.toml"),
        format!("[api]\nbind = \"127.0.0.1:{toml_port}\"\n"),
    )
    .unwrap();
    let http = reqwest::Client::new();
    for (env, port) in [
        (Some(format!("127.0.0.1:{env_port}")), env_port),
        (None, toml_port),
    ] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_isir"));
        cmd.args(["demo", "--actions", "50", "--database"])
            .arg(format!("sqlite://{}/demo-{port}.db", dir.path().display()))
            .current_dir(dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        if let Some(b) = &env {
            cmd.env("ISIR_API__BIND", b);
        }
        let mut child = cmd.spawn().unwrap();
        let mut up = false;
        for _ in 0..150 {
            if http
                .get(format!("http://127.0.0.1:{port}/healthz"))
                .send()
                .await
                .is_ok()
            {
                up = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let _ = child.wait();
        assert!(up, "the demo did not listen on {port} (from {env:?})");
    }
}

/// A PostgreSQL that refuses connections is named at once, with its address and the
/// refusal, for the writer's commands and the reader's alike (not "pool timed out" ten
/// seconds later). Nothing listens on port 1 of loopback.
#[test]
fn an_unreachable_postgres_is_named_at_once() {
    for args in [
        &["status"][..],
        &["export", "--out", "/nonexistent-isir-test"],
    ] {
        let t0 = std::time::Instant::now();
        let o = isir("postgres://postgres@127.0.0.1:1/isir", args, &[]);
        let took = t0.elapsed();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("cannot connect to PostgreSQL at 127.0.0.1:1")
                && err.contains("Connection refused"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("timed out"), "{args:?}: {err}");
        assert!(
            took < std::time::Duration::from_secs(5),
            "{args:?}: {took:?}"
        );
    }
}

/// A mistyped `database.url` is an error, not a new empty replica: the commands that
/// read or repair a replica say "no replica at ..." and exit 1, and leave no file
/// behind; only the commands meant to make one (`migrate`, the writer's `run` and
/// `poll --once`, `snapshot restore`, `demo`) create it.
#[tokio::test]
async fn only_the_commands_that_make_a_replica_create_one() {
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("typo.db");
    let url = format!("sqlite://{}", typo.display());
    for args in [
        &["status"][..],
        &["checkpoint", "get"],
        &["project", "status"],
        &["watch", "list"],
        &["phase", "get"],
        &["lease", "show"],
        &["quarantine", "list"],
    ] {
        let o = isir(&url, args, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("no replica at sqlite://"), "{args:?}: {err}");
        assert!(!typo.exists(), "{args:?} created {}", typo.display());
    }
    // The same on PostgreSQL: a database without the replica's tables stays empty.
    let pg = common::fresh_db(Backend::Postgres).await;
    let o = isir(&pg.url, &["status"], &[]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("no replica at postgres://"));
    // `migrate` makes one, and then the others work.
    assert!(isir(&url, &["migrate"], &[]).status.success());
    assert!(typo.exists());
    assert!(isir(&url, &["status"], &[]).status.success());
}

/// Every key of a JSON document, with its path.
fn keys(v: &serde_json::Value, path: &str, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                let p = format!("{path}.{k}");
                out.push(p.clone());
                keys(x, &p, out);
            }
        }
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                keys(x, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// A time as RFC 3339 (the form the text prints), not epoch milliseconds.
fn rfc3339(v: &serde_json::Value, what: &str) -> chrono::DateTime<chrono::FixedOffset> {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("{what} is not an RFC 3339 string: {v}"));
    chrono::DateTime::parse_from_rfc3339(s).unwrap_or_else(|e| panic!("{what} = {s}: {e}"))
}

/// `isir status --json` has one schema: no serde `Ok`/`Err` wrappers around the lease and
/// the budget (both give `available` and `error`), and every time in RFC 3339, as the
/// text form shows it (issue 35). Figures from the simulator: what it served and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_json_has_one_schema_and_rfc3339_times() {
    let (sim, src, _g) = common::sim(1_500, 1000, 98).await;
    let db = common::fresh_db(Backend::Sqlite).await;
    let env = [("ISIR_SOURCE__URL", src.as_str())];
    let p = isir(&db.url, &["poll", "--once"], &env);
    assert_eq!(p.status.code(), Some(0), "{p:?}");
    let st = isir(&db.url, &["status", "--json"], &env);
    assert!(st.status.success(), "{st:?}");
    let v = json(&st);
    let mut all = Vec::new();
    keys(&v, "", &mut all);
    let wrapped: Vec<_> = all
        .iter()
        .filter(|k| k.ends_with(".Ok") || k.ends_with(".Err"))
        .collect();
    assert!(
        wrapped.is_empty(),
        "serde's Result in the schema: {wrapped:?}"
    );

    let now = chrono::Utc::now();
    assert_eq!(v["lease"]["available"], true, "{}", v["lease"]);
    assert_eq!(v["lease"]["error"], serde_json::Value::Null);
    assert_eq!(v["budget"]["available"], true);
    assert_eq!(v["budget"]["error"], serde_json::Value::Null);
    // The budget counted what the register received.
    assert_eq!(
        v["budget"]["used"].as_u64(),
        Some(sim.stats().requests_total)
    );
    rfc3339(&v["budget"]["resets_at"], "budget.resets_at");
    rfc3339(&v["head_checked_at"], "head_checked_at");
    let at = rfc3339(&v["last_tick"]["at"], "last_tick.at");
    assert!(
        (now - at.to_utc()).num_seconds().abs() < 300,
        "{at} is not now"
    );
    for (i, t) in v["recent_ticks"].as_array().unwrap().iter().enumerate() {
        rfc3339(&t["at"], &format!("recent_ticks[{i}].at"));
    }
    let hours = v["stored_per_hour"].as_array().unwrap();
    let mut stored = 0;
    for h in hours {
        rfc3339(&h["hour"], "stored_per_hour[].hour");
        stored += h["actions"].as_i64().unwrap();
    }
    assert_eq!(stored as usize, sim.truth_all().len());

    // A lease back end that cannot be reached: the same keys, `available` false, the
    // error named, and still no `Err`.
    let down = isir(
        &db.url,
        &["status", "--json"],
        &[("ISIR_REDIS__URL", "redis://127.0.0.1:1")],
    );
    assert!(down.status.success(), "{down:?}");
    let d = json(&down);
    assert_eq!(d["lease"]["available"], false, "{}", d["lease"]);
    assert!(d["lease"]["error"].as_str().is_some_and(|e| !e.is_empty()));
    let mut all = Vec::new();
    keys(&d, "", &mut all);
    assert!(
        !all.iter()
            .any(|k| k.ends_with(".Ok") || k.ends_with(".Err"))
    );
}

/// `isir status` says which replica answers on `api.bind`: `/healthz` carries the
/// replica's identifier (the `replica_id` setting `migrate` makes, read here with SQL),
/// and status compares it with its own. Another replica's API on the port is named as
/// such, not as "answering" (issue 35).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_names_the_replica_that_answers() {
    let a = common::fresh_db(Backend::Sqlite).await;
    let b = common::fresh_db(Backend::Sqlite).await;
    for db in [&a, &b] {
        let m = isir(&db.url, &["migrate"], &[]);
        assert!(m.status.success(), "{m:?}");
    }
    let id_of = |url: String| async move {
        let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
        let id: String = sqlx::query_scalar("SELECT value FROM settings WHERE key = 'replica_id'")
            .fetch_one(&pool)
            .await
            .unwrap();
        pool.close().await;
        id
    };
    let (ida, idb) = (id_of(a.url.clone()).await, id_of(b.url.clone()).await);
    assert_ne!(ida, idb, "two replicas, one identifier");
    // A second migrate keeps the identifier.
    isir(&a.url, &["migrate"], &[]);
    assert_eq!(id_of(a.url.clone()).await, ida);

    let dir = tempfile::tempdir().unwrap();
    let (bind, child, _log) = serve_logged(&a.url, &[], dir.path()).await;
    let _stop = Stop(child);
    let health: serde_json::Value = reqwest::get(format!("http://{bind}/healthz"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["replica"], ida.as_str());
    // The identifier is not the replica's secret.
    let pool = sqlx::SqlitePool::connect(&a.url).await.unwrap();
    let secrets: Vec<String> = sqlx::query_scalar("SELECT value FROM secrets")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert!(!secrets.iter().any(|s| s.contains(&ida)));

    let env = [("ISIR_API__BIND", bind.as_str())];
    let mine = isir(&a.url, &["status", "--json"], &env);
    let v = json(&mine);
    assert_eq!(v["api"]["reachable"], true);
    assert_eq!(v["api"]["replica"], ida.as_str());
    assert_eq!(v["api"]["answering_replica"], ida.as_str());
    let text = isir(&a.url, &["status"], &env);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("answering: this replica"), "{text}");

    // Replica b's status, with a's API on the port.
    let other = isir(&b.url, &["status", "--json"], &env);
    let v = json(&other);
    assert_eq!(v["api"]["replica"], idb.as_str());
    assert_eq!(v["api"]["answering_replica"], ida.as_str());
    let text = isir(&b.url, &["status"], &env);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("ANOTHER replica") && text.contains(&ida) && !text.contains("this replica)"),
        "{text}"
    );
}

/// `isir serve` with an admin listener reads the replica read-only: the admin routes that
/// change watchlists answer 409 with the reason and the commands that can (not a 500
/// from a refused write), and those that read still answer (issue 35).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_admin_refuses_watchlist_changes_with_the_command_to_use() {
    let db = common::fresh_db(Backend::Sqlite).await;
    assert!(isir(&db.url, &["migrate"], &[]).status.success());
    let admin_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let admin = format!("127.0.0.1:{admin_port}");
    // SHA-256 of "ops" by sha256sum, as an operator writes it into the settings.
    let digest = {
        let out = Command::new("sh")
            .args(["-c", "printf %s ops | sha256sum"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)[..64].to_string()
    };
    let dir = tempfile::tempdir().unwrap();
    let (_bind, child, _log) = serve_logged(
        &db.url,
        &[
            ("ISIR_ADMIN__BIND", admin.as_str()),
            ("ISIR_ADMIN__KEY_SHA256", digest.as_str()),
        ],
        dir.path(),
    )
    .await;
    let _stop = Stop(child);
    let http = reqwest::Client::new();
    let r = http
        .post(format!("http://{admin}/admin/watchlists"))
        .header("x-admin-key", "ops")
        .json(&serde_json::json!({"name": "partners", "entries": [{"ico": "12345678"}]}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let body = r.text().await.unwrap();
    assert_eq!(status, 409, "{body}");
    // The command the README documents for it.
    assert!(body.contains("isir watch add"), "{body}");
    assert!(body.contains("read-only"), "{body}");
    for (method, path) in [
        (reqwest::Method::PATCH, "/admin/watchlists/partners"),
        (reqwest::Method::DELETE, "/admin/watchlists/partners"),
    ] {
        let r = http
            .request(method.clone(), format!("http://{admin}{path}"))
            .header("x-admin-key", "ops")
            .json(&serde_json::json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 409, "{method} {path}");
    }
    // Reading still works.
    let r = http
        .get(format!("http://{admin}/admin/watchlists?admin_key=ops"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

/// Stops a server the test started, also when the test fails (no process outlives it).
struct Stop(std::process::Child);

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
