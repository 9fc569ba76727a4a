//! The projection watermark and the read gate: every answer of the read side opens its
//! snapshot here, learns how far the projections have come and whether the feed's phase
//! lets it answer at all.
//!
//! Owns the watermark's one query and its short cache. Reads `settings`, `proj_meta`,
//! `writer_state` and `timeline`; never writes, never reads `actions`.

use serde::Serialize;

use super::limit::Plans;
use super::{Problem, ReadState};
use crate::phase::Phase;
use crate::store::sql::Tx;

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Watermark {
    /// The last action ID applied by every projection builder.
    pub action_id: i64,
    /// Its publication time, when it is an action of a case.
    pub published: Option<String>,
    /// Actions the replica holds beyond the watermark, in IDs.
    pub lag_ids: i64,
    /// Seconds since the slowest builder last moved, when it is behind; 0 when caught up.
    pub lag_seconds: i64,
    pub phase: String,
    /// On a PostgreSQL hot standby: seconds its replay is behind the primary (0 while
    /// it has replayed all it received; the time since the last replayed transaction
    /// otherwise, or, before it has replayed one since it started, the time since it
    /// started: its data is older than that, so the figure is a lower bound, never a 0
    /// for a standby that is behind). Absent on a primary and on SQLite.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub standby_lag_seconds: Option<i64>,
}

/// The watermark, the phase and whether every builder has a cursor, in one query.
pub async fn meta(tx: &mut Tx) -> Result<(Watermark, bool), Problem> {
    let row = tx
        .texts(
            "SELECT COALESCE((SELECT value FROM settings WHERE key = 'phase'), 'off') || '|' || \
             (SELECT COUNT(*) FROM proj_meta WHERE name NOT LIKE '%#next') || '|' || \
             COALESCE((SELECT MIN(cursor) FROM proj_meta WHERE name NOT LIKE '%#next'), -1) || '|' || \
             COALESCE((SELECT MIN(updated_at) FROM proj_meta WHERE name NOT LIKE '%#next'), 0) || '|' || \
             COALESCE((SELECT checkpoint FROM writer_state WHERE singleton = 1), -1) || '|' || \
             COALESCE((SELECT published FROM timeline WHERE action_id = \
                 (SELECT MIN(cursor) FROM proj_meta WHERE name NOT LIKE '%#next')), '')",
            &[],
        )
        .await?
        .pop()
        .unwrap_or_default();
    let f: Vec<&str> = row.splitn(6, '|').collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<i64>().ok());
    let (cursor, updated, checkpoint) = (
        num(2).unwrap_or(-1),
        num(3).unwrap_or(0),
        num(4).unwrap_or(-1),
    );
    let built = num(1).unwrap_or(0) >= crate::readmodel::meta::NAMES.len() as i64;
    let standby_lag_seconds = if tx.is_postgres() {
        tx.texts(
            "SELECT CASE WHEN NOT pg_is_in_recovery() THEN '' \
             WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN '0' \
             ELSE CAST(CAST(EXTRACT(EPOCH FROM now() - COALESCE(pg_last_xact_replay_timestamp(), pg_postmaster_start_time())) AS BIGINT) AS TEXT) END",
            &[],
        )
        .await?
        .pop()
        .and_then(|v| v.parse::<i64>().ok())
        .map(|v| v.max(0))
    } else {
        None
    };
    let lag_ids = (checkpoint - cursor).max(0);
    let lag_seconds = if lag_ids == 0 {
        0
    } else {
        ((crate::store::now_ms() - updated) / 1000).max(0)
    };
    Ok((
        Watermark {
            action_id: cursor,
            published: f.get(5).filter(|p| !p.is_empty()).map(|p| p.to_string()),
            lag_ids,
            lag_seconds,
            phase: f.first().unwrap_or(&"off").to_string(),
            standby_lag_seconds,
        },
        built,
    ))
}

/// The meta, from the cache when it is younger than `api.meta_cache_ms`. Projections only
/// move forward, so a cached watermark still holds: every action up to it is applied.
async fn cached_meta(state: &ReadState, tx: &mut Tx) -> Result<(Watermark, bool), Problem> {
    let ttl = state.opts.meta_cache;
    if !ttl.is_zero()
        && let Some((at, m)) = state.meta.lock().expect("meta cache").as_ref()
        && at.elapsed() < ttl
    {
        return Ok(m.clone());
    }
    let m = meta(tx).await?;
    if !ttl.is_zero() {
        *state.meta.lock().expect("meta cache") = Some((std::time::Instant::now(), m.clone()));
    }
    Ok(m)
}

/// Opens a read snapshot, checks the phase and reads the watermark.
pub async fn open(state: &ReadState) -> Result<(Tx, Watermark), Problem> {
    let tx = super::limit::begin(state).await?;
    gate(state, tx).await
}

/// Like [`open`] without a transaction, for an answer of one indexed, bounded statement
/// (on a SQLite file it runs on a direct connection, on this thread); on PostgreSQL its
/// plan is kept ([`Plans::Kept`]).
pub async fn open_single(state: &ReadState) -> Result<(Tx, Watermark), Problem> {
    let tx = super::limit::single(state, Plans::Kept).await?;
    gate(state, tx).await
}

/// The snapshot of a list page ([`super::limit::page`]): one statement on PostgreSQL,
/// a direct connection's transaction on a SQLite file.
pub async fn open_page(state: &ReadState, plans: Plans) -> Result<(Tx, Watermark), Problem> {
    let tx = super::limit::page(state, plans).await?;
    gate(state, tx).await
}

/// The snapshot of a list: [`open`] for a `whole` result (a stream or a count, which
/// may run long, off a direct connection), else [`open_page`] (a page: a few bounded
/// statements, index walks of at most `limit + 1` rows) planned as `plans` says.
pub async fn open_list(
    state: &ReadState,
    whole: bool,
    plans: Plans,
) -> Result<(Tx, Watermark), Problem> {
    if whole {
        open(state).await
    } else {
        open_page(state, plans).await
    }
}

/// Like [`open`], on a direct connection when the store is a SQLite file: for answers of
/// several indexed statements in one snapshot. A direct connection runs on the caller's
/// thread: a bulk lookup runs it off the async threads (`spawn_blocking`); a list page
/// ([`open_page`]) runs it in place, as a single case does. Whether it is direct is
/// [`Tx::is_direct`].
pub async fn open_many(state: &ReadState) -> Result<(Tx, Watermark), Problem> {
    let tx = super::limit::many(state).await?;
    gate(state, tx).await
}

async fn gate(state: &ReadState, mut tx: Tx) -> Result<(Tx, Watermark), Problem> {
    let (wm, has_meta) = cached_meta(state, &mut tx).await?;
    if Phase::parse(&wm.phase).is_none_or(|p| p < Phase::Serve) {
        return Err(Problem::unavailable(format!(
            "the read API is off: the feed is in phase `{}`; it answers from phase `serve` (`isir phase set serve`)",
            wm.phase
        )));
    }
    if !has_meta {
        return Err(Problem::unavailable(
            "the projections are not built yet (`isir project catch-up`)",
        ));
    }
    Ok((tx, wm))
}
