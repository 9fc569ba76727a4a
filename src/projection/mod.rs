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
pub mod columns;
pub mod fold;
pub mod parties;
pub mod sql;
pub mod timeline;
pub mod verify;

use serde::Serialize;

use crate::source::model::Record;
use crate::store::{Store, now_ms};
use sql::{Tx, Val};

/// The builders, in the order the daemon runs them.
pub const NAMES: [&str; 3] = ["cases", "parties", "timeline"];

/// What a step found beside the normal.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Counts {
    pub applied: i64,
    pub unknown_codes: i64,
    pub unknown_other: i64,
    pub unparsed: i64,
    pub erased: i64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.applied += o.applied;
        self.unknown_codes += o.unknown_codes;
        self.unknown_other += o.unknown_other;
        self.unparsed += o.unparsed;
        self.erased += o.erased;
    }
}

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
    /// Base names of its tables (each read through a view of that name).
    fn tables(&self) -> &'static [&'static str];
    /// CREATE statements for version `v`.
    fn ddl(&self, v: i64, pg: bool) -> Vec<String>;
    /// Whether the builder's state is per case (apart from order-independent sums), so a
    /// rebuild may apply the replica case by case instead of in ID order.
    fn per_case(&self) -> bool {
        false
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

/// A builder's state as `proj_meta` holds it.
#[derive(Debug, Clone, Serialize)]
pub struct Meta {
    pub name: String,
    pub cursor: i64,
    pub version: i64,
    pub counts: Counts,
    pub updated_at: i64,
    pub error: Option<String>,
}

const START: i64 = -1;

async fn read_meta(tx: &mut Tx, key: &str) -> Result<Option<Meta>, ProjectionError> {
    read_meta_with(tx, key, true).await
}

async fn read_meta_with(
    tx: &mut Tx,
    key: &str,
    for_update: bool,
) -> Result<Option<Meta>, ProjectionError> {
    let lock = if for_update { tx.lock() } else { "" };
    let rows = tx
        .texts(
            &format!(
                "SELECT CAST(cursor AS TEXT) || '|' || CAST(version AS TEXT) || '|' || CAST(applied AS TEXT) || '|' || \
                 CAST(unknown_codes AS TEXT) || '|' || CAST(unknown_other AS TEXT) || '|' || CAST(unparsed AS TEXT) || '|' || \
                 CAST(erased AS TEXT) || '|' || CAST(updated_at AS TEXT) || '|' || COALESCE(error, '') FROM proj_meta WHERE name = $1{lock}"
            ),
            &[key.into()],
        )
        .await?;
    Ok(rows.first().map(|r| {
        let f: Vec<&str> = r.splitn(9, '|').collect();
        let n = |i: usize| f.get(i).and_then(|s| s.parse::<i64>().ok()).unwrap_or(0);
        Meta {
            name: key.to_string(),
            cursor: n(0),
            version: n(1),
            counts: Counts {
                applied: n(2),
                unknown_codes: n(3),
                unknown_other: n(4),
                unparsed: n(5),
                erased: n(6),
            },
            updated_at: n(7),
            error: f.get(8).filter(|s| !s.is_empty()).map(|s| s.to_string()),
        }
    }))
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

/// Creates version `v`'s tables; their secondary indexes too, unless `defer_indexes`
/// (a rebuild creates them once, just before the swap: bulk-building an index is much
/// cheaper than keeping it up row by row).
async fn create_version(
    tx: &mut Tx,
    b: &dyn Builder,
    v: i64,
    defer_indexes: bool,
) -> Result<(), ProjectionError> {
    for t in b.tables() {
        tx.exec(&format!("DROP TABLE IF EXISTS {t}_v{v}"), &[])
            .await?;
    }
    for stmt in b.ddl(v, tx.is_postgres()) {
        if defer_indexes && stmt.starts_with("CREATE INDEX") {
            continue;
        }
        tx.exec(&stmt, &[]).await?;
    }
    b.seed(tx, v).await
}

async fn create_indexes(tx: &mut Tx, b: &dyn Builder, v: i64) -> Result<(), ProjectionError> {
    for stmt in b
        .ddl(v, tx.is_postgres())
        .into_iter()
        .filter(|s| s.starts_with("CREATE INDEX"))
    {
        tx.exec(
            &stmt.replacen("CREATE INDEX", "CREATE INDEX IF NOT EXISTS", 1),
            &[],
        )
        .await?;
    }
    Ok(())
}

async fn point_views(tx: &mut Tx, b: &dyn Builder, v: i64) -> Result<(), ProjectionError> {
    for t in b.tables() {
        tx.exec(&format!("DROP VIEW IF EXISTS {t}"), &[]).await?;
        tx.exec(&format!("CREATE VIEW {t} AS SELECT * FROM {t}_v{v}"), &[])
            .await?;
    }
    Ok(())
}

/// Creates a builder's first version and views if they do not exist yet.
pub async fn ensure(store: &Store, name: &str) -> Result<Meta, ProjectionError> {
    let b = builder(name)?;
    // The common case, after the first run: no write lock taken.
    if let Ok(m) = read_one(store, name).await {
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

pub async fn ensure_all(store: &Store) -> Result<(), ProjectionError> {
    for n in NAMES {
        ensure(store, n).await?;
    }
    Ok(())
}

/// Every builder's state (and any rebuild in progress).
pub async fn metas(store: &Store) -> Result<Vec<Meta>, ProjectionError> {
    let mut tx = Tx::begin_read(store).await?;
    let keys = tx
        .texts("SELECT name FROM proj_meta ORDER BY name", &[])
        .await?;
    let mut out = Vec::new();
    for k in keys {
        if let Some(m) = read_meta_with(&mut tx, &k, false).await? {
            out.push(m);
        }
    }
    tx.commit().await?;
    Ok(out)
}

/// Reads the replica after `cursor`, parsing each `poznamka`.
async fn records_after(
    store: &Store,
    cursor: i64,
    limit: i64,
) -> Result<Vec<Record>, ProjectionError> {
    Ok(crate::source::parse::records(
        store.actions_after(cursor, limit).await?,
    ))
}

/// The outcome of one step.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub applied: usize,
    pub cursor: i64,
}

/// Applies the next `chunk` actions to the builder stored under `key` (its name, or
/// `name#next` during a rebuild), moving its cursor in the same transaction.
pub async fn step(
    store: &Store,
    name: &str,
    key: &str,
    chunk: i64,
) -> Result<Step, ProjectionError> {
    let b = builder(name)?;
    let start = read_one(store, key).await?;
    // Read the replica outside the write transaction: the poller is not held up.
    let t0 = std::time::Instant::now();
    let recs = records_after(store, start.cursor, chunk).await?;
    let t_read = t0.elapsed();
    let Some(last) = recs.last().map(|r| r.action.id) else {
        return Ok(Step {
            applied: 0,
            cursor: start.cursor,
        });
    };
    if let Err(e) = apply_and_commit(
        store,
        b.as_ref(),
        key,
        &recs,
        Some(start.cursor),
        Some(last),
        None,
    )
    .await?
    {
        return Err(pinpoint(store, b.as_ref(), key, &recs, e).await);
    }
    tracing::debug!(builder = key, n = recs.len(), read = ?t_read, total = ?t0.elapsed(), "projection step");
    Ok(Step {
        applied: recs.len(),
        cursor: last,
    })
}

/// One builder step in one transaction: applies `recs`, adds the counters, moves the
/// cursor to `cursor` (if given) and commits. With `expect`, refuses to go on if another
/// process moved the cursor. The outer error is the database's; the inner one says the
/// builder could not apply the records (nothing was written).
async fn apply_and_commit(
    store: &Store,
    b: &dyn Builder,
    key: &str,
    recs: &[Record],
    expect: Option<i64>,
    cursor: Option<i64>,
    bulk: Option<&std::sync::Arc<crate::store::direct::Pool>>,
) -> Result<Result<(), ProjectionError>, ProjectionError> {
    // A rebuild writes tables nobody reads yet, from a process of its own: on a SQLite
    // file its statements run on this thread (no worker hand-off per statement), on one
    // connection kept for the whole rebuild.
    let mut tx = match bulk {
        Some(pool) => Tx::begin_in(pool)?,
        None => Tx::begin(store).await?,
    };
    let mut m = read_meta(&mut tx, key)
        .await?
        .ok_or_else(|| ProjectionError::Unknown(key.to_string()))?;
    if let Some(expected) = expect.filter(|e| *e != m.cursor) {
        return Err(ProjectionError::Concurrent {
            name: key.to_string(),
            expected,
            found: m.cursor,
        });
    }
    let mut counts = Counts::default();
    if let Err(e) = b.apply(&mut tx, m.version, recs, &mut counts).await {
        return Ok(Err(e));
    }
    counts.applied = recs.len() as i64;
    m.counts.add(&counts);
    if let Some(c) = cursor {
        m.cursor = c;
    }
    m.error = None;
    write_meta(&mut tx, &m).await?;
    tx.commit().await?;
    Ok(Ok(()))
}

/// A builder's state, read outside any write transaction.
async fn read_one(store: &Store, key: &str) -> Result<Meta, ProjectionError> {
    let mut tx = Tx::begin_read(store).await?;
    let m = read_meta_with(&mut tx, key, false).await?;
    tx.commit().await?;
    m.ok_or_else(|| ProjectionError::Unknown(key.to_string()))
}

/// Steps the builder under `key` until it has applied everything the replica holds.
async fn drain(store: &Store, name: &str, key: &str, chunk: i64) -> Result<(), ProjectionError> {
    while step(store, name, key, chunk).await?.applied > 0 {}
    Ok(())
}

/// A chunk failed: apply its actions one by one so that those before the culprit are
/// kept and the culprit is named; record why in `proj_meta.error`; the cursor stays
/// before the culprit.
async fn pinpoint(
    store: &Store,
    b: &dyn Builder,
    key: &str,
    recs: &[Record],
    first: ProjectionError,
) -> ProjectionError {
    let mut culprit = (recs.first().map(|r| r.action.id).unwrap_or(-1), first);
    if recs.len() > 1 {
        for r in recs {
            let one = std::slice::from_ref(r);
            match apply_and_commit(store, b, key, one, None, Some(r.action.id), None).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) | Err(e) => {
                    culprit = (r.action.id, e);
                    break;
                }
            }
        }
    }
    let err = ProjectionError::Action {
        id: culprit.0,
        why: culprit.1.to_string(),
    };
    let recorded: Result<(), ProjectionError> = async {
        let mut tx = Tx::begin(store).await?;
        if let Some(mut m) = read_meta(&mut tx, key).await? {
            m.error = Some(err.to_string());
            write_meta(&mut tx, &m).await?;
        }
        tx.commit().await?;
        Ok(())
    }
    .await;
    if let Err(e) = recorded {
        tracing::warn!(error = %e, "could not record the builder's error");
    }
    tracing::error!(builder = key, error = %err, "projection builder stopped");
    err
}

/// Steps until the builder has applied everything the replica holds now.
pub async fn catch_up(store: &Store, name: &str, chunk: i64) -> Result<Meta, ProjectionError> {
    ensure(store, name).await?;
    drain(store, name, name, chunk).await?;
    read_one(store, name).await
}

/// Builds the next version of `name` side by side from the first action, then swaps the
/// views and the cursor in one transaction and drops the old version.
pub async fn rebuild(store: &Store, name: &str, chunk: i64) -> Result<Meta, ProjectionError> {
    let b = builder(name)?;
    let live = ensure(store, name).await?;
    let next_key = format!("{name}#next");
    let v = live.version + 1;
    {
        let mut tx = Tx::begin(store).await?;
        create_version(&mut tx, b.as_ref(), v, true).await?;
        let m = Meta {
            name: next_key.clone(),
            cursor: START,
            version: v,
            counts: Counts::default(),
            updated_at: now_ms(),
            error: None,
        };
        write_meta(&mut tx, &m).await?;
        tx.commit().await?;
    }
    if b.per_case() {
        bulk_fill(store, b.as_ref(), &next_key, chunk).await?;
    }
    finish_rebuild(store, name, chunk).await
}

/// A rebuild of a per-case builder: walks the replica case by case (up to the
/// checkpoint at the start), so every case's documents are built in memory once and
/// written once, then leaves the cursor at that checkpoint for the ID-ordered catch-up.
async fn bulk_fill(
    store: &Store,
    b: &dyn Builder,
    key: &str,
    chunk: i64,
) -> Result<(), ProjectionError> {
    let Some(head) = store.checkpoint().await? else {
        return Ok(());
    };
    fill(store, b, key, Walk::ByCase { head }, chunk).await
}

/// How a rebuild walks the replica: case by case up to a head, or in ID order after the
/// builder's cursor until the replica ends.
#[derive(Debug, Clone, Copy)]
enum Walk {
    ByCase { head: i64 },
    ById,
}

/// Records to apply in one step, and where the cursor goes after them.
struct Batch {
    recs: Vec<Record>,
    cursor: Option<i64>,
}

/// The position of a rebuild's walk and the batches it makes of what is read: in
/// (case, ID) order the last case of a read is held back, as it may go on in the next.
struct Walker {
    walk: Walk,
    chunk: i64,
    after: i64,
    pos: (String, i64),
    carry: Vec<crate::source::Action>,
    finished: bool,
}

impl Walker {
    fn new(walk: Walk, after: i64, chunk: i64) -> Self {
        Walker {
            walk,
            chunk,
            after,
            pos: (String::new(), i64::MIN),
            carry: Vec::new(),
            finished: false,
        }
    }

    /// Takes one read; `None` when it makes no batch yet (one case goes on).
    fn accept(&mut self, read: Vec<crate::source::Action>) -> Option<Batch> {
        let done = (read.len() as i64) < self.chunk;
        self.finished = done;
        match self.walk {
            Walk::ById => {
                let last = read.last()?.id;
                self.after = last;
                Some(Batch {
                    recs: crate::source::parse::records(read),
                    cursor: Some(last),
                })
            }
            Walk::ByCase { head } => {
                if let Some(a) = read.last() {
                    self.pos = (a.case_number.clone(), a.id);
                }
                let mut acts = std::mem::take(&mut self.carry);
                acts.extend(read);
                if !done {
                    let last = acts
                        .last()
                        .map(|a| a.case_number.clone())
                        .unwrap_or_default();
                    let split = acts.iter().position(|a| a.case_number == last).unwrap_or(0);
                    self.carry = acts.split_off(split);
                    if acts.is_empty() {
                        return None;
                    }
                }
                Some(Batch {
                    recs: crate::source::parse::records(acts),
                    cursor: done.then_some(head),
                })
            }
        }
    }

    async fn read(&self, store: &Store) -> Result<Vec<crate::source::Action>, ProjectionError> {
        Ok(match self.walk {
            Walk::ById => store.actions_after(self.after, self.chunk).await?,
            Walk::ByCase { head } => {
                store
                    .actions_by_case((&self.pos.0, self.pos.1), head, self.chunk)
                    .await?
            }
        })
    }

    fn read_direct(
        &self,
        c: &rusqlite::Connection,
    ) -> rusqlite::Result<Vec<crate::source::Action>> {
        use crate::store::{ACTIONS_AFTER, ACTIONS_BY_CASE, direct};
        match self.walk {
            Walk::ById => direct::actions(c, ACTIONS_AFTER, (self.after, self.chunk)),
            Walk::ByCase { head } => direct::actions(
                c,
                ACTIONS_BY_CASE,
                (&self.pos.0, self.pos.1, head, self.chunk),
            ),
        }
    }
}

/// Reads of a case-ordered rebuild walk that share one read transaction.
const READS_A_SNAPSHOT: usize = 16;

/// Reads and parses a rebuild's batches on a thread of its own, one batch ahead of the
/// builder, on a direct connection. The thread ends at the end of the walk, on an error
/// (sent), or when the receiver is dropped.
fn spawn_reader(
    path: std::path::PathBuf,
    mut w: Walker,
) -> tokio::sync::mpsc::Receiver<Result<Batch, ProjectionError>> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    std::thread::spawn(move || {
        // Read in ID order, the replica's pages are each read once: a small page cache
        // (the OS caches the file) keeps the rebuild's memory down. Read case by case,
        // a page holds actions of many cases and is read again for each, but a case's
        // actions are spread over the whole file: 8 MiB was faster than 32 MiB on a
        // 2.9-million-action replica (parties 27.5 s against 37.5 s) and held less.
        let opened = crate::store::direct::Conn::open(&path).and_then(|c| {
            let kib = if matches!(w.walk, Walk::ById) {
                2048
            } else {
                8192
            };
            c.conn()
                .execute_batch(&format!("PRAGMA cache_size = -{kib}"))?;
            Ok(c)
        });
        let mut conn = match opened {
            Ok(c) => c,
            Err(e) => {
                let _ = tx.blocking_send(Err(crate::store::direct::to_sqlx(e).into()));
                return;
            }
        };
        // Case by case, the reads share one read transaction per window of reads: a read
        // that starts its own after the builder's commit finds the replica's file changed
        // and drops its whole page cache, and SQLite's allocator then gives the cache's
        // memory back to the system only to fault it in again for the next read. The
        // walk stops at a head fixed at its start, so a snapshot held a while sees the
        // same actions; it is renewed each window so that the checkpointer can reclaim
        // the WAL behind the builder's writes.
        let by_case = matches!(w.walk, Walk::ByCase { .. });
        let mut reads = 0usize;
        while !w.finished {
            if by_case
                && reads.is_multiple_of(READS_A_SNAPSHOT)
                && let Err(e) = conn.commit().and_then(|_| conn.begin())
            {
                let _ = tx.blocking_send(Err(crate::store::direct::to_sqlx(e).into()));
                return;
            }
            reads += 1;
            let read = match w.read_direct(conn.conn()) {
                Ok(r) => r,
                Err(e) => {
                    let _ = tx.blocking_send(Err(crate::store::direct::to_sqlx(e).into()));
                    return;
                }
            };
            if let Some(b) = w.accept(read)
                && tx.blocking_send(Ok(b)).is_err()
            {
                return;
            }
        }
    });
    rx
}

