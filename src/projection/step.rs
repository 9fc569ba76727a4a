//! Stepping a builder: read the replica after its cursor, apply a chunk and move the
//! cursor in the same transaction (`step`, `catch_up`); a chunk that fails is applied
//! again one action at a time, so the builder stops at the culprit, named in
//! `proj_meta.error` (`pinpoint`).
//!
//! Owns the write transaction of a step and the compare-and-set on the cursor. It never
//! writes the replica, and never moves a cursor past an action it did not apply.

use serde::Serialize;

use super::{
    Builder, Counts, Meta, ProjectionError, builder, ensure, read_meta, read_meta_with, write_meta,
};
use crate::source::model::Record;
use crate::store::Store;
use crate::store::sql::Tx;

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
        false,
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
#[allow(clippy::too_many_arguments)]
pub(super) async fn apply_and_commit(
    store: &Store,
    b: &dyn Builder,
    key: &str,
    recs: &[Record],
    expect: Option<i64>,
    cursor: Option<i64>,
    bulk: Option<&std::sync::Arc<crate::store::direct::Pool>>,
    rebuilding: bool,
) -> Result<Result<(), ProjectionError>, ProjectionError> {
    // A rebuild writes tables nobody reads yet, from a process of its own: on a SQLite
    // file its statements run on this thread (no worker hand-off per statement), on one
    // connection kept for the whole rebuild.
    let mut tx = match bulk {
        Some(pool) => Tx::begin_in(pool)?,
        None => Tx::begin(store).await?,
    };
    if rebuilding && tx.is_postgres() {
        // A rebuild's tables grow from empty during its run, without statistics:
        // PostgreSQL would keep the generic plan it made of a prepared statement while
        // a table was empty (a sequential scan, so every batch's lookups read the
        // whole table again). Each statement is planned for the table as it is.
        tx.exec("SET LOCAL plan_cache_mode = force_custom_plan", &[])
            .await?;
    }
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
pub(super) async fn read_one(store: &Store, key: &str) -> Result<Meta, ProjectionError> {
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
pub(super) async fn pinpoint(
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
            match apply_and_commit(store, b, key, one, None, Some(r.action.id), None, false).await {
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
