//! Projections: what readers read, built from the replica by single-writer builders, each
//! with its own cursor (`proj_meta`), moved in the same transaction as its changes.
//!
//! `cases`, `parties` and `timeline` are one builder per file; `sql` is the dual back-end
//! layer; `fold` the search keys. Each builder's tables are versioned (`cases_v1`) behind
//! a view (`cases`): a rebuild fills the next version side by side and swaps the views in
//! one transaction, so readers never see a half-built projection. Builders read the
//! replica and never write it; they never skip an action silently: one they cannot apply
//! stops the builder at that action with the reason in `proj_meta.error`.

pub mod cases;

pub mod names;
pub mod parties;
mod rebuild;
mod step;
pub mod timeline;
mod upgrade;
pub mod verify;
mod wal;

pub use rebuild::{rebuild, rebuild_with};
pub use step::{Step, catch_up, step};
use step::{apply_and_commit, pinpoint, read_one};

use crate::readmodel::meta::read_meta_with;
pub use crate::readmodel::meta::{Counts, Meta, NAMES, metas, watermark};
use crate::source::model::Record;
use crate::store::sql::{Tx, Val};
use crate::store::{Store, now_ms};

/// The builders, in the order the daemon runs them.

#[derive(Debug, thiserror::Error)]
pub enum ProjectionError {
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
    #[error("cannot apply action {id}: {why}")]
    Action { id: i64, why: String },
    #[error("builder {0} is not known (cases, parties, timeline)")]
    Unknown(String),
    #[error(
        "another process moved the {name} cursor (expected {expected}, found {found}); this step was not applied"
    )]
    Concurrent {
        name: String,
        expected: i64,
        found: i64,
    },
    #[error("store: {0}")]
    Store(#[from] crate::store::StoreError),
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// The replica's privacy key could not be read (verify names persons by reference).
    #[error("privacy key: {0}")]
    Key(String),
    #[error(
        "the rebuilt {name} (version {version}) differs from a recomputation from the replica in {differences} of {checked} sampled cases; the live version stays. First: {first}"
    )]
    VerifyFailed {
        name: String,
        version: i64,
        differences: usize,
        checked: usize,
        first: String,
    },
}

/// How long a rebuild's swap waits for its locks before it lets readers go on and tries
/// again (PostgreSQL).
pub const SWAP_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether `e` is PostgreSQL's `lock_not_available` (a `lock_timeout` ran out).
fn lock_timeout(e: &ProjectionError) -> bool {
    match e {
        ProjectionError::Db(sqlx::Error::Database(d)) => d.code().as_deref() == Some("55P03"),
        _ => false,
    }
}

/// Cases of a rebuilt version recomputed before it is swapped in.
pub const VERIFY_SAMPLE: usize = 200;

/// The contract of one builder.
#[async_trait::async_trait]
pub trait Builder: Send + Sync {
    fn name(&self) -> &'static str;
    /// Base names of its tables on PostgreSQL (`pg`) or SQLite, each read through a
    /// view of that name.
    fn tables(&self, pg: bool) -> &'static [&'static str];
    /// CREATE statements for version `v`.
    fn ddl(&self, v: i64, pg: bool) -> Vec<String>;
    /// Base names of tables an earlier release made and this one no longer keeps: a new
    /// version never has them, and the swap of a rebuild drops the old version's (the
    /// live version's go in [`Builder::upgrade`]).
    fn retired_tables(&self) -> &'static [&'static str] {
        &[]
    }
    /// Indexes of version `v` that an earlier release made and this one replaced: the
    /// upgrade of a version drops them once their replacements exist.
    fn retired_indexes(&self, _v: i64, _pg: bool) -> Vec<String> {
        Vec::new()
    }
    /// Whether the builder's state is per case (apart from order-independent sums), so a
    /// rebuild may apply the replica case by case instead of in ID order.
    fn per_case(&self) -> bool {
        false
    }
    /// Brings version `v`, made by an earlier release, up to this one's tables (adds and
    /// fills what is missing); whether it changed anything.
    async fn upgrade(&self, _tx: &mut Tx, _v: i64) -> Result<bool, ProjectionError> {
        Ok(false)
    }
    /// Fills what version `v` left for its indexes to find, just before its secondary
    /// indexes are built: at a rebuild's end, and on the live version each time the
    /// projections are opened (before a missing index is added), where it must do
    /// nothing unless something was left unfilled.
    async fn before_indexes(&self, _tx: &mut Tx, _v: i64) -> Result<(), ProjectionError> {
        Ok(())
    }
    /// The query of the view named `t` over its table of version `v`: the table as it is,
    /// unless the builder stores some cells in a shorter form than it serves.
    fn view_sql(&self, t: &str, v: i64, _pg: bool) -> String {
        format!("SELECT * FROM {t}_v{v}")
    }
    /// Views over version `v` besides those of its tables, each a name and its query
    /// (e.g. the parties' cells as stored, which the API reads).
    fn extra_views(&self, _v: i64) -> Vec<(&'static str, String)> {
        Vec::new()
    }
    /// Fills a new version with what it starts from (e.g. the seeded code list).
    async fn seed(&self, _tx: &mut Tx, _v: i64) -> Result<(), ProjectionError> {
        Ok(())
    }
    /// Applies records (in ID order) to version `v`.
    async fn apply(
        &self,
        tx: &mut Tx,
        v: i64,
        recs: &[Record],
        counts: &mut Counts,
    ) -> Result<(), ProjectionError>;
}

