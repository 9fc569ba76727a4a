//! Writing a snapshot: one read transaction (the writer is never blocked), chunk files
//! written as they fill, the manifest and its checksum last, through a staging directory
//! renamed when complete.

use std::io::Write;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::*;
use crate::source::Action;
use crate::store::Store;
use crate::store::sql::Tx;

/// Writes a snapshot of the replica into `out` (which must not exist or be empty),
/// through a staging directory renamed when complete, readable by its owner only.
/// `after`: only actions above it. The notes of erased cases are redacted
/// ([`crate::privacy::redact_note`]) whatever `include_pii`, which is only recorded in
/// the manifest.
pub async fn create(
    store: &Store,
    out: &Path,
    after: i64,
    chunk_actions: i64,
    progress: bool,
    include_pii: bool,
) -> Result<SnapshotManifest, SnapshotError> {
    if chunk_actions < 1 {
        return Err(SnapshotError::Other("chunk size must be positive".into()));
    }
    if out.exists() && std::fs::read_dir(out)?.next().is_some() {
        return Err(SnapshotError::Other(format!(
            "{} exists and is not empty",
            out.display()
        )));
    }
    // The same staging and renaming as the exports.
    let staging = crate::export::staging_dir(out);
    if let Some(p) = staging.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(p)?;
    }
    crate::privacy::create_private_dir(&staging)?;
    match create_in(store, &staging, after, chunk_actions, progress, include_pii).await {
        Ok(m) => {
            if out.exists() {
                std::fs::remove_dir(out)?;
            }
            std::fs::rename(&staging, out)?;
            Ok(m)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            Err(e)
        }
    }
}

