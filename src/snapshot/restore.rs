//! Restoring a snapshot: under the lease, with its fencing epoch, in one transaction
//! that commits only after every checksum, count and the ID order are verified (by a
//! decoding thread while the load inserts).

use std::io::{BufRead, Read};
use std::path::Path;

use sha2::{Digest, Sha256};

use super::*;
use crate::lease::{Acquire, Lease};
use crate::source::Action;
use crate::store::sql::{Tx, Val};

use crate::store::Store;

#[derive(Debug, Clone, Serialize)]
pub struct Restored {
    pub actions: i64,
    pub skipped: i64,
    pub checkpoint: Option<i64>,
    pub epoch: i64,
}

/// Loads the snapshot in `dir` into `store` under the lease. An empty store takes it
/// whole; with `append`, a store whose checkpoint lies inside the snapshot's range
/// takes exactly the actions after its checkpoint. Everything is verified before the
/// one transaction commits.
pub async fn restore(
    store: &Store,
    lease: &Lease,
    dir: &Path,
    append: bool,
    progress: bool,
) -> Result<Restored, SnapshotError> {
    let m = read_manifest(dir)?;
    // The manifest's own consistency first.
    let sum: i64 = m.chunks.iter().map(|c| c.actions).sum();
    if sum != m.actions {
        return Err(SnapshotError::Refused(format!(
            "the chunks hold {sum} actions, the manifest says {}",
            m.actions
        )));
    }
    for c in &m.chunks {
        let p = dir.join(&c.file);
        if c.file.contains('/') || c.file.contains("..") || !p.is_file() {
            return Err(SnapshotError::Refused(format!(
                "chunk {} is missing",
                c.file
            )));
        }
        not_a_link(&p)?;
    }
    // The checkpoint the poller resumes after must be the last action restored (an
    // incremental snapshot with no action: its start): anything else would make it
    // skip part of the feed, or fetch again what the snapshot holds.
    let last = m.chunks.iter().map(|c| c.last_id).max().unwrap_or(m.after);
    if m.checkpoint.unwrap_or(-1) != last {
        return Err(SnapshotError::Refused(format!(
            "the manifest's checkpoint {:?} is not its last action {last}",
            m.checkpoint
        )));
    }
    let ws = store
        .writer_state()
        .await
        .map_err(|e| SnapshotError::Other(e.to_string()))?;
    let stored = store
        .count_actions()
        .await
        .map_err(|e| SnapshotError::Other(e.to_string()))?;
    let skip_upto = if stored > 0 || ws.checkpoint.is_some() {
        let cp = ws.checkpoint.unwrap_or(-1);
        if !append {
            return Err(SnapshotError::Store(format!(
                "it already holds {stored} actions (checkpoint {cp}); restore into an empty store, \
                 or pass --append to add exactly the actions after its checkpoint"
            )));
        }
        if cp < m.after || m.checkpoint.is_none_or(|s| s <= cp) {
            return Err(SnapshotError::Store(format!(
                "its checkpoint {cp} is not inside the snapshot's range ({}, {}]: appending would leave a gap or add nothing",
                m.after,
                m.checkpoint.unwrap_or(-1)
            )));
        }
        cp
    } else {
        if m.after != -1 {
            return Err(SnapshotError::Store(format!(
                "the snapshot starts after action {}; an empty store needs a full snapshot",
                m.after
            )));
        }
        -1
    };
    let grant = match lease
        .acquire()
        .await
        .map_err(|e| SnapshotError::Other(e.to_string()))?
    {
        Acquire::Granted(g) => g,
        Acquire::HeldBy { holder, .. } => return Err(SnapshotError::LeaseHeld(holder)),
    };
    let r = load(
        store,
        &m,
        dir,
        skip_upto,
        grant.epoch,
        ws.checkpoint,
        progress,
    )
    .await;
    let _ = lease.release(grant.epoch).await;
    r
}

