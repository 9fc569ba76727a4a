//! The quarantine in a snapshot (issue 40): every quarantine row (held back or repaired)
//! with its bytes, as one gzip-compressed NDJSON file beside the action chunks, named
//! in the manifest with its row count and SHA-256.
//!
//! Owns that file's format. The bytes of an erased case's rows are left out, with or
//! without `--include-pii` (erasure is the law, not a scope), as the erasure leaves them
//! out of the store
//! ([`crate::projection::parties`]). Restore inserts the rows in the load's
//! transaction (a row already present, same ID and bytes, is skipped) and counts the
//! held-back ones per case again; it never moves the checkpoint.

use std::collections::HashSet;
use std::io::{BufRead, Read, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{HashRead, SnapshotError, close_chunk};
use crate::store::sql::Tx;

/// The quarantine file named in the manifest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QuarantineFile {
    pub file: String,
    pub rows: i64,
    pub sha256: String,
}

/// One row of the file: the quarantine row, its bytes in hex.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct Row {
    action_id: Option<i64>,
    case_number: Option<String>,
    reason: String,
    detail: String,
    status: String,
    raw: String,
    page_after: i64,
    received_at: i64,
    epoch: i64,
}

const NAME: &str = "quarantine.ndjson.gz";

/// Writes the quarantine rows received after `after` (all of them from the start) as
/// the read transaction `tx` sees them; the bytes of `erased` cases are left out.
pub(super) async fn write(
    tx: &mut Tx,
    dir: &Path,
    after: i64,
    erased: &HashSet<String>,
) -> Result<QuarantineFile, SnapshotError> {
    let sql = if tx.is_postgres() {
        "SELECT json_build_object('action_id', action_id, 'case_number', case_number, 'reason', reason, \
         'detail', detail, 'status', status, 'raw', encode(raw, 'hex'), 'page_after', page_after, \
         'received_at', received_at, 'epoch', epoch)::text FROM quarantine WHERE page_after >= $1 ORDER BY seq"
    } else {
        "SELECT json_object('action_id', action_id, 'case_number', case_number, 'reason', reason, \
         'detail', detail, 'status', status, 'raw', lower(hex(raw)), 'page_after', page_after, \
         'received_at', received_at, 'epoch', epoch) FROM quarantine WHERE page_after >= $1 ORDER BY seq"
    };
    let from = if after < 0 { i64::MIN } else { after };
    let rows = tx.texts(sql, &[from.into()]).await?;
    let (_, mut w) = super::open_file(dir, NAME)?;
    for r in &rows {
        let mut row: Row = serde_json::from_str(r)
            .map_err(|e| SnapshotError::Other(format!("quarantine: {e}")))?;
        if row.case_number.as_ref().is_some_and(|c| erased.contains(c)) && !row.raw.is_empty() {
            row.raw.clear();
            row.detail.push_str(crate::privacy::QUARANTINE_ERASED);
        }
        let line = serde_json::to_string(&row)
            .map_err(|e| SnapshotError::Other(format!("quarantine: {e}")))?;
        w.write_all(line.as_bytes())?;
        w.write_all(b"\n")?;
    }
    Ok(QuarantineFile {
        file: NAME.into(),
        rows: rows.len() as i64,
        sha256: close_chunk(w)?,
    })
}

/// Verifies the quarantine file of a snapshot and inserts its rows in `tx`; returns how
/// many were inserted.
pub(super) async fn load(
    tx: &mut Tx,
    dir: &Path,
    f: &QuarantineFile,
) -> Result<i64, SnapshotError> {
    let refuse = |s: String| SnapshotError::Refused(s);
    super::not_a_link(&dir.join(&f.file))?;
    let file = std::fs::File::open(dir.join(&f.file))?;
    let mut hr = HashRead {
        inner: std::io::BufReader::new(file),
        sha: Sha256::new(),
    };
    let mut rows = Vec::new();
    {
        let gz = flate2::read::GzDecoder::new(&mut hr);
        let lines = std::io::BufReader::new(gz.take(super::MAX_LINE as u64 * 64));
        for line in lines.lines() {
            let line = line?;
            let row: Row = serde_json::from_str(&line)
                .map_err(|e| refuse(format!("{}: a row that is not one: {e}", f.file)))?;
            rows.push(row);
        }
    }
    std::io::copy(&mut hr, &mut std::io::sink())?;
    if hex::encode(hr.sha.finalize()) != f.sha256 || rows.len() as i64 != f.rows {
        return Err(refuse(format!(
            "{} does not match its checksum or row count",
            f.file
        )));
    }
    let unhex = if tx.is_postgres() {
        "decode($1, 'hex')"
    } else {
        "unhex($1)"
    };
    let mut inserted = 0;
    for r in rows {
        let known = tx
            .int(
                &format!(
                    "SELECT COUNT(*) FROM quarantine WHERE action_id IS NOT DISTINCT FROM $2 AND raw = {unhex}"
                ),
                &[r.raw.as_str().into(), r.action_id.into()],
            )
            .await?
            .unwrap_or(0);
        if known > 0 {
            continue;
        }
        tx.exec(
            &format!(
                "INSERT INTO quarantine (raw, action_id, case_number, reason, detail, status, page_after, received_at, epoch) \
                 VALUES ({unhex}, $2, $3, $4, $5, $6, $7, $8, $9)"
            ),
            &[
                r.raw.as_str().into(),
                r.action_id.into(),
                r.case_number.as_deref().into(),
                r.reason.as_str().into(),
                r.detail.as_str().into(),
                r.status.as_str().into(),
                r.page_after.into(),
                r.received_at.into(),
                r.epoch.into(),
            ],
        )
        .await?;
        if r.status == "held"
            && let Some(case) = r.case_number.as_deref()
        {
            tx.exec(
                "INSERT INTO case_quarantine (case_number, held) VALUES ($1, 1) \
                 ON CONFLICT (case_number) DO UPDATE SET held = case_quarantine.held + 1",
                &[case.into()],
            )
            .await?;
        }
        inserted += 1;
    }
    Ok(inserted)
}
