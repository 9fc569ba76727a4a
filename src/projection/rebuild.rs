//! Rebuilding a projection side by side: the next version's tables are filled from the
//! first action (a reader thread walks the replica case by case, one batch ahead of the
//! writes), a sample is verified, and the views, cursor and counters are swapped in one
//! transaction. Readers keep the live version until the swap; a killed rebuild leaves
//! it untouched. On a SQLite file the rebuild keeps the WAL within a limit: its reader
//! never lets go of the file for long, which would keep SQLite from ever starting the WAL
//! over, so the WAL would grow to the size of everything the rebuild writes.
//!
//! Must never move the live version's cursor or touch its tables before the swap.

use std::sync::Arc;

use super::wal::{WalGate, WalLimit};
use super::*;

/// Builds the next version of `name` side by side from the first action, then swaps the
/// views and the cursor in one transaction and drops the old version; a SQLite WAL is
/// kept within the default `projection.rebuild_wal_limit_mib`.
pub async fn rebuild(store: &Store, name: &str, chunk: i64) -> Result<Meta, ProjectionError> {
    let wal_limit = crate::config::ProjectionSettings::default().rebuild_wal_limit();
    rebuild_with(store, name, chunk, wal_limit).await
}

/// [`rebuild`], with the size in bytes past which a SQLite file's WAL is truncated
/// during the rebuild (`projection.rebuild_wal_limit_mib`).
pub async fn rebuild_with(
    store: &Store,
    name: &str,
    chunk: i64,
    wal_limit: u64,
) -> Result<Meta, ProjectionError> {
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
        bulk_fill(store, b.as_ref(), &next_key, chunk, wal_limit).await?;
    }
    finish_rebuild(store, name, chunk, wal_limit).await
}

/// A rebuild of a per-case builder: walks the replica case by case (up to the
/// checkpoint at the start), so every case's documents are built in memory once and
/// written once, then leaves the cursor at that checkpoint for the ID-ordered catch-up.
async fn bulk_fill(
    store: &Store,
    b: &dyn Builder,
    key: &str,
    chunk: i64,
    wal_limit: u64,
) -> Result<(), ProjectionError> {
    let Some(head) = store.checkpoint().await? else {
        return Ok(());
    };
    fill(store, b, key, Walk::ByCase { head }, chunk, wal_limit).await
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
    ) -> Result<Vec<crate::source::Action>, sqlx::Error> {
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

/// What a rebuild's reader thread sends its writer.
enum Read {
    Batch(Batch),
    /// The reader holds no snapshot and waits for [`WalGate::open`].
    Stopped,
}

/// Reads and parses a rebuild's batches on a thread of its own, one batch ahead of the
/// builder, on a direct connection. The thread ends at the end of the walk, on an error
/// (sent), or when the receiver is dropped.
fn spawn_reader(
    path: std::path::PathBuf,
    mut w: Walker,
    gate: Arc<WalGate>,
) -> tokio::sync::mpsc::Receiver<Result<Read, ProjectionError>> {
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
            // Between snapshots (each read is one in ID order), where the writer may
            // truncate the WAL.
            if !by_case || reads.is_multiple_of(READS_A_SNAPSHOT) {
                let r = conn.commit().and_then(|_| {
                    gate.stop_if_wanted(
                        || tx.blocking_send(Ok(Read::Stopped)).is_ok(),
                        || tx.is_closed(),
                    );
                    if by_case { conn.begin() } else { Ok(()) }
                });
                if let Err(e) = r {
                    let _ = tx.blocking_send(Err(crate::store::direct::to_sqlx(e).into()));
                    return;
                }
            }
            reads += 1;
            let read = match w.read_direct(conn.conn()) {
                Ok(r) => r,
                Err(e) => {
                    let _ = tx.blocking_send(Err(e.into()));
                    return;
                }
            };
            if let Some(b) = w.accept(read)
                && tx.blocking_send(Ok(Read::Batch(b))).is_err()
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
    wal_limit: u64,
) -> Result<(), ProjectionError> {
    let start = read_one(store, key).await?;
    let mut expect = start.cursor;
    let mut grown = Growth::new(store.backend() == "postgres");
    let mut w = Walker::new(walk, expect, chunk);
    let file = crate::store::direct::sqlite_file(store);
    let writer = crate::store::direct::Pool::writer_for(store);
    let mut wal =
        (file.as_deref().zip(writer.clone())).map(|(p, w)| WalLimit::new(p, w, wal_limit));
    let mut rx = file
        .zip(wal.as_ref())
        .map(|(p, l)| spawn_reader(p, Walker::new(walk, expect, chunk), l.gate.clone()));
    loop {
        let batch = match &mut rx {
            Some(rx) => match rx.recv().await {
                Some(Ok(Read::Batch(b))) => b,
                Some(Ok(Read::Stopped)) => {
                    if let Some(l) = &mut wal {
                        l.truncate()?;
                    }
                    continue;
                }
                Some(Err(e)) => return Err(e),
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
            true,
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
        if let Some(l) = &wal {
            l.after_commit();
        }
        if grown.committed() {
            let mut tx = Tx::begin(store).await?;
            for t in b.tables(tx.is_postgres()) {
                super::analyze(&mut tx, &format!("{t}_v{}", start.version)).await?;
            }
            tx.commit().await?;
        }
    }
}

/// When a rebuild refreshes the statistics of the version it fills (PostgreSQL): after
/// the 1st, 2nd, 4th, 8th... batch, so the planner never sees the growing tables as more
/// than twice smaller than they are. A new version starts empty and its statistics
/// would otherwise wait for autovacuum: at a million cases the erasure lookup of the
/// parties builder (`case_number IN (...)`) ran as a parallel bitmap scan of millions of
/// rows, 3 s a batch, while the table had none. (SQLite plans by its indexes alone.)
struct Growth {
    on: bool,
    batches: u64,
}

impl Growth {
    fn new(on: bool) -> Growth {
        Growth { on, batches: 0 }
    }

    /// Counts a committed batch; whether to refresh the statistics now.
    fn committed(&mut self) -> bool {
        self.batches += 1;
        self.on && self.batches.is_power_of_two()
    }
}

async fn finish_rebuild(
    store: &Store,
    name: &str,
    chunk: i64,
    wal_limit: u64,
) -> Result<Meta, ProjectionError> {
    let b = builder(name)?;
    let next_key = format!("{name}#next");
    let mut indexed = false;
    loop {
        fill(store, b.as_ref(), &next_key, Walk::ById, chunk, wal_limit).await?;
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
            // Fresh statistics for the new version before readers see it (and its
            // full-text index in one segment).
            for t in b.tables(tx.is_postgres()) {
                super::optimize(&mut tx, &format!("{t}_v{v}")).await?;
                super::analyze(&mut tx, &format!("{t}_v{v}")).await?;
            }
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
            for t in b.retired_tables() {
                tx.exec(&format!("DROP VIEW IF EXISTS {t}"), &[]).await?;
            }
            for t in b.tables(tx.is_postgres()).iter().chain(b.retired_tables()) {
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