pub(super) async fn create_in(
    store: &Store,
    dir: &Path,
    after: i64,
    chunk_actions: i64,
    progress: bool,
    include_pii: bool,
) -> Result<SnapshotManifest, SnapshotError> {
    let mut tx = Tx::begin_read_direct(store).await?;
    let checkpoint = tx
        .int(
            "SELECT COALESCE(checkpoint, -1) FROM writer_state WHERE singleton = 1",
            &[],
        )
        .await?
        .filter(|c| *c >= 0);
    let upto = checkpoint.unwrap_or(-1);
    let bar = if progress {
        let total = tx
            .int(
                "SELECT COUNT(*) FROM actions WHERE id > $1 AND id <= $2",
                &[after.into(), upto.into()],
            )
            .await?
            .unwrap_or(0);
        crate::logging::Bar::new(
            true,
            total as u64,
            "snapshot {wide_bar} {pos}/{len} actions {per_sec} ETA {eta}",
        )
    } else {
        None
    };
    // The erased cases, from the replica itself (the projections may not be built):
    // every action up to the checkpoint that [`crate::privacy::is_erasure`] calls one,
    // among the few the SQL narrows to. Whatever `include_pii`: erasure is the law, not
    // a scope.
    let candidates = tx
        .texts(
            &format!(
                "SELECT {} FROM actions WHERE id <= $1 AND {} ORDER BY id",
                action_json_sql(tx.is_postgres()),
                crate::privacy::erasure_candidates_sql()
            ),
            &[upto.into()],
        )
        .await?;
    let mut erased = std::collections::HashSet::new();
    for json in candidates {
        let a: Action = serde_json::from_str(&json)
            .map_err(|e| SnapshotError::Other(format!("an action of the replica: {e}")))?;
        let note = crate::source::parse::note_of(a.note.as_deref());
        if crate::privacy::is_erasure(&a.type_code, &note) {
            erased.insert(a.case_number);
        }
    }
    // Each row comes as `ID US case US JSON` (US: U+001F, which XML text cannot hold):
    // the JSON line built by the database is written as it is (restore parses it into
    // an action), but an erased case's, whose note is redacted first; the ID keeps the
    // chunk's bounds.
    let us = if tx.is_postgres() {
        "chr(31)"
    } else {
        "char(31)"
    };
    // A compressed note comes in its own field (`DICT HEX`, [`crate::store::notes`]),
    // the JSON's `note` null: it is decoded and put in its place.
    let sql = format!(
        "SELECT CAST(id AS TEXT) || {us} || case_number || {us} || {} || {us} || {} FROM actions WHERE id > $1 AND id <= $2 ORDER BY id LIMIT $3",
        crate::store::notes::packed_sql(tx.is_postgres()),
        action_json_sql(tx.is_postgres())
    );
    let mut unpacker = crate::store::notes::Unpacker::new();
    let mut chunks = Vec::new();
    let mut cur: Option<(String, ChunkWriter, Chunk)> = None;
    let mut pos = after;
    let mut total = 0i64;
    loop {
        let rows = tx
            .texts(&sql, &[pos.into(), upto.into(), READ.into()])
            .await?;
        if rows.is_empty() {
            break;
        }
        for r in &rows {
            let mut f = r.splitn(4, '\u{1f}');
            let (id, case, packed, json) = (|| {
                Some((
                    f.next()?.parse::<i64>().ok()?,
                    f.next()?,
                    f.next()?,
                    f.next()?,
                ))
            })()
            .ok_or_else(|| SnapshotError::Other("an action row without its ID".into()))?;
            let redacted;
            let mut json = json;
            let spliced;
            if !packed.is_empty() {
                // The JSON's last field is the note, null: the decoded note takes its place.
                let row = crate::store::notes::parse_packed(packed).ok_or_else(|| {
                    SnapshotError::Other(format!("action {id}: a malformed compressed note"))
                })?;
                let note = unpacker.unpack_in(&mut tx, id, row).await?;
                let head = json
                    .strip_suffix("null}")
                    .filter(|h| {
                        let h = h.trim_end();
                        h.ends_with("\"note\":") || h.ends_with("\"note\" :")
                    })
                    .ok_or_else(|| {
                        SnapshotError::Other(format!("action {id}: its row's note is not last"))
                    })?;
                spliced = format!(
                    "{head}{}}}",
                    serde_json::to_string(&note)
                        .map_err(|e| SnapshotError::Other(format!("action {id}: {e}")))?
                );
                json = spliced.as_str();
            }
            let json = if erased.contains(case) {
                let mut a: Action = serde_json::from_str(json)
                    .map_err(|e| SnapshotError::Other(format!("action {id}: {e}")))?;
                if let Some(n) = a.note.as_deref().and_then(crate::privacy::redact_note) {
                    a.note = Some(n);
                }
                redacted = serde_json::to_string(&a)
                    .map_err(|e| SnapshotError::Other(format!("action {id}: {e}")))?;
                redacted.as_str()
            } else {
                json
            };
            if cur.is_none() {
                let (name, w) = open_chunk(dir, chunks.len())?;
                cur = Some((
                    name.clone(),
                    w,
                    Chunk {
                        file: name,
                        first_id: id,
                        last_id: id,
                        actions: 0,
                        sha256: String::new(),
                    },
                ));
            }
            let (_, w, c) = cur.as_mut().expect("a chunk is open");
            w.write_all(json.as_bytes())?;
            w.write_all(b"\n")?;
            c.last_id = id;
            c.actions += 1;
            pos = id;
            total += 1;
            if c.actions >= chunk_actions {
                let (_, w, mut c) = cur.take().expect("a chunk is open");
                c.sha256 = close_chunk(w)?;
                chunks.push(c);
            }
        }
        if let Some(b) = &bar {
            b.inc(rows.len() as u64);
        }
    }
    if let Some((_, w, mut c)) = cur.take() {
        c.sha256 = close_chunk(w)?;
        chunks.push(c);
    }
    let quarantine = super::quarantine::write(&mut tx, dir, after, &erased).await?;
    tx.commit().await?;
    drop(bar);
    let m = SnapshotManifest {
        format: FORMAT.into(),
        format_version: FORMAT_VERSION,
        program_version: env!("CARGO_PKG_VERSION").into(),
        created_at: chrono::Utc::now().to_rfc3339(),
        source_backend: store.backend().into(),
        after,
        checkpoint,
        actions: total,
        chunks,
        include_pii,
        redacted_cases: erased.len() as i64,
        quarantine: Some(quarantine),
    };
    let text = serde_json::to_string_pretty(&m).unwrap_or_default();
    let mut f = crate::privacy::create_private_file(&dir.join("manifest.json"))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    // The manifest's own checksum, which a restore requires.
    let mut f = crate::privacy::create_private_file(&dir.join(MANIFEST_SUM))?;
    f.write_all(
        format!(
            "{}  manifest.json\n",
            hex::encode(Sha256::digest(text.as_bytes()))
        )
        .as_bytes(),
    )?;
    f.sync_all()?;
    Ok(m)
}