/// Applies a rebuild's walk to the builder under `key`, committing batch by batch. On a
/// SQLite file the replica is read and parsed on another thread while this one writes.
async fn fill(
    store: &Store,
    b: &dyn Builder,
    key: &str,
    walk: Walk,
    chunk: i64,
) -> Result<(), ProjectionError> {
    let mut expect = read_one(store, key).await?.cursor;
    let mut w = Walker::new(walk, expect, chunk);
    let mut rx = crate::store::direct::sqlite_file(store)
        .map(|p| spawn_reader(p, Walker::new(walk, expect, chunk)));
    let writer = crate::store::direct::Pool::writer_for(store);
    loop {
        let batch = match &mut rx {
            Some(rx) => match rx.recv().await {
                Some(b) => b?,
                None => return Ok(()),
            },
            None => {
                if w.finished {
                    return Ok(());
                }
                let read = w.read(store).await?;
                match w.accept(read) {
                    Some(b) => b,
                    None => continue,
                }
            }
        };
        let id_order = matches!(walk, Walk::ById);
        let r = apply_and_commit(
            store,
            b,
            key,
            &batch.recs,
            id_order.then_some(expect),
            batch.cursor,
            writer.as_ref(),
        )
        .await?;
        if let Err(e) = r {
            return Err(if id_order {
                pinpoint(store, b, key, &batch.recs, e).await
            } else {
                ProjectionError::Action {
                    id: batch.recs.first().map(|r| r.action.id).unwrap_or(-1),
                    why: format!(
                        "bulk rebuild of {} actions from case {:?}: {e}",
                        batch.recs.len(),
                        batch.recs.first().map(|r| &r.action.case_number)
                    ),
                }
            });
        }
        if let Some(c) = batch.cursor {
            expect = c;
        }
    }
}