pub(super) async fn load(
    store: &Store,
    m: &SnapshotManifest,
    dir: &Path,
    skip_upto: i64,
    epoch: i64,
    expected_checkpoint: Option<i64>,
    progress: bool,
) -> Result<Restored, SnapshotError> {
    let refuse = |s: String| SnapshotError::Refused(s);
    let bar = crate::logging::Bar::new(
        progress,
        m.actions as u64,
        "restore {wide_bar} {pos}/{len} actions {per_sec} ETA {eta}",
    );
    let mut tx = Tx::begin_direct(store).await?;
    // Fencing: a newer writer's epoch refuses this one.
    let current = tx
        .int(
            &format!(
                "SELECT epoch FROM writer_state WHERE singleton = 1{}",
                tx.lock()
            ),
            &[],
        )
        .await?
        .unwrap_or(0);
    if current > epoch {
        return Err(SnapshotError::Other(format!(
            "fenced: epoch {epoch} < {current}"
        )));
    }
    let cp_now = tx
        .int(
            "SELECT COALESCE(checkpoint, -1) FROM writer_state WHERE singleton = 1",
            &[],
        )
        .await?
        .unwrap_or(-1);
    if cp_now != expected_checkpoint.unwrap_or(-1) {
        return Err(SnapshotError::Store(
            "the checkpoint moved while restoring; is a daemon running?".into(),
        ));
    }
    // Into an empty store, the secondary index is built once at the end instead of
    // row by row (dropped inside the transaction: a failed restore leaves it as it was).
    let bulk = skip_upto < 0 && expected_checkpoint.is_none();
    if bulk {
        tx.exec("DROP INDEX IF EXISTS actions_case", &[]).await?;
    }
    let now = crate::store::now_ms();
    let mut cols = crate::store::ACTION_FIELDS.to_vec();
    cols.extend(["note_z", "note_dict", "stored_at", "epoch"]);
    let mut loaded = 0i64;
    // The notes are compressed with the store's newest dictionary. A store without one
    // gets one trained on the snapshot's first notes (up to `notes::SAMPLES_MAX`, held
    // back until then), as the poller would train it on the same notes.
    let dict = crate::store::notes::current(&mut tx).await?;
    let mut deciding = dict.is_none();
    let mut held: Vec<Vec<Action>> = Vec::new();
    let mut held_notes = 0usize;
    let mut packer = crate::store::notes::Packer::new(dict);
    // The chunks are read, decompressed, parsed and verified on a thread of their own,
    // a few batches ahead of the inserts; any refusal ends the load before the commit.
    let mut rx = spawn_decoder(m.clone(), dir.to_path_buf(), skip_upto);
    let mut end = None;
    loop {
        let msg = rx.recv().await;
        let mut batch = match msg {
            Some(Decoded::Actions(batch)) => Some(batch),
            Some(Decoded::Refused(e)) => return Err(e),
            Some(Decoded::End { last, skipped }) => {
                end = Some((last, skipped));
                None
            }
            None => None,
        };
        let finished = batch.is_none();
        if deciding {
            if let Some(b) = batch.take() {
                held_notes += b.iter().filter(|a| a.note.is_some()).count();
                held.push(b);
            }
            if held_notes < crate::store::notes::SAMPLES_MAX && !finished {
                continue;
            }
            if held_notes >= crate::store::notes::SAMPLES_FIRST {
                let samples: Vec<String> = held
                    .iter()
                    .flatten()
                    .filter_map(|a| a.note.clone())
                    .take(crate::store::notes::SAMPLES_MAX)
                    .collect();
                let trained = crate::store::notes::add(&mut tx, samples).await?;
                packer = crate::store::notes::Packer::new(trained);
            }
            // Trained or not, nothing is held back any longer.
            deciding = false;
        }
        let batches: Vec<Vec<Action>> = match batch {
            Some(b) if held.is_empty() => vec![b],
            Some(b) => {
                held.push(b);
                std::mem::take(&mut held)
            }
            None => std::mem::take(&mut held),
        };
        for batch in batches {
            let rows: Vec<Vec<Val>> = batch
                .into_iter()
                .map(|a| {
                    let n = packer.pack(a.note.as_deref());
                    vec![
                        a.id.into(),
                        a.created.into(),
                        a.published.into(),
                        a.document_url.into(),
                        a.case_number.into(),
                        a.type_code.into(),
                        a.type_name.into(),
                        a.section.into(),
                        a.number_in_section.into(),
                        n.text.into(),
                        Val::Z(n.z),
                        n.dict.into(),
                        now.into(),
                        epoch.into(),
                    ]
                })
                .collect();
            tx.insert_with("actions", &cols, &rows, "").await?;
            loaded += rows.len() as i64;
            if let Some(b) = &bar {
                b.inc(rows.len() as u64);
            }
        }
        if finished {
            break;
        }
    }
    let Some((last, skipped)) = end else {
        return Err(SnapshotError::Other(
            "the snapshot reader stopped early".into(),
        ));
    };
    if m.checkpoint.is_some_and(|cp| cp < last) {
        return Err(refuse(format!(
            "an action {last} lies beyond the checkpoint {:?}",
            m.checkpoint
        )));
    }
    if let Some(q) = &m.quarantine {
        super::quarantine::load(&mut tx, dir, q).await?;
    }
    tx.exec(
        "UPDATE writer_state SET checkpoint = $1, epoch = $2, updated_at = $3 WHERE singleton = 1",
        &[m.checkpoint.into(), epoch.into(), now.into()],
    )
    .await?;
    tx.commit().await?;
    if bulk {
        // After the commit, on a file whose WAL has been copied back: built inside the
        // load's transaction, every page read went through a WAL as large as the replica
        // (a quarter of a restore's time on SQLite). It is an index, not data: should the
        // process die before it exists, `Store::migrate` builds it at the next start.
        store
            .ensure_indexes()
            .await
            .map_err(|e| SnapshotError::Other(format!("building the actions index: {e}")))?;
    }
    drop(bar);
    Ok(Restored {
        actions: loaded,
        skipped,
        checkpoint: m.checkpoint,
        epoch,
    })
}

