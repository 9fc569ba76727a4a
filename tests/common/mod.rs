//! Shared helpers of the integration tests: fresh databases on both back ends, Redis,
//! settings tuned for tests, and a simulator.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use isir::app::App;
use isir::config::Settings;
use isir::sim::{SimGuard, SimOptions, Simulator};
use isir::store::Store;
use sqlx::Connection;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub const BOTH: [Backend; 2] = [Backend::Sqlite, Backend::Postgres];

fn rand_suffix() -> String {
    use rand::Rng;
    let mut r = rand::thread_rng();
    (0..10)
        .map(|_| char::from(b'a' + r.gen_range(0..26)))
        .collect()
}

pub fn pg_admin_url() -> String {
    std::env::var("ISIR_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

pub fn redis_url() -> String {
    std::env::var("ISIR_TEST_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A unique prefix for Redis keys, so tests do not see each other.
pub fn redis_prefix() -> String {
    format!("isirtest:{}", rand_suffix())
}

/// A fresh, empty database; the returned guard keeps a SQLite directory alive, and
/// drops a PostgreSQL database `fresh_db` made when it goes (unless the test failed:
/// then it is kept to be looked at).
pub struct TestDb {
    pub url: String,
    pub backend: Backend,
    _dir: Option<tempfile::TempDir>,
    /// The server's admin URL and the database's name, to drop.
    made: Option<(String, String)>,
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some((admin, name)) = self.made.take() else {
            return;
        };
        if std::thread::panicking() {
            return;
        }
        // (On a thread of its own: the test's runtime may be the one dropping this.)
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(async {
                let mut c = sqlx::PgConnection::connect(&admin)
                    .await
                    .map_err(|e| e.to_string())?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&mut c)
                    .await
                    .map_err(|e| e.to_string())
            })
        })
        .join();
        if let Ok(Err(e)) = dropped {
            eprintln!("the test database was not dropped: {e}");
        }
    }
}

impl TestDb {
    /// A PostgreSQL database the test made itself (another cluster).
    #[allow(dead_code)]
    pub fn at(url: &str) -> TestDb {
        TestDb {
            url: url.to_string(),
            backend: Backend::Postgres,
            _dir: None,
            made: None,
        }
    }
}

pub async fn fresh_db(backend: Backend) -> TestDb {
    match backend {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            let url = format!("sqlite://{}", dir.path().join("isir.db").display());
            TestDb {
                url,
                backend,
                _dir: Some(dir),
                made: None,
            }
        }
        Backend::Postgres => {
            let admin = pg_admin_url();
            let mut c = sqlx::PgConnection::connect(&admin)
                .await
                .unwrap_or_else(|e| panic!("PostgreSQL at {admin} is required by this test (scripts/test.sh starts it): {e}"));
            let name = format!("isir_t_{}", rand_suffix());
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(&mut c)
                .await
                .unwrap();
            let base = admin.rsplit_once('/').unwrap().0;
            TestDb {
                url: format!("{base}/{name}"),
                backend,
                _dir: None,
                made: Some((admin.clone(), name)),
            }
        }
    }
}

/// Settings for tests: the given source and database, fast retries, no Redis.
pub fn settings(source: &str, db: &TestDb) -> Settings {
    let mut s = Settings::default();
    s.source.url = source.to_string();
    s.source.retry_backoff_ms = 10;
    s.source.timeout_secs = 5;
    s.source.connect_timeout_secs = 2;
    s.database.url = db.url.clone();
    s.budget.daily = 1_000_000;
    s.budget.per_minute = 1_000_000;
    s.lease.key = format!("isirtest:lease:{}", rand_suffix());
    s.lease.epoch_key = format!("{}:epoch", s.lease.key);
    s.budget.key_prefix = format!("isirtest:budget:{}", rand_suffix());
    s.api.bind = "127.0.0.1:0".into();
    s
}

pub fn with_redis(mut s: Settings, url: &str) -> Settings {
    s.redis.url = Some(url.to_string());
    s
}