pub fn builder(name: &str) -> Result<Box<dyn Builder>, ProjectionError> {
    Ok(match name {
        "cases" => Box::new(cases::Cases),
        "parties" => Box::new(parties::Parties),
        "timeline" => Box::new(timeline::Timeline),
        other => return Err(ProjectionError::Unknown(other.to_string())),
    })
}

const START: i64 = -1;

async fn read_meta(tx: &mut Tx, key: &str) -> Result<Option<Meta>, ProjectionError> {
    Ok(read_meta_with(tx, key, true).await?)
}

async fn write_meta(tx: &mut Tx, m: &Meta) -> Result<(), ProjectionError> {
    tx.upsert(
        "proj_meta",
        &[
            "name",
            "cursor",
            "applied",
            "unknown_codes",
            "unknown_other",
            "unparsed",
            "erased",
            "updated_at",
            "error",
            "version",
        ],
        &["name"],
        &[vec![
            m.name.as_str().into(),
            m.cursor.into(),
            m.counts.applied.into(),
            m.counts.unknown_codes.into(),
            m.counts.unknown_other.into(),
            m.counts.unparsed.into(),
            m.counts.erased.into(),
            now_ms().into(),
            m.error.clone().into(),
            m.version.into(),
        ]],
    )
    .await?;
    Ok(())
}

/// The index a `CREATE [UNIQUE] INDEX` statement makes, and the statement with
/// `IF NOT EXISTS`; `None` for any other statement.
fn index_of(stmt: &str) -> Option<(&str, String)> {
    let (create, rest) = ["CREATE INDEX ", "CREATE UNIQUE INDEX "]
        .into_iter()
        .find_map(|c| stmt.strip_prefix(c).map(|r| (c, r)))?;
    let name = rest.split_whitespace().next()?;
    Some((name, format!("{create}IF NOT EXISTS {rest}")))
}

/// Creates version `v`'s tables; their secondary indexes too, unless `defer_indexes`
/// (a rebuild creates them once, just before the swap: bulk-building an index is much
/// cheaper than keeping it up row by row).
async fn create_version(
    tx: &mut Tx,
    b: &dyn Builder,
    v: i64,
    defer_indexes: bool,
) -> Result<(), ProjectionError> {
    for t in b.tables(tx.is_postgres()).iter().chain(b.retired_tables()) {
        tx.exec(&format!("DROP TABLE IF EXISTS {t}_v{v}"), &[])
            .await?;
    }
    for stmt in b.ddl(v, tx.is_postgres()) {
        if defer_indexes && index_of(&stmt).is_some() {
            continue;
        }
        tx.exec(&stmt, &[]).await?;
    }
    b.seed(tx, v).await
}

async fn create_indexes(tx: &mut Tx, b: &dyn Builder, v: i64) -> Result<(), ProjectionError> {
    b.before_indexes(tx, v).await?;
    for stmt in b.ddl(v, tx.is_postgres()) {
        if let Some((_, if_not_exists)) = index_of(&stmt) {
            tx.exec(&if_not_exists, &[]).await?;
        }
    }
    Ok(())
}

async fn point_views(tx: &mut Tx, b: &dyn Builder, v: i64) -> Result<(), ProjectionError> {
    for t in b.tables(tx.is_postgres()) {
        tx.exec(&format!("DROP VIEW IF EXISTS {t}"), &[]).await?;
        tx.exec(
            &format!("CREATE VIEW {t} AS {}", b.view_sql(t, v, tx.is_postgres())),
            &[],
        )
        .await?;
    }
    for (name, sql) in b.extra_views(v) {
        tx.exec(&format!("DROP VIEW IF EXISTS {name}"), &[]).await?;
        tx.exec(&format!("CREATE VIEW {name} AS {sql}"), &[])
            .await?;
    }
    Ok(())
}