/// What the decoding thread of a restore sends.
pub(super) enum Decoded {
    /// Verified-so-far actions to insert, in ID order.
    Actions(Vec<Action>),
    /// The snapshot is refused (or could not be read); nothing may be committed.
    Refused(SnapshotError),
    /// Every chunk read and verified: the last ID, and how many were skipped.
    End { last: i64, skipped: i64 },
}

/// Reads the chunks of `m` in `dir` on a thread of its own: decompresses, parses,
/// checks the ID order, counts and checksums, and sends batches of the actions above
/// `skip_upto`. It stops at the first refusal, at the end, or when the receiver is gone.
pub(super) fn spawn_decoder(
    m: SnapshotManifest,
    dir: PathBuf,
    skip_upto: i64,
) -> tokio::sync::mpsc::Receiver<Decoded> {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    std::thread::spawn(move || {
        let msg = match decode(&m, &dir, skip_upto, &tx) {
            Ok(Some((last, skipped))) => Decoded::End { last, skipped },
            Ok(None) => return, // the receiver went away
            Err(e) => Decoded::Refused(e),
        };
        let _ = tx.blocking_send(msg);
    });
    rx
}

pub(super) fn decode(
    m: &SnapshotManifest,
    dir: &Path,
    skip_upto: i64,
    out: &tokio::sync::mpsc::Sender<Decoded>,
) -> Result<Option<(i64, i64)>, SnapshotError> {
    let refuse = |s: String| SnapshotError::Refused(s);
    let mut last = m.after;
    let mut skipped = 0i64;
    let mut batch: Vec<Action> = Vec::with_capacity(BATCH);
    for c in &m.chunks {
        let f = std::fs::File::open(dir.join(&c.file))?;
        let mut hr = HashRead {
            inner: std::io::BufReader::with_capacity(1 << 20, f),
            sha: Sha256::new(),
        };
        let (mut n, mut first, mut prev) = (0i64, None, last);
        {
            let gz = flate2::read::GzDecoder::new(&mut hr);
            let mut lines = std::io::BufReader::with_capacity(1 << 20, gz);
            let mut line = Vec::new();
            loop {
                // A line is read up to the cap, never further: a snapshot cannot
                // exhaust memory with one endless line.
                line.clear();
                let got = (&mut lines)
                    .take(MAX_LINE as u64 + 1)
                    .read_until(b'\n', &mut line)
                    .map_err(|e| {
                        refuse(format!("chunk {} is damaged or truncated: {e}", c.file))
                    })?;
                if got == 0 {
                    break;
                }
                if line.last() == Some(&b'\n') {
                    line.pop();
                } else if line.len() > MAX_LINE {
                    return Err(refuse(format!(
                        "chunk {} holds a line longer than {MAX_LINE} bytes",
                        c.file
                    )));
                }
                let a: Action = serde_json::from_slice(&line)
                    .map_err(|e| refuse(format!("chunk {} holds a bad line: {e}", c.file)))?;
                if a.id <= prev {
                    return Err(refuse(format!(
                        "action IDs out of order in chunk {}: {} after {prev}",
                        c.file, a.id
                    )));
                }
                prev = a.id;
                first.get_or_insert(a.id);
                n += 1;
                if a.id <= skip_upto {
                    skipped += 1;
                    continue;
                }
                batch.push(a);
                if batch.len() >= BATCH {
                    let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                    if out.blocking_send(Decoded::Actions(full)).is_err() {
                        return Ok(None);
                    }
                }
            }
        }
        // Whatever follows the gzip stream is hashed too.
        std::io::copy(&mut hr, &mut std::io::sink())?;
        let sha = hex::encode(hr.sha.finalize());
        if sha != c.sha256 {
            return Err(refuse(format!(
                "chunk {} does not match its checksum (tampered or truncated)",
                c.file
            )));
        }
        if n != c.actions || first != Some(c.first_id) || prev != c.last_id {
            return Err(refuse(format!(
                "chunk {} holds {n} actions {first:?}..{prev}, the manifest says {} actions {}..{}",
                c.file, c.actions, c.first_id, c.last_id
            )));
        }
        last = prev;
    }
    if !batch.is_empty() && out.blocking_send(Decoded::Actions(batch)).is_err() {
        return Ok(None);
    }
    Ok(Some((last, skipped)))
}
