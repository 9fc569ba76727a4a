//! Secrets at rest (issue 33): the modes of a new SQLite replica under umask 022, the
//! warning about one others can read, the PostgreSQL reader role that serves without
//! the privacy key or webhook secrets, operator output without personal data, and the
//! nightly purge that touches only its own exports. Expectations come from the file
//! system, PostgreSQL's own refusals and the simulator's truth, not from the code under
//! test.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::Backend;
use sqlx::Connection;

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// `isir ARGS` under umask 022 (what most shells and service managers give), with
/// `env`. The shell also creates `control` (a file the umask alone decides), so a test
/// shows that the umask was in force.
fn under_umask(args: &[&str], env: &[(&str, &str)], control: &Path) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg("umask 022; : > \"$0\"; shift; exec \"$@\"")
        .arg(control)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_isir"))
        .args(args)
        .env("ISIR_LOG", "info,sqlx=error")
        .envs(env.iter().copied());
    c
}

fn run(c: &mut Command) -> Output {
    let o = c.output().unwrap();
    assert!(
        o.status.success(),
        "{:?}\nstdout: {}\nstderr: {}",
        c,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn wal_and_shm(db: &Path) -> [PathBuf; 2] {
    let [_, wal, shm] = isir::store::files::replica_files(db);
    [wal, shm]
}

/// Every file of the replica `db` that exists is 0600; with `all`, the -wal and -shm
/// must exist too.
fn assert_private(what: &str, db: &Path, all: bool) {
    assert!(db.exists(), "{what}: no {}", db.display());
    for p in isir::store::files::replica_files(db) {
        if p.exists() {
            assert_eq!(mode(&p), 0o600, "{what}: {} is {:o}", p.display(), mode(&p));
        } else {
            assert!(!all, "{what}: {} was not made", p.display());
        }
    }
}

/// Waits until `db`'s -wal and -shm exist (a running daemon holds them open).
fn wait_for_wal(child: &mut Child, db: &Path, log: &Path) {
    let t = Instant::now();
    while !wal_and_shm(db).iter().all(|p| p.exists()) {
        if let Some(s) = child.try_wait().unwrap() {
            panic!(
                "exited ({s}) before its WAL: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(t.elapsed() < Duration::from_secs(60), "no WAL after 60 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The files are opened before they are written: give SQLite a moment.
    std::thread::sleep(Duration::from_millis(300));
}

fn spawn_logged(c: &mut Command, log: &Path) -> Child {
    let f = std::fs::File::create(log).unwrap();
    c.stdout(Stdio::from(f.try_clone().unwrap()))
        .stderr(Stdio::from(f))
        .spawn()
        .unwrap()
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// `migrate`, `run`, `demo` and `snapshot restore` under umask 022 each make a replica
/// (and its -wal and -shm) that only its owner can read.
#[test]
fn new_sqlite_replicas_are_private_under_umask_022() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = |n: &str| format!("sqlite://{}", d.join(n).display());
    let control = d.join("control");

    // migrate
    run(&mut under_umask(
        &["migrate"],
        &[("ISIR_DATABASE__URL", &url("migrate.db"))],
        &control,
    ));
    assert_eq!(mode(&control), 0o644, "the umask was not 022");
    assert_private("migrate", &d.join("migrate.db"), false);

    // run, against a source that refuses connections: the replica is made and its WAL
    // opened all the same.
    let log = d.join("run.log");
    let mut child = spawn_logged(
        &mut under_umask(
            &["run"],
            &[
                ("ISIR_DATABASE__URL", &url("run.db")),
                ("ISIR_SOURCE__URL", "http://127.0.0.1:9/"),
                ("ISIR_API__BIND", "127.0.0.1:0"),
                ("ISIR_SOURCE__CONNECT_TIMEOUT_SECS", "1"),
            ],
            &control,
        ),
        &log,
    );
    wait_for_wal(&mut child, &d.join("run.db"), &log);
    assert_private("run", &d.join("run.db"), true);
    stop(child);

    // demo
    let log = d.join("demo.log");
    let mut child = spawn_logged(
        &mut under_umask(
            &[
                "demo",
                "--database",
                &url("demo.db"),
                "--api-bind",
                "127.0.0.1:0",
                "--actions",
                "300",
                "--period",
                "1",
            ],
            &[],
            &control,
        ),
        &log,
    );
    wait_for_wal(&mut child, &d.join("demo.db"), &log);
    assert_private("demo", &d.join("demo.db"), true);
    stop(child);

    // snapshot restore into a new replica (of the demo's, which holds actions)
    let snap = d.join("snap");
    run(&mut under_umask(
        &["snapshot", "create", "--out", snap.to_str().unwrap()],
        &[("ISIR_DATABASE__URL", &url("demo.db"))],
        &control,
    ));
    run(&mut under_umask(
        &[
            "snapshot",
            "restore",
            snap.to_str().unwrap(),
            "--no-project",
        ],
        &[("ISIR_DATABASE__URL", &url("restored.db"))],
        &control,
    ));
    assert_private("snapshot restore", &d.join("restored.db"), false);
    assert_eq!(mode(&snap), 0o700);
}

/// A replica file others can read is named at start-up, with its mode, in one line
/// that holds nothing else of it; a private one is not.
#[test]
fn an_existing_replica_open_to_others_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    let url = format!("sqlite://{}", db.display());
    let control = dir.path().join("control");
    let status = |env: &[(&str, &str)]| {
        let o = run(&mut under_umask(&["status"], env, &control));
        String::from_utf8_lossy(&o.stderr).to_string()
    };
    let env = [("ISIR_DATABASE__URL", url.as_str())];
    run(&mut under_umask(&["migrate"], &env, &control));
    let quiet = status(&env);
    assert!(!quiet.contains("group or others"), "{quiet}");
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let warned = status(&env);
    let lines: Vec<&str> = warned
        .lines()
        .filter(|l| l.contains("group or others"))
        .collect();
    assert_eq!(lines.len(), 1, "{warned}");
    assert!(
        lines[0].contains(db.to_str().unwrap()) && lines[0].contains("0644"),
        "{warned}"
    );
    // The mode of an operator's file is theirs to choose: warned about, never changed.
    assert_eq!(mode(&db), 0o644);
    // `isir serve` (read-only) warns too.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = dir.path().join("serve.log");
    let bind = format!("127.0.0.1:{port}");
    let child = spawn_logged(
        &mut under_umask(
            &["serve"],
            &[("ISIR_DATABASE__URL", &url), ("ISIR_API__BIND", &bind)],
            &control,
        ),
        &log,
    );
    let t = Instant::now();
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("group or others")
    {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "serve did not warn: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    stop(child);
}

// ---------------------------------------------------------------------------------------
// The PostgreSQL reader role

/// A role made for one test, dropped with what it was granted when the test ends.
struct Role {
    name: String,
    db_url: String,
}

impl Drop for Role {
    fn drop(&mut self) {
        let (name, db_url) = (self.name.clone(), self.db_url.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if let Ok(mut c) = sqlx::PgConnection::connect(&db_url).await {
                    let _ = sqlx::query(&format!("DROP OWNED BY {name}"))
                        .execute(&mut c)
                        .await;
                }
                let mut c = sqlx::PgConnection::connect(&common::pg_admin_url())
                    .await
                    .unwrap();
                // Its database may hold its grants until dropped: retry once after.
                if let Err(e) = sqlx::query(&format!("DROP ROLE IF EXISTS {name}"))
                    .execute(&mut c)
                    .await
                {
                    eprintln!("role {name} not dropped: {e}");
                }
            })
        })
        .join();
    }
}

fn as_role(url: &str, role: &str) -> String {
    // postgres://USER@HOST/DB -> postgres://ROLE@HOST/DB
    let (scheme, rest) = url.split_once("://").unwrap();
    let host = rest.split_once('@').map_or(rest, |(_, h)| h);
    format!("{scheme}://{role}@{host}")
}

async fn denied(c: &mut sqlx::PgConnection, sql: &str) -> bool {
    match sqlx::query(sql).fetch_all(&mut *c).await {
        Err(sqlx::Error::Database(d)) => d.code().as_deref() == Some("42501"),
        other => panic!("{sql}: not refused: {other:?}"),
    }
}

fn free_bind() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}")
}