/// Creates a builder's first version and views if they do not exist yet.
pub async fn ensure(store: &Store, name: &str) -> Result<Meta, ProjectionError> {
    let b = builder(name)?;
    // The common case, after the first run: no write lock taken.
    if let Ok(m) = read_one(store, name).await {
        upgrade(store, b.as_ref(), &m).await?;
        return Ok(m);
    }
    let mut tx = Tx::begin(store).await?;
    let m = match read_meta(&mut tx, name).await? {
        Some(m) => m,
        None => {
            create_version(&mut tx, b.as_ref(), 1, false).await?;
            point_views(&mut tx, b.as_ref(), 1).await?;
            let m = Meta {
                name: name.into(),
                cursor: START,
                version: 1,
                counts: Counts::default(),
                updated_at: now_ms(),
                error: None,
            };
            write_meta(&mut tx, &m).await?;
            m
        }
    };
    tx.commit().await?;
    Ok(m)
}

/// Brings the live version of a builder up to this release's
/// tables ([`Builder::upgrade`]); a new table of the live version gets its view. Reads
/// only, unless something is missing.
async fn upgrade(store: &Store, b: &dyn Builder, live: &Meta) -> Result<(), ProjectionError> {
    let mut tx = Tx::begin(store).await?;
    let upgraded = b.upgrade(&mut tx, live.version).await?;
    // (The catalogue is read only for a builder with views besides its tables'.)
    let extra = b.extra_views(live.version);
    let missing = !upgraded && !extra.is_empty() && {
        let views: std::collections::HashSet<String> = tx
            .texts(
                if tx.is_postgres() {
                    "SELECT viewname::text FROM pg_views WHERE schemaname = current_schema()"
                } else {
                    "SELECT name FROM sqlite_master WHERE type = 'view'"
                },
                &[],
            )
            .await?
            .into_iter()
            .collect();
        extra.iter().any(|(name, _)| !views.contains(*name))
    };
    if upgraded || missing {
        point_views(&mut tx, b, live.version).await?;
    }
    // Indexes this release added (the list queries' shapes) to a version made before.
    let have: std::collections::HashSet<String> = tx
        .texts(
            if tx.is_postgres() {
                "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
            } else {
                "SELECT name FROM sqlite_master WHERE type = 'index'"
            },
            &[],
        )
        .await?
        .into_iter()
        .collect();
    let mut added = Vec::new();
    b.before_indexes(&mut tx, live.version).await?;
    for stmt in b.ddl(live.version, tx.is_postgres()) {
        let Some((name, _)) = index_of(&stmt) else {
            continue;
        };
        if !have.contains(name) {
            tx.exec(&stmt, &[]).await?;
            added.push(name.to_string());
        }
    }
    let retired: Vec<String> = b
        .retired_indexes(live.version, tx.is_postgres())
        .into_iter()
        .filter(|n| have.contains(n))
        .collect();
    if !added.is_empty() {
        tracing::info!(builder = live.name, indexes = ?added, "indexes added to a version made before them");
        for t in b.tables(tx.is_postgres()) {
            analyze(&mut tx, &format!("{t}_v{}", live.version)).await?;
        }
    }
    // (A rebuild in progress, `name#next`, is left as it is: a rebuild is never resumed,
    // `rebuild` makes its next version afresh, and upgrading it here would lock tables a
    // rebuild of the release before may still be writing.)
    // Value samples an earlier release's ANALYZE left (`drop_samples`).
    if drop_samples(&mut tx, None).await? {
        tracing::info!("SQLite's value samples dropped (sqlite_stat4)");
    }
    tx.commit().await?;
    // An index this release replaced goes in a transaction of its own: dropping it locks
    // its table, which readers read, for no longer than the drop itself.
    for name in retired {
        let mut tx = Tx::begin(store).await?;
        tx.exec(&format!("DROP INDEX IF EXISTS {name}"), &[])
            .await?;
        tx.commit().await?;
        tracing::info!(
            builder = live.name,
            index = name,
            "an earlier release's index dropped"
        );
    }
    Ok(())
}

/// Refreshes the planner's statistics of `table` (`ANALYZE`), so that plans stay right
/// as the data grows. SQLite's full-text name index keeps no statistics; its segments,
/// one more with every transaction that wrote to it, are merged a bounded step instead
/// (FTS5 `merge` of up to 500 pages, toward one segment), so that a search reads
/// few term lists per term.
///
/// On SQLite the statistics are `sqlite_stat1`'s alone: the value samples ANALYZE also
/// takes (`sqlite_stat4`, as SQLite is built here) are dropped, see [`drop_samples`].
pub async fn analyze(tx: &mut Tx, table: &str) -> Result<(), ProjectionError> {
    if !fts5(tx, table, "'merge', -500").await? {
        tx.exec(&format!("ANALYZE {table}"), &[]).await?;
        drop_samples(tx, Some(table)).await?;
    }
    Ok(())
}

