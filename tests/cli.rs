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

#[tokio::test]
async fn json_logs_and_a_request_line_without_query_values() {
    let db = common::fresh_db(Backend::Sqlite).await;
    let url = db.url.clone();
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

    // `isir serve` logs one line a request: route template, status, never the values.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let bind = format!("127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_isir"))
        .arg("serve")
        .env("ISIR_DATABASE__URL", &url)
        .env("ISIR_API__BIND", &bind)
        .env("ISIR_LOG", "info")
        .env("ISIR_LOG__FORMAT", "json")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let http = reqwest::Client::new();
    let mut up = false;
    for _ in 0..100 {
        if http
            .get(format!("http://{bind}/healthz"))
            .send()
            .await
            .is_ok()
        {
            up = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(up, "isir serve did not start");
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