/// `isir serve` on `url` (with `env`), until it answers `/healthz` or exits.
async fn serve(url: &str, env: &[(&str, &str)], log: &Path) -> (Child, String) {
    let bind = free_bind();
    let mut c = Command::new(env!("CARGO_BIN_EXE_isir"));
    c.arg("serve")
        .env("ISIR_DATABASE__URL", url)
        .env("ISIR_API__BIND", &bind)
        .env("ISIR_LOG", "info,sqlx=error")
        .envs(env.iter().copied());
    let mut child = spawn_logged(&mut c, log);
    let http = reqwest::Client::new();
    let t = Instant::now();
    loop {
        if let Ok(r) = http.get(format!("http://{bind}/healthz")).send().await
            && r.status().is_success()
        {
            return (child, format!("http://{bind}"));
        }
        if child.try_wait().unwrap().is_some() || t.elapsed() > Duration::from_secs(30) {
            stop(child);
            return (child_exited(), String::new());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A stand-in for a server that did not start (its log says why).
fn child_exited() -> Child {
    Command::new("true").spawn().unwrap()
}

async fn get(base: &str, path: &str) -> (u16, String) {
    let r = reqwest::get(format!("{base}{path}")).await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// A reader role made as `docs/PRIVACY.md` says (`CREATE ROLE`, `isir db grant-reader`,
/// the key from `isir privacy export-key`) serves the same answers as the writer's role,
/// and PostgreSQL refuses it the privacy key and the webhook secrets.
#[tokio::test]
async fn a_reader_role_serves_without_the_secrets() {
    let (sim, url, _g) = common::sim(3_000, 1000, 33).await;
    let db = common::fresh_db(Backend::Postgres).await;
    let app = common::projected(&url, &db).await;
    app.store.set_setting("phase", "serve").await.unwrap();
    let owner = db.url.clone();
    let mut c = sqlx::PgConnection::connect(&owner).await.unwrap();
    sqlx::query(
        "INSERT INTO watchlists (name, roles, webhook_url, secret, previous_secret, created_at, \
         created_watermark, entries, cursor) VALUES ('w', 'debtor', 'https://hooks.example/x', \
         'whsec_current', 'whsec_previous', 0, 0, 0, 0)",
    )
    .execute(&mut c)
    .await
    .unwrap();
    let role = Role {
        name: format!("isir_reader_{}", std::process::id()),
        db_url: owner.clone(),
    };
    sqlx::query(&format!("CREATE ROLE {} LOGIN", role.name))
        .execute(&mut c)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("privacy.key");
    let isir = |args: &[&str]| {
        run(Command::new(env!("CARGO_BIN_EXE_isir"))
            .args(args)
            .env("ISIR_DATABASE__URL", &owner)
            .env("ISIR_LOG", "warn"))
    };
    isir(&["db", "grant-reader", &role.name]);
    isir(&["privacy", "export-key", "--out", key_file.to_str().unwrap()]);
    assert_eq!(mode(&key_file), 0o600);
    let key: String = sqlx::query_scalar("SELECT value FROM secrets WHERE key = 'privacy_key'")
        .fetch_one(&mut c)
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(&key_file).unwrap().trim(), key);

    // PostgreSQL itself refuses the reader the secrets, and gives it the rest.
    let reader = as_role(&owner, &role.name);
    let mut r = sqlx::PgConnection::connect(&reader).await.unwrap();
    assert!(denied(&mut r, "SELECT value FROM secrets").await);
    assert!(denied(&mut r, "SELECT secret FROM watchlists").await);
    assert!(denied(&mut r, "SELECT previous_secret FROM watchlists").await);
    assert!(denied(&mut r, "SELECT * FROM watchlists").await);
    assert!(
        denied(
            &mut r,
            "INSERT INTO settings (key, value) VALUES ('x', 'y')"
        )
        .await
    );
    let n: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM watchlists WHERE webhook_url IS NOT NULL")
            .fetch_one(&mut r)
            .await
            .unwrap();
    assert_eq!(n, 1);
    let cases: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM cases")
        .fetch_one(&mut r)
        .await
        .unwrap();
    assert!(cases > 0);

    // Without the key file the reader's server refuses to start, and says what to do.
    let log = dir.path().join("nokey.log");
    let (child, base) = serve(&reader, &[], &log).await;
    stop(child);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(base.is_empty(), "served without the key: {text}");
    assert!(text.contains("privacy_key_file"), "{text}");

    // With it, it answers as the writer's role does: the same person references and
    // cursors' pages, the same search.
    let key_env = [(
        "ISIR_DATABASE__PRIVACY_KEY_FILE",
        key_file.to_str().unwrap(),
    )];
    let (rchild, rbase) = serve(&reader, &key_env, &dir.path().join("reader.log")).await;
    let (ochild, obase) = serve(&owner, &[], &dir.path().join("owner.log")).await;
    assert!(
        !rbase.is_empty(),
        "{}",
        std::fs::read_to_string(dir.path().join("reader.log")).unwrap()
    );
    let truth = sim.truth_debtors();
    let d = truth
        .iter()
        .find(|d| !d.erased && d.person.name.is_some())
        .unwrap();
    let name = d.person.name.clone().unwrap();
    let (y, n) = {
        let (n, y) = d
            .case_number
            .strip_prefix("INS ")
            .unwrap()
            .split_once('/')
            .unwrap();
        (y.to_string(), n.to_string())
    };
    for path in [
        "/v1/cases?limit=50&sort=latest".to_string(),
        format!("/v1/cases/{y}/{n}"),
        format!("/v1/search?q={name}&limit=50"),
        format!("/v1/subjects?name={name}&limit=50"),
    ] {
        let (rs, rt) = get(&rbase, &path).await;
        let (os, ot) = get(&obase, &path).await;
        assert_eq!((rs, os), (200, 200), "{path}: {rt}");
        // A page link is sealed afresh each time (a random nonce): the rest must be
        // equal, person references included.
        let unlinked = |t: &str| {
            let mut v: serde_json::Value = serde_json::from_str(t).unwrap();
            v.as_object_mut().unwrap().remove("next");
            v
        };
        assert!(
            unlinked(&rt) == unlinked(&ot),
            "{path}: the reader's answer differs"
        );
        if path.starts_with("/v1/cases/") || path.starts_with("/v1/search") {
            assert!(rt.contains(&d.case_number), "{path}: {rt}");
        }
    }
    // A page link the writer's server sealed opens on the reader's (the same key).
    let (_, page) = get(&obase, "/v1/cases?limit=5").await;
    let next: serde_json::Value = serde_json::from_str(&page).unwrap();
    let next = next["next"].as_str().unwrap().to_string();
    let (s, t) = get(&rbase, &next).await;
    assert_eq!(s, 200, "{t}");
    stop(rchild);
    stop(ochild);

    // An export as the reader is refused with the reason (exports run as the writer).
    let o = Command::new(env!("CARGO_BIN_EXE_isir"))
        .args(["export", "--out"])
        .arg(dir.path().join("export"))
        .env("ISIR_DATABASE__URL", &reader)
        .env("ISIR_LOG", "warn")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("run exports as the writer's role"), "{err}");

    // A key file of another replica is refused where the database's key is readable.
    let other = dir.path().join("other.key");
    std::fs::write(&other, "11".repeat(32)).unwrap();
    let (child, base) = serve(
        &owner,
        &[("ISIR_DATABASE__PRIVACY_KEY_FILE", other.to_str().unwrap())],
        &dir.path().join("other.log"),
    )
    .await;
    stop(child);
    assert!(base.is_empty());
    let text = std::fs::read_to_string(dir.path().join("other.log")).unwrap();
    assert!(text.contains("is not this replica's privacy key"), "{text}");
    drop(r);
    drop(c);
}

/// `db grant-reader` on SQLite says why it does not apply, and fails.
#[tokio::test]
async fn grant_reader_on_sqlite_is_refused() {
    let db = common::fresh_db(Backend::Sqlite).await;
    common::store(&db).await;
    let o = Command::new(env!("CARGO_BIN_EXE_isir"))
        .args(["db", "grant-reader", "someone"])
        .env("ISIR_DATABASE__URL", &db.url)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("PostgreSQL"));
}

// ---------------------------------------------------------------------------------------
// Operator output

/// `isir project verify` finding a difference in a debtor's party document names the
/// case, the person's opaque reference and the fields, and none of the debtor's personal
/// values (the simulator's truth), on both back ends.
async fn verify_output_holds_no_personal_data(b: Backend) {
    let (sim, url, _g) = common::sim(3_000, 1000, 34).await;
    let db = common::fresh_db(b).await;
    let app = common::projected(&url, &db).await;
    let version = common::count(
        &app.store,
        "SELECT version FROM proj_meta WHERE name = $1",
        "parties",
    )
    .await;
    let table = format!("parties_v{version}");
    // A natural-person debtor whose birth number and street the projection holds.
    let mut picked = None;
    for d in sim.truth_debtors().into_iter().filter(|d| !d.erased) {
        let (Some(rc), Some(street)) = (
            d.person.birth_number.clone(),
            d.person.addresses.iter().find_map(|a| a.street.clone()),
        ) else {
            continue;
        };
        let mut tx = isir::store::sql::Tx::begin_read(&app.store).await.unwrap();
        let n = tx
            .int(
                "SELECT COUNT(*) FROM parties WHERE case_number = $1 AND doc LIKE $2 AND doc LIKE $3",
                &[
                    d.case_number.clone().into(),
                    format!("%{rc}%").into(),
                    format!("%{street}%").into(),
                ],
            )
            .await
            .unwrap()
            .unwrap_or(0);
        tx.commit().await.unwrap();
        if n == 1 {
            picked = Some((d, rc, street));
            break;
        }
    }
    let (d, rc, street) = picked.expect("a natural-person debtor in the projection");
    // The projection is tampered with: another birth number and street (in the cells
    // `readmodel::party_cells` stores the person as: the birth number's text where it
    // differs from its key, else the key; the addresses' JSON).
    let mut tx = isir::store::sql::Tx::begin(&app.store).await.unwrap();
    tx.exec(
        &format!(
            "UPDATE {table} SET birth_number_text = CASE WHEN COALESCE(birth_number_text, rc) = $1 \
             THEN '000101/0000' ELSE birth_number_text END, addresses = REPLACE(addresses, $2, 'Jinde') \
             WHERE case_number = $3"
        ),
        &[
            rc.clone().into(),
            street.clone().into(),
            d.case_number.clone().into(),
        ],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_isir"))
        .args(["project", "verify", "--sample", "100000"])
        .env("ISIR_DATABASE__URL", &db.url)
        .env("ISIR_LOG", "info,sqlx=error")
        .output()
        .unwrap();
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        o.status.code(),
        Some(9),
        "verify found no difference: {out}"
    );
    let privacy = isir::store::key::load(&app.store).await.unwrap();
    let line = out
        .lines()
        .find(|l| l.contains(&format!("parties {} ", d.case_number)))
        .unwrap_or_else(|| panic!("no difference named for {}: {out}", d.case_number));
    assert!(
        line.contains(&privacy.person_ref(&d.person.id)),
        "no person reference: {line}"
    );
    assert!(
        line.contains("birth_number") && line.contains("street"),
        "{line}"
    );
    let mut personal = vec![
        rc.clone(),
        rc.replace('/', ""),
        street.clone(),
        d.person.id.trim().to_string(),
        "000101/0000".into(),
        "Jinde".into(),
    ];
    personal.extend(d.person.name.clone());
    personal.extend(d.person.first_name.clone());
    personal.extend(d.person.birth_date.clone().map(|b| b[..10].to_string()));
    for p in personal.iter().filter(|p| p.len() > 2) {
        assert!(
            !out.contains(p.as_str()),
            "{p:?} in the output of verify: {out}"
        );
    }
    // `--json` carries the same text.
    let j = Command::new(env!("CARGO_BIN_EXE_isir"))
        .args(["project", "verify", "--sample", "100000", "--json"])
        .env("ISIR_DATABASE__URL", &db.url)
        .output()
        .unwrap();
    let jt = String::from_utf8_lossy(&j.stdout);
    assert!(jt.contains(&d.case_number));
    for p in personal.iter().filter(|p| p.len() > 2) {
        assert!(!jt.contains(p.as_str()), "{p:?} in verify --json");
    }
}

#[tokio::test]
async fn verify_output_holds_no_personal_data_sqlite() {
    verify_output_holds_no_personal_data(Backend::Sqlite).await;
}

#[tokio::test]
async fn verify_output_holds_no_personal_data_postgres() {
    verify_output_holds_no_personal_data(Backend::Postgres).await;
}

// ---------------------------------------------------------------------------------------
// The nightly purge

fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(tree(&p));
        } else {
            out.push((p.display().to_string(), std::fs::read(&p).unwrap()));
        }
    }
    out.sort();
    out
}