/// Deletes SQLite's value samples (`sqlite_stat4`) of `table`, or of every table.
/// Where samples exist, SQLite compiles a statement again whenever a value bound to a
/// parameter compared with an indexed column changes (`sqlite3_prepare_v2`: the value
/// "might influence the choice of query plan"): every read of the API would be parsed
/// and planned anew, 10 % of the server's time on the events feed. The read side's
/// statements are index walks chosen by their shape, whatever the values (the plan
/// tests, `tests/limits.rs`), so the samples buy nothing there. Nothing to do on
/// PostgreSQL, or where SQLite keeps no samples; says whether it deleted any.
pub async fn drop_samples(tx: &mut Tx, table: Option<&str>) -> Result<bool, ProjectionError> {
    // (Only where there are some: opening the projections writes nothing otherwise.)
    let some = !tx.is_postgres()
        && tx
            .int(
                "SELECT COUNT(*) FROM sqlite_master WHERE name = 'sqlite_stat4'",
                &[],
            )
            .await?
            == Some(1)
        && tx
            .int(
                "SELECT EXISTS (SELECT 1 FROM sqlite_stat4 WHERE $1 IS NULL OR tbl = $1)",
                &[table.into()],
            )
            .await?
            == Some(1);
    if some {
        tx.exec(
            "DELETE FROM sqlite_stat4 WHERE $1 IS NULL OR tbl = $1",
            &[table.into()],
        )
        .await?;
    }
    Ok(some)
}

/// Merges every segment of a SQLite full-text table into one (FTS5 `optimize`): a
/// rebuild's new version, written in thousands of transactions, before readers see it.
/// Nothing to do for other tables or on PostgreSQL.
pub async fn optimize(tx: &mut Tx, table: &str) -> Result<(), ProjectionError> {
    fts5(tx, table, "'optimize', 0").await?;
    Ok(())
}

/// Runs the FTS5 command `values` (its name and argument) on `table` when it is SQLite's
/// full-text name index; says whether it was one.
async fn fts5(tx: &mut Tx, table: &str, values: &str) -> Result<bool, ProjectionError> {
    if tx.is_postgres() || !table.starts_with("names_") {
        return Ok(false);
    }
    tx.exec(
        &format!("INSERT INTO {table}({table}, rank) VALUES ({values})"),
        &[],
    )
    .await?;
    Ok(true)
}

/// Refreshes the statistics of every builder's live tables (the projector's schedule,
/// `projection.analyze_every_secs`).
pub async fn analyze_live(store: &Store) -> Result<(), ProjectionError> {
    for name in NAMES {
        let b = builder(name)?;
        let m = read_one(store, name).await?;
        let mut tx = Tx::begin(store).await?;
        for t in b.tables(tx.is_postgres()) {
            analyze(&mut tx, &format!("{t}_v{}", m.version)).await?;
        }
        tx.commit().await?;
    }
    Ok(())
}

pub async fn ensure_all(store: &Store) -> Result<(), ProjectionError> {
    for n in NAMES {
        ensure(store, n).await?;
    }
    Ok(())
}

/// Binds for an IN list.
pub fn texts_in(keys: &[String]) -> Vec<Val> {
    keys.iter().map(|k| Val::T(Some(k.clone()))).collect()
}

#[cfg(test)]
mod tests {
    use super::index_of;

    /// Unique indexes are indexes too: deferred in a rebuild, made `IF NOT EXISTS` at its
    /// end, added to a version made before them.
    #[test]
    fn an_index_statement_names_its_index() {
        assert_eq!(
            index_of("CREATE INDEX t_v1_a ON t_v1 (a)"),
            Some((
                "t_v1_a",
                "CREATE INDEX IF NOT EXISTS t_v1_a ON t_v1 (a)".into()
            ))
        );
        assert_eq!(
            index_of("CREATE UNIQUE INDEX t_v1_b ON t_v1 (b)"),
            Some((
                "t_v1_b",
                "CREATE UNIQUE INDEX IF NOT EXISTS t_v1_b ON t_v1 (b)".into()
            ))
        );
        assert_eq!(index_of("CREATE TABLE t_v1 (a TEXT)"), None);
        assert_eq!(index_of("CREATE VIRTUAL TABLE n_v1 USING fts5(w)"), None);
    }
}
