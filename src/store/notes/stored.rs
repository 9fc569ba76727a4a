//! The SQL side of the notes at rest: the `note_dicts` table (loading a dictionary by
//! ID, the newest, adding the next version, the automatic schedule the poller follows)
//! and the forms in which text-only statements read a compressed note.
//!
//! Owns every statement on `note_dicts` and on the note columns of `actions` that is
//! not an action's own read or write (those are `store::db`'s and `store::direct`'s). It
//! never changes a dictionary once added, and adds one only in a transaction that
//! checks the writer's epoch (the poller's, or a restore's).

use std::sync::Arc;

use super::{AtRest, Dict, SAMPLES_FIRST, SAMPLES_MAX, Unpacker, decode_error, id_of, train};
use crate::store::sql::{Tx, Val};
use crate::store::{Store, StoreError};

pub(super) fn missing(id: i64) -> sqlx::Error {
    decode_error(format!(
        "a note names dictionary {id}, which is not in the store"
    ))
}

/// The hex form of a bytes column, as text (`Tx` reads text).
fn hex_sql(pg: bool, col: &str) -> String {
    if pg {
        format!("encode({col}, 'hex')")
    } else {
        format!("hex({col})")
    }
}

/// An SQL expression of an `actions` row's compressed note as text, for statements that
/// read text: `DICT HEX` (the dictionary's ID, the frame in hex), or `''` when the row
/// holds its note as text. [`parse_packed`] reads it.
pub fn packed_sql(pg: bool) -> String {
    format!(
        "COALESCE(CAST(note_dict AS TEXT) || ' ' || {}, '')",
        hex_sql(pg, "note_z")
    )
}

/// The compressed note [`packed_sql`] gave (`None`: the row holds its note as text, or
/// the text is malformed; the caller tells which by `s` being empty).
pub fn parse_packed(s: &str) -> Option<AtRest> {
    let (d, h) = s.split_once(' ')?;
    Some(AtRest {
        text: None,
        z: Some(hex::decode(h).ok()?),
        dict: Some(d.parse().ok()?),
    })
}

/// A dictionary by ID, from the cache or the store.
pub(super) async fn by_id(tx: &mut Tx, id: i64) -> Result<Arc<Dict>, sqlx::Error> {
    if let Some(d) = Dict::cached(id) {
        return Ok(d);
    }
    let sql = format!(
        "SELECT {} FROM note_dicts WHERE id = $1",
        hex_sql(tx.is_postgres(), "bytes")
    );
    let row = tx.texts(&sql, &[id.into()]).await?;
    let row = row.into_iter().next().ok_or_else(|| missing(id))?;
    let bytes = hex::decode(row)
        .map_err(|_| decode_error(format!("note dictionary {id}: a malformed row")))?;
    Ok(Dict::keep(Dict::prepare(&bytes)?))
}

/// The newest dictionary of the store, if any.
pub async fn current(tx: &mut Tx) -> Result<Option<Arc<Dict>>, sqlx::Error> {
    let id = tx
        .int(
            "SELECT id FROM note_dicts ORDER BY version DESC LIMIT 1",
            &[],
        )
        .await?;
    match id {
        Some(id) => Ok(Some(by_id(tx, id).await?)),
        None => Ok(None),
    }
}

/// The newest `n` notes of the replica, decoded, newest first.
pub async fn newest(tx: &mut Tx, n: usize) -> Result<Vec<String>, sqlx::Error> {
    let sql = format!(
        "SELECT CAST(id AS TEXT) || ' ' || CASE WHEN note_z IS NULL THEN 't' || note ELSE 'z' || {} END \
         FROM actions WHERE note IS NOT NULL OR note_z IS NOT NULL ORDER BY id DESC LIMIT $1",
        packed_sql(tx.is_postgres())
    );
    let rows = tx.texts(&sql, &[(n as i64).into()]).await?;
    let mut out = Vec::with_capacity(rows.len());
    let mut u = Unpacker::new();
    for r in rows {
        let bad = || decode_error("a note row is malformed".into());
        let (id, rest) = r.split_once(' ').ok_or_else(bad)?;
        let id: i64 = id.parse().map_err(|_| bad())?;
        if let Some(t) = rest.strip_prefix('t') {
            out.push(t.to_string());
            continue;
        }
        let row = rest
            .strip_prefix('z')
            .and_then(parse_packed)
            .ok_or_else(bad)?;
        out.extend(u.unpack_in(tx, id, row).await?);
    }
    Ok(out)
}