/// A simulator without usage limits.
pub async fn sim(actions: usize, page: usize, seed: u64) -> (Simulator, String, SimGuard) {
    isir::sim::spawn(SimOptions {
        seed,
        actions,
        page,
        daily_limit: None,
        per_minute_limit: None,
        slow: Duration::from_secs(8),
        ..SimOptions::default()
    })
    .await
    .unwrap()
}

/// The writer's parts, with its settings recorded as the daemon records them.
pub async fn app(s: Settings) -> App {
    let app = App::build(s).await.expect("app builds");
    app.record_settings().await.expect("settings recorded");
    app
}

/// The writer's parts on `db` with the stream of the simulator at `url` stored (one tick
/// of up to 1 000 batches) and every projection caught up in chunks of 5 000 actions, so
/// that persons named again in later chunks are changed, not only written once.
pub async fn projected(url: &str, db: &TestDb) -> App {
    let mut s = settings(url, db);
    s.poll.max_batches_per_tick = 1000;
    let app = app(s).await;
    app.poller().unwrap().poll_once().await;
    for n in isir::projection::NAMES {
        isir::projection::catch_up(&app.store, n, 5000)
            .await
            .unwrap();
    }
    app
}

pub async fn store(db: &TestDb) -> Store {
    let s = Store::connect(&db.url, 5).await.unwrap();
    s.migrate().await.unwrap();
    s
}

/// Everything stored, in ID order.
pub async fn all_actions(store: &Store) -> Vec<isir::source::Action> {
    store.actions_after(i64::MIN, i64::MAX).await.unwrap()
}

pub fn arc<T>(t: T) -> Arc<T> {
    Arc::new(t)
}

/// A Redis server of the test's own on a free port, which the test may restart.
pub struct OwnRedis {
    pub port: u16,
    child: Option<std::process::Child>,
}

impl OwnRedis {
    pub fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut r = OwnRedis { port, child: None };
        r.spawn();
        r
    }
    fn spawn(&mut self) {
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server is required by this test (scripts/test.sh installs it)");
        self.child = Some(child);
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("own redis-server did not start");
    }
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
    /// Kills the server and starts an empty one on the same port.
    pub fn restart_empty(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

pub async fn texts(store: &Store, sql: &str, binds: &[isir::store::sql::Val]) -> Vec<String> {
    let mut tx = isir::store::sql::Tx::begin_read(store).await.unwrap();
    let r = tx.texts(sql, binds).await.unwrap();
    tx.commit().await.unwrap();
    r
}

pub async fn count(store: &Store, sql: &str, bind: &str) -> i64 {
    let mut tx = isir::store::sql::Tx::begin_read(store).await.unwrap();
    let r = tx.int(sql, &[bind.into()]).await.unwrap().unwrap_or(0);
    tx.commit().await.unwrap();
    r
}

/// Everything the projections hold, as comparable text.
pub async fn dump(store: &Store) -> BTreeMap<&'static str, Vec<String>> {
    let q: [(&str, &str); 8] = [
        ("cases", "SELECT doc FROM cases ORDER BY case_number"),
        (
            "stats",
            "SELECT dim || '|' || key || '|' || CAST(count AS TEXT) FROM stats WHERE count <> 0 ORDER BY dim, key",
        ),
        (
            "parties",
            "SELECT doc FROM parties ORDER BY case_number, court, person_id",
        ),
        (
            "first_actions",
            "SELECT case_number || '|' || court || '|' || person_id || '|' || CAST(first_action_id AS TEXT) FROM parties ORDER BY 1",
        ),
        (
            "erasures",
            "SELECT case_number || '|' || CAST(action_id AS TEXT) FROM erasures ORDER BY 1",
        ),
        (
            "timeline",
            "SELECT CAST(action_id AS TEXT) || '|' || case_number || '|' || type_code || '|' || type_name || '|' || \
             COALESCE(section, '') || '|' || COALESCE(CAST(number_in_section AS TEXT), '') || '|' || \
             COALESCE(document_url, '') || '|' || published || '|' || COALESCE(CAST(slot_action_id AS TEXT), '') || '|' || \
             CAST(secondary_action AS TEXT) || CAST(secondary_document AS TEXT) || '|' || COALESCE(legal_force_date, '') \
             FROM timeline ORDER BY action_id",
        ),
        (
            "slots",
            "SELECT case_number || '|' || section || '|' || CAST(number AS TEXT) || '|' || CAST(first_action_id AS TEXT) FROM slots ORDER BY 1",
        ),
        (
            "event_types",
            "SELECT code || '|' || name || '|' || source FROM event_types ORDER BY code",
        ),
    ];
    let mut out = BTreeMap::new();
    for (k, sql) in q {
        out.insert(k, texts(store, sql, &[]).await);
    }
    out
}

