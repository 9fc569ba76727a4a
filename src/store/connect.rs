//! Opening the replica: connecting to SQLite or PostgreSQL (files made 0600 first),
//! the read-only and reader pools, migrations and the indexes `migrate` adds.
//!
//! Owns every pool's options. It runs no statement of the replica's data (those are in
//! `db.rs`), and never opens a writable pool for a reader.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use super::*;

impl Store {
    /// Connects to `url` (`sqlite://PATH` or `postgres://...`). SQLite files are created
    /// if missing, for their owner only (mode 0600, [`super::files`]), and run in WAL
    /// mode; an existing one others can read is warned about.
    pub async fn connect(url: &str, max_connections: u32) -> anyhow::Result<Store> {
        if url.starts_with("sqlite:") {
            let opts = SqliteConnectOptions::from_str(url)?;
            let file = opts.get_filename().to_path_buf();
            if super::files::on_disk(&file) {
                super::files::warn_if_open(&file);
                super::files::create_private(&file)?;
            }
            let opts = opts
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_secs(30))
                .pragma("cache_size", CACHE_SIZE)
                .foreign_keys(true);
            let pool = sqlite_pool()
                .max_connections(max_connections)
                .connect_with(opts)
                .await?;
            Ok(Store::Sqlite(pool))
        } else {
            let opts = sqlx::postgres::PgConnectOptions::from_str(url)?;
            Ok(Store::Postgres(pg_pool(opts, max_connections).await?))
        }
    }

    /// Whether `url` holds a replica already: a SQLite file that exists (an in-memory
    /// database counts), or a PostgreSQL database with the writer's table. Creates
    /// nothing: the commands that only read or repair a replica ask first, so that a
    /// mistyped `database.url` is an error, not a new empty replica.
    pub async fn replica_exists(url: &str) -> anyhow::Result<bool> {
        if url.starts_with("sqlite:") {
            let opts = SqliteConnectOptions::from_str(url)?;
            let file = opts.get_filename();
            return Ok(!super::files::on_disk(file) || file.exists());
        }
        use sqlx::Connection;
        let opts = sqlx::postgres::PgConnectOptions::from_str(url)?;
        let mut c = pg_connect(&opts).await?;
        let found: bool = sqlx::query_scalar("SELECT to_regclass('writer_state') IS NOT NULL")
            .fetch_one(&mut c)
            .await?;
        c.close().await.ok();
        Ok(found)
    }

    /// A read-only connection pool (`isir serve`): SQLite opened read-only, PostgreSQL
    /// sessions with `default_transaction_read_only`. Never migrates.
    pub async fn connect_read_only(url: &str, max_connections: u32) -> anyhow::Result<Store> {
        if url.starts_with("sqlite:") {
            let opts = SqliteConnectOptions::from_str(url)?;
            super::files::warn_if_open(opts.get_filename());
            let opts = opts
                .read_only(true)
                .busy_timeout(Duration::from_secs(30))
                .pragma("cache_size", CACHE_SIZE);
            let pool = sqlite_pool()
                .max_connections(max_connections)
                .connect_with(opts)
                .await?;
            Ok(Store::Sqlite(pool))
        } else {
            let opts = sqlx::postgres::PgConnectOptions::from_str(url)?
                .options([("default_transaction_read_only", "on")]);
            Ok(Store::Postgres(pg_pool(opts, max_connections).await?))
        }
    }

    /// A pool of the same database for the read side, apart from the writer's
    /// connections: at most `max` connections, a `wait` for one, and on PostgreSQL every
    /// statement limited to `limit` (`statement_timeout`; SQLite's limit is set per read,
    /// see [`crate::read::limit`]). An in-memory SQLite database is seen only through its
    /// own pool: it is returned as it is, and the flag says so (`false`).
    pub fn for_readers(&self, max: u32, wait: Duration, limit: Duration) -> (Store, bool) {
        match self {
            Store::Postgres(p) => {
                let opts = p
                    .connect_options()
                    .as_ref()
                    .clone()
                    .options([("statement_timeout", limit.as_millis().max(1).to_string())]);
                let pool = PgPoolOptions::new()
                    .max_connections(max)
                    .acquire_timeout(wait)
                    .connect_lazy_with(opts);
                (Store::Postgres(pool), true)
            }
            Store::Sqlite(p) => {
                let opts = p.connect_options().as_ref().clone();
                if !super::files::on_disk(opts.get_filename()) {
                    return (self.clone(), false);
                }
                let pool = sqlite_pool()
                    .max_connections(max)
                    .acquire_timeout(wait)
                    .connect_lazy_with(opts);
                (Store::Sqlite(pool), true)
            }
        }
    }

    /// The read side's pool for one-statement reads on PostgreSQL ([`super::pgread`]),
    /// with this pool's connection options (a reader pool's: `statement_timeout`), at
    /// most `max` connections, waiting `wait` for one; `None` on SQLite.
    pub fn pg_read_pool(
        &self,
        max: u32,
        wait: Duration,
    ) -> Option<std::sync::Arc<super::pgread::Pool>> {
        match self {
            Store::Postgres(p) => Some(super::pgread::Pool::new(
                p.connect_options().as_ref().clone(),
                max,
                wait,
            )),
            Store::Sqlite(_) => None,
        }
    }

    /// Applies the migrations of this back end.
    pub async fn migrate(&self) -> anyhow::Result<()> {
        match self {
            Store::Sqlite(p) => sqlx::migrate!("migrations/sqlite").run(p).await?,
            Store::Postgres(p) => sqlx::migrate!("migrations/postgres").run(p).await?,
        }
        self.ensure_indexes().await?;
        // The replica's secret for person references and cursors (`privacy`), made once.
        self.init_secret(
            crate::privacy::KEY_SETTING,
            &crate::privacy::Privacy::generate_hex(),
        )
        .await?;
        // The replica's public identifier (`/healthz`, `isir status`): tells one replica
        // from another on a shared port. Random, not derived from any secret.
        self.init_setting(REPLICA_ID_SETTING, &new_replica_id())
            .await?;
        Ok(())
    }

    /// The replica's identifier, when it has one (made at `migrate`).
    pub async fn replica_id(&self) -> Result<Option<String>, StoreError> {
        self.setting(REPLICA_ID_SETTING).await
    }

    /// Builds the replica's secondary index `actions (case_number, id)` if it is missing:
    /// a snapshot restore into an empty store drops it and builds it after its commit,
    /// so a process that died in between leaves it to the next start. Instant when the
    /// index exists (looked up first: PostgreSQL's `IF NOT EXISTS` would still lock the
    /// table against the writer).
    pub async fn ensure_indexes(&self) -> Result<(), sqlx::Error> {
        let exists = match self {
            Store::Sqlite(_) => {
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = 'actions_case'"
            }
            Store::Postgres(_) => {
                "SELECT COUNT(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'actions_case'"
            }
        };
        let n: i64 = both!(self, |p| sqlx::query_scalar(exists).fetch_one(p).await?);
        if n == 0 {
            let sql = "CREATE INDEX IF NOT EXISTS actions_case ON actions (case_number, id)";
            both!(self, |p| sqlx::query(sql).execute(p).await.map(|_| ()))?;
        }
        Ok(())
    }

    pub fn backend(&self) -> &'static str {
        match self {
            Store::Sqlite(_) => "sqlite",
            Store::Postgres(_) => "postgres",
        }
    }

    pub async fn close(&self) {
        both!(self, |p| p.close().await)
    }
}