/// The nightly run deletes (retention) and rewrites (erasure) only its own exports: a
/// snapshot kept in `export.dir` (even one named as an export), a directory with
/// another tool's `manifest.json`, and a symbolic link to an old export elsewhere are
/// left as they are; old exports of its own beyond `export.keep` go.
async fn purge_touches_only_its_own(b: Backend) {
    let (_sim, url, _g) = common::sim(20_000, 1000, 35).await;
    let db = common::fresh_db(b).await;
    let app = common::projected(&url, &db).await;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("exports");
    std::fs::create_dir_all(&dir).unwrap();
    // A snapshot kept there, once under its own name and once under an export's.
    for name in ["snapshot-keep", "2000-01-01T000000"] {
        isir::snapshot::create(&app.store, &dir.join(name), -1, 1000, false, false)
            .await
            .unwrap();
    }
    // Another tool's directory with a manifest of its own, named as an export.
    let foreign = dir.join("2000-01-01T000001");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(
        foreign.join("manifest.json"),
        r#"{"tool": "other", "files": []}"#,
    )
    .unwrap();
    std::fs::write(foreign.join("data.csv"), "a,b\n1,2\n").unwrap();
    // A real export of ours elsewhere, old (watermark before every erasure), and a link
    // to it from export.dir.
    let outside = root.path().join("outside").join("2000-01-01T000002");
    let mut o = common::export_opts(&outside);
    o.include_pii = true;
    isir::export::export(&app.store, &o).await.unwrap();
    let mf = outside.join("manifest.json");
    let mut m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&mf).unwrap()).unwrap();
    m["watermark"]["action_id"] = serde_json::json!(-1);
    std::fs::write(&mf, serde_json::to_string_pretty(&m).unwrap()).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("2000-01-01T000002")).unwrap();
    let erasures = common::count(
        &app.store,
        "SELECT COUNT(*) FROM erasures WHERE case_number <> $1",
        "",
    )
    .await;
    assert!(erasures > 0, "the stream holds erasures to purge");

    let decoys = [
        dir.join("snapshot-keep"),
        dir.join("2000-01-01T000000"),
        foreign.clone(),
        outside.clone(),
    ];
    let before: Vec<_> = decoys.iter().map(|d| tree(d)).collect();
    let n = common::nightly(&dir, 2, false);
    let mut ours = Vec::new();
    for _ in 0..3 {
        let m = isir::export::nightly_once(&app.store, &n).await.unwrap();
        ours.push(m.written_at);
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    let after: Vec<_> = decoys.iter().map(|d| tree(d)).collect();
    for ((d, b), a) in decoys.iter().zip(&before).zip(&after) {
        assert!(!b.is_empty());
        let names = |t: &[(String, Vec<u8>)]| t.iter().map(|f| f.0.clone()).collect::<Vec<_>>();
        assert!(
            b == a,
            "{} was changed: {:?} -> {:?}",
            d.display(),
            names(b),
            names(a)
        );
    }
    assert!(
        std::fs::symlink_metadata(dir.join("2000-01-01T000002"))
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link was removed"
    );
    // Its own: the newest two kept, the oldest gone.
    let listed = isir::export::list_exports(&dir);
    assert_eq!(listed.len(), 2, "{listed:?}");
    let entries: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("20") && !n.starts_with("2000-"))
        .collect();
    assert_eq!(
        entries.len(),
        2,
        "old exports beyond export.keep stay: {entries:?}"
    );
}