/// Serves the read API of `state` on a loopback port: its base URL, and a sender that
/// stops it when dropped.
#[allow(dead_code)]
pub async fn serve_api(state: isir::read::ReadState) -> (String, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(isir::http::run(listener, state, async move {
        let _ = rx.await;
    }));
    (base, tx)
}

/// Export options for `out`: every table, plain CSV, no personal data, the formula guard
/// on (the defaults of `isir export --out`).
#[allow(dead_code)]
pub fn export_opts(out: &std::path::Path) -> isir::export::ExportOptions {
    isir::export::ExportOptions {
        out: out.to_path_buf(),
        tables: isir::export::Table::ALL.to_vec(),
        formats: vec![isir::export::Format::Csv],
        gzip: false,
        since_watermark: None,
        include_pii: false,
        formula_guard: true,
        previous_watermark: None,
        progress: false,
        latest: false,
    }
}

/// A nightly schedule into `dir` at 02:30 of every table, gzipped, with the formula
/// guard, keeping `keep` exports.
pub fn nightly(dir: &std::path::Path, keep: usize, include_pii: bool) -> isir::export::Nightly {
    isir::export::Nightly {
        at: isir::export::parse_schedule("02:30").unwrap(),
        dir: dir.to_path_buf(),
        keep,
        gzip: true,
        include_pii,
        formula_guard: true,
        tables: isir::export::Table::ALL.to_vec(),
        formats: vec![isir::export::Format::Csv],
    }
}

/// Writes `actions` and the checkpoint after them into `store` as the release before
/// note dictionaries wrote them: the source's fields, the note as text (for upgrade
/// tests, on a store whose schema is that release's).
pub async fn write_as_previous_release(store: &Store, actions: &[isir::source::Action]) {
    use isir::store::sql::{Tx, Val};
    let insert = format!(
        "INSERT INTO actions ({}, stored_at, epoch) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 0, 1)",
        isir::store::ACTION_FIELDS.join(", ")
    );
    let mut tx = Tx::begin(store).await.unwrap();
    for a in actions {
        let row: Vec<Val> = vec![
            a.id.into(),
            a.created.as_str().into(),
            a.published.as_str().into(),
            a.document_url.as_deref().into(),
            a.case_number.as_str().into(),
            a.type_code.as_str().into(),
            a.type_name.as_str().into(),
            a.section.as_deref().into(),
            a.number_in_section.into(),
            a.note.as_deref().into(),
        ];
        tx.exec(&insert, &row).await.unwrap();
    }
    tx.exec(
        "UPDATE writer_state SET checkpoint = $1, epoch = 1 WHERE singleton = 1",
        &[actions.last().map(|a| a.id).into()],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
}

/// A simulated stream of `n` actions (`seed`) on a fresh store of back end `b`, all
/// ingested in one tick; the projections not built.
#[allow(dead_code)]
pub async fn replica(b: Backend, n: usize, seed: u64) -> (Simulator, TestDb, App, SimGuard) {
    let (sim, url, g) = sim(n, 1000, seed).await;
    let db = fresh_db(b).await;
    let mut s = settings(&url, &db);
    s.poll.max_batches_per_tick = 10_000;
    let app = app(s).await;
    let t = app.poller().unwrap().poll_once().await;
    assert_eq!(t.actions as usize, n);
    (sim, db, app, g)
}