/// The options of every SQLite pool: no ping before each use (a SQLite connection is a
/// file handle that does not go stale; on the read path that ping is a thread round
/// trip), and a connection comes back without the read time limit a request armed on it
/// ([`crate::read::limit`]), so a later reader on it is never stopped by another
/// request's expired deadline.
fn sqlite_pool() -> SqlitePoolOptions {
    SqlitePoolOptions::new()
        .test_before_acquire(false)
        .after_release(|conn, _| {
            Box::pin(async move {
                conn.lock_handle().await?.remove_progress_handler();
                Ok(true)
            })
        })
}

/// A PostgreSQL pool, after one plain connection: a server that refuses or cannot be
/// reached is said so at once, with its address, not as a pool timing out 10 s later.
async fn pg_pool(
    opts: sqlx::postgres::PgConnectOptions,
    max_connections: u32,
) -> anyhow::Result<sqlx::PgPool> {
    use sqlx::Connection;
    pg_connect(&opts).await?.close().await.ok();
    Ok(PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(opts)
        .await?)
}

/// One plain connection, within 10 s; a failure names the server's address.
async fn pg_connect(opts: &sqlx::postgres::PgConnectOptions) -> anyhow::Result<sqlx::PgConnection> {
    use anyhow::Context;
    use sqlx::Connection;
    let at = format!("{}:{}", opts.get_host(), opts.get_port());
    tokio::time::timeout(
        Duration::from_secs(10),
        sqlx::PgConnection::connect_with(opts),
    )
    .await
    .map_err(|_| anyhow::anyhow!("no answer within 10 s"))
    .and_then(|c| c.map_err(|e| anyhow::anyhow!("{e}")))
    .with_context(|| format!("cannot connect to PostgreSQL at {at}"))
}

/// The settings key of the replica's identifier.
pub const REPLICA_ID_SETTING: &str = "replica_id";

/// A new replica identifier: 64 random bits in hex.
fn new_replica_id() -> String {
    use rand::RngCore;
    let mut b = [0u8; 8];
    rand::rngs::OsRng.fill_bytes(&mut b);
    hex::encode(b)
}