/// Notes stored, counted up to `limit`.
async fn stored_up_to(tx: &mut Tx, limit: usize) -> Result<usize, sqlx::Error> {
    let n = tx
        .int(
            "SELECT COUNT(*) FROM (SELECT 1 FROM actions WHERE note IS NOT NULL OR note_z IS NOT NULL LIMIT $1) s",
            &[(limit as i64).into()],
        )
        .await?;
    Ok(n.unwrap_or(0) as usize)
}

/// [`train`] on a blocking thread (seconds of CPU at [`SAMPLES_MAX`]).
async fn train_apart(samples: Vec<String>) -> Result<Option<Vec<u8>>, sqlx::Error> {
    tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = samples.iter().map(String::as_str).collect();
        train(&refs)
    })
    .await
    .map_err(|e| decode_error(format!("training a note dictionary: {e}")))
}

/// Trains a dictionary on `samples` (on a blocking thread: seconds of CPU at
/// [`SAMPLES_MAX`]) and adds it to the store as the next version, in `tx` (the
/// caller's write transaction, which checks the writer's epoch). `None` when there is
/// too little to train on.
pub async fn add(tx: &mut Tx, samples: Vec<String>) -> Result<Option<Arc<Dict>>, sqlx::Error> {
    let n = samples.len() as i64;
    let bytes = train_apart(samples).await?;
    match bytes {
        Some(b) => Ok(Some(add_trained(tx, b, n).await?.0)),
        None => Ok(None),
    }
}

/// Adds the trained dictionary `bytes` (of `samples` notes) as the next version, in
/// `tx`, and gives it with its version; the same bytes again keep the version they
/// have.
pub async fn add_trained(
    tx: &mut Tx,
    bytes: Vec<u8>,
    samples: i64,
) -> Result<(Arc<Dict>, i64), sqlx::Error> {
    let id = id_of(&bytes);
    if let Some(v) = tx
        .int("SELECT version FROM note_dicts WHERE id = $1", &[id.into()])
        .await?
    {
        return Ok((by_id(tx, id).await?, v));
    }
    let version = tx
        .int("SELECT COALESCE(MAX(version), 0) + 1 FROM note_dicts", &[])
        .await?
        .unwrap_or(1);
    let d = Dict::prepare(&bytes)?;
    tx.exec(
        "INSERT INTO note_dicts (id, version, created_at, samples, bytes) VALUES ($1, $2, $3, $4, $5)",
        &[
            id.into(),
            version.into(),
            crate::store::now_ms().into(),
            samples.into(),
            Val::Z(Some(bytes)),
        ],
    )
    .await?;
    Ok((Dict::keep(d), version))
}

/// How many notes the next automatic dictionary is trained on, given the notes the
/// newest was trained on (`None`: no dictionary is due, ever again).
pub fn next_samples(newest: Option<i64>) -> Option<usize> {
    match newest {
        None => Some(SAMPLES_FIRST),
        Some(n) if (n as usize) < SAMPLES_MAX => Some(SAMPLES_MAX),
        Some(_) => None,
    }
}

/// The samples of the automatic dictionary due now, if one is: the newest notes, once
/// the replica holds as many as it is trained on ([`next_samples`]). A read.
pub async fn due(tx: &mut Tx) -> Result<Option<Vec<String>>, sqlx::Error> {
    let last = tx
        .int(
            "SELECT samples FROM note_dicts ORDER BY version DESC LIMIT 1",
            &[],
        )
        .await?;
    let Some(want) = next_samples(last) else {
        return Ok(None);
    };
    if stored_up_to(tx, want).await? < want {
        return Ok(None);
    }
    Ok(Some(newest(tx, want).await?))
}

/// Adds the automatic dictionary due now, if one is ([`due`]): trained outside any
/// transaction, added in one that checks the writer's `epoch` (the poller's, before it
/// writes a page). Returns the version added.
pub async fn tend(store: &Store, epoch: i64) -> Result<Option<i64>, StoreError> {
    let samples = {
        let mut tx = Tx::single(store).await?;
        due(&mut tx).await?
    };
    let Some(samples) = samples else {
        return Ok(None);
    };
    let n = samples.len() as i64;
    let bytes = train_apart(samples).await?;
    let Some(bytes) = bytes else {
        return Ok(None);
    };
    let mut tx = Tx::begin(store).await?;
    let sql = format!(
        "SELECT epoch FROM writer_state WHERE singleton = 1{}",
        tx.lock()
    );
    let current = tx.int(&sql, &[]).await?.unwrap_or(0);
    if current > epoch {
        return Err(StoreError::Fenced {
            mine: epoch,
            current,
        });
    }
    let (_, version) = add_trained(&mut tx, bytes, n).await?;
    tx.commit().await?;
    Ok(Some(version))
}