#[tokio::test]
async fn purge_touches_only_its_own_sqlite() {
    purge_touches_only_its_own(Backend::Sqlite).await;
}

#[tokio::test]
async fn purge_touches_only_its_own_postgres() {
    purge_touches_only_its_own(Backend::Postgres).await;
}

/// The purge reads and rewrites only files of the export itself: a file the manifest
/// names that is a link (to a file elsewhere), or a name that leaves the directory, gets
/// the whole export removed, and what they point at stays as it was. A sound export is
/// rewritten, its manifest's row counts those of its files (counted here as CSV records).
#[tokio::test]
async fn the_purge_never_reads_or_writes_through_a_link() {
    let (sim, url, _g) = common::sim(20_000, 1000, 35).await;
    let db = common::fresh_db(Backend::Sqlite).await;
    let app = common::projected(&url, &db).await;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("exports");
    let outside = root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    // Three exports from before every erasure (watermark -1).
    let make = |name: &str| dir.join(name);
    let names = [
        "2000-01-01T000001",
        "2000-01-01T000002",
        "2000-01-01T000003",
    ];
    // All written first: an export purges the older ones beside it.
    for name in names {
        isir::export::export(&app.store, &common::export_opts(&make(name)))
            .await
            .unwrap();
    }
    for name in names {
        let mf = make(name).join("manifest.json");
        let mut m: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&mf).unwrap()).unwrap();
        m["watermark"]["action_id"] = serde_json::json!(-1);
        if name.ends_with('2') {
            // A name that leaves the directory, to a real file outside.
            std::fs::write(
                outside.join("elsewhere.csv"),
                "case_number,role\nx,DLUŽNÍK\n",
            )
            .unwrap();
            for f in m["files"].as_array_mut().unwrap() {
                if f["table"] == "parties" {
                    f["name"] = serde_json::json!("../../outside/elsewhere.csv");
                }
            }
        }
        std::fs::write(&mf, serde_json::to_string_pretty(&m).unwrap()).unwrap();
    }
    // In the first, parties.csv is a link to a file elsewhere (with the same rows).
    let linked = make("2000-01-01T000001").join("parties.csv");
    std::fs::rename(&linked, outside.join("parties.csv")).unwrap();
    std::os::unix::fs::symlink(outside.join("parties.csv"), &linked).unwrap();
    let before = tree(&outside);

    let sound = make("2000-01-01T000003");
    // Written after the erasures, it holds no erased debtor: give it one, a copy of its
    // first party row under an erased case (from the stream's truth) as debtor.
    let erased: Vec<String> = sim
        .truth_debtors()
        .into_iter()
        .filter(|d| d.erased)
        .map(|d| d.case_number)
        .collect();
    let parties = sound.join("parties.csv");
    let mut rd = csv::Reader::from_path(&parties).unwrap();
    let headers = rd.headers().unwrap().clone();
    let mut rows: Vec<csv::StringRecord> = rd.records().map(|r| r.unwrap()).collect();
    let mut extra: Vec<String> = rows[0].iter().map(str::to_string).collect();
    let at = |n: &str| headers.iter().position(|h| h == n).unwrap();
    extra[at("case_number")] = erased[0].clone();
    extra[at("role")] = "DLUŽNÍK".into();
    rows.push(csv::StringRecord::from(extra));
    let mut w = csv::Writer::from_path(&parties).unwrap();
    w.write_record(&headers).unwrap();
    for r in &rows {
        w.write_record(r).unwrap();
    }
    w.flush().unwrap();
    let done = isir::export::purge::purge(
        &app.store,
        &[
            make("2000-01-01T000001"),
            make("2000-01-01T000002"),
            sound.clone(),
        ],
    )
    .await
    .unwrap();
    let action = |n: &str| {
        done.iter()
            .find(|p| p.export == n)
            .map(|p| p.action.clone())
            .unwrap_or_default()
    };
    assert_eq!(action("2000-01-01T000001"), "removed", "{done:?}");
    assert_eq!(action("2000-01-01T000002"), "removed", "{done:?}");
    assert_eq!(action("2000-01-01T000003"), "rewritten", "{done:?}");
    assert!(!make("2000-01-01T000001").exists() && !make("2000-01-01T000002").exists());
    assert_eq!(
        tree(&outside),
        before,
        "a file outside the export was changed"
    );
    // The sound one: each file's rows in its manifest are its CSV records.
    let m = isir::export::read_manifest(&sound).unwrap();
    assert_eq!(m.rewritten[0].rows_removed, 1, "{:?}", m.rewritten);
    for f in &m.files {
        let text = std::fs::read_to_string(sound.join(&f.name)).unwrap();
        let records = csv::Reader::from_reader(text.as_bytes()).records().count() as u64;
        assert_eq!(f.rows, records, "{}: the manifest's rows", f.name);
    }
}