async fn finish_rebuild(store: &Store, name: &str, chunk: i64) -> Result<Meta, ProjectionError> {
    let b = builder(name)?;
    let next_key = format!("{name}#next");
    let mut indexed = false;
    loop {
        fill(store, b.as_ref(), &next_key, Walk::ById, chunk).await?;
        if !indexed {
            // Caught up once: build the secondary indexes in their own transaction, then
            // catch up again and swap.
            let mut tx = Tx::begin(store).await?;
            let v = read_meta(&mut tx, &next_key)
                .await?
                .expect("next meta")
                .version;
            // SQLite sorts an index in up to a page cache's worth of memory, on top of
            // the caches the walk filled: a smaller one for the sort keeps the rebuild's
            // peak down (the sort spills to a temporary file instead).
            let sqlite = !tx.is_postgres();
            if sqlite {
                tx.exec("PRAGMA cache_size = -8192", &[]).await?;
            }
            let built = create_indexes(&mut tx, b.as_ref(), v).await;
            // The pool's connection gets its cache back whether the indexes were built.
            if sqlite {
                let normal = format!("PRAGMA cache_size = {}", crate::store::CACHE_SIZE);
                tx.exec(&normal, &[]).await?;
            }
            built?;
            tx.commit().await?;
            indexed = true;
            continue;
        }
        // Before the swap: a sample of the new version recomputed from the replica with
        // the pure functions `verify` uses; a difference keeps the live version.
        let (nv, ncursor) = {
            let mut tx = Tx::begin(store).await?;
            let m = read_meta(&mut tx, &next_key).await?.expect("next meta");
            tx.commit().await?;
            (m.version, m.cursor)
        };
        let rep = verify::verify_version(store, name, nv, ncursor, VERIFY_SAMPLE).await?;
        if !rep.clean() {
            return Err(ProjectionError::VerifyFailed {
                name: name.to_string(),
                version: nv,
                differences: rep.differences.len(),
                checked: rep.checked,
                first: rep.differences[0].chars().take(500).collect(),
            });
        }
        // Swap the views and the cursor in one transaction, if nothing new arrived.
        let mut tx = Tx::begin(store).await?;
        let mut next = read_meta(&mut tx, &next_key).await?.expect("next meta");
        let old = read_meta(&mut tx, name).await?.expect("live meta");
        let head: i64 = tx
            .int("SELECT COALESCE(MAX(id), -1) FROM actions", &[])
            .await?
            .unwrap_or(-1);
        if head > next.cursor {
            drop(tx);
            continue;
        }
        // On PostgreSQL the swap needs exclusive locks on the views and the old tables. A
        // long reader (a nightly export) holds them shared: waiting for it would queue
        // every API read behind the swap's pending lock. So the swap waits at most
        // SWAP_LOCK_WAIT for its locks, gives up (readers go on), and tries again.
        let swapped: Result<(), ProjectionError> = async {
            if tx.is_postgres() {
                tx.exec(
                    &format!(
                        "SET LOCAL lock_timeout = '{}ms'",
                        SWAP_LOCK_WAIT.as_millis()
                    ),
                    &[],
                )
                .await?;
            }
            point_views(&mut tx, b.as_ref(), next.version).await?;
            next.name = name.to_string();
            write_meta(&mut tx, &next).await?;
            tx.exec(
                "DELETE FROM proj_meta WHERE name = $1",
                &[next_key.as_str().into()],
            )
            .await?;
            for t in b.tables() {
                tx.exec(&format!("DROP TABLE IF EXISTS {t}_v{}", old.version), &[])
                    .await?;
            }
            Ok(())
        }
        .await;
        if let Err(e) = swapped {
            if lock_timeout(&e) {
                drop(tx);
                tracing::info!(
                    builder = name,
                    "the swap waits for a long reader (an export?); trying again"
                );
                tokio::time::sleep(SWAP_LOCK_WAIT).await;
                continue;
            }
            return Err(e);
        }
        tx.commit().await?;
        tracing::info!(
            builder = name,
            version = next.version,
            cursor = next.cursor,
            "projection rebuilt and swapped in"
        );
        return Ok(next);
    }
}

/// Binds for an IN list.
pub fn texts_in(keys: &[String]) -> Vec<Val> {
    keys.iter().map(|k| Val::T(Some(k.clone()))).collect()
}
