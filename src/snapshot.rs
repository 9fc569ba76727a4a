//! Replica snapshots: every stored action with all its source fields and the raw
//! `poznamka`, in action-ID order, as gzip-compressed NDJSON chunks with a manifest
//! (format version, watermark = the checkpoint, action count, per-chunk ID range, count
//! and SHA-256). A snapshot brings up a second replica in minutes instead of weeks of
//! request budget, and moves a deployment between SQLite and PostgreSQL.
//!
//! Owns the snapshot format. `create` reads one consistent snapshot (a read
//! transaction: the writer is never blocked). `restore` is the one writer of the
//! replica besides the poller: it takes the lease, writes with its fencing epoch, and
//! loads everything in one transaction that commits only after every checksum, count
//! and the ID order have been verified, so a bad snapshot leaves the store unchanged.
//! Its chunks are decompressed, parsed and verified on a thread of their own while the
//! load inserts; on a SQLite file the load runs on a direct connection
//! ([`crate::store::direct`]).

use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::lease::{Acquire, Lease};
use crate::projection::sql::{Tx, Val};
use crate::source::Action;
use crate::store::Store;

pub const FORMAT: &str = "isir-snapshot";
pub const FORMAT_VERSION: u32 = 1;
/// Actions a chunk file holds.
pub const CHUNK_ACTIONS: i64 = 250_000;
const READ: i64 = 5000;

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The snapshot is not what its manifest says (truncated, reordered, tampered).
    #[error("the snapshot is refused: {0}")]
    Refused(String),
    /// The store is not one this snapshot can be restored into.
    #[error("the store is refused: {0}")]
    Store(String),
    #[error("the lease is held by {0}; stop the daemon first")]
    LeaseHeld(String),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("files: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Other(String),
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Chunk {
    pub file: String,
    pub first_id: i64,
    pub last_id: i64,
    pub actions: i64,
    pub sha256: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SnapshotManifest {
    pub format: String,
    pub format_version: u32,
    pub program_version: String,
    pub created_at: String,
    pub source_backend: String,
    /// Actions with an ID above this are in the snapshot (-1: from the start).
    pub after: i64,
    /// The replica's checkpoint when the snapshot was read: polling resumes after it.
    pub checkpoint: Option<i64>,
    pub actions: i64,
    pub chunks: Vec<Chunk>,
    /// Whether erased debtors' personal data are in (`--include-pii`); without it the
    /// notes of every erased case are redacted as `projection.redact_replica` redacts
    /// them. Snapshots before this field held everything.
    #[serde(default = "yes")]
    pub include_pii: bool,
    /// The erased cases whose notes were redacted.
    #[serde(default)]
    pub redacted_cases: i64,
}

fn yes() -> bool {
    true
}

fn action_json_sql(pg: bool) -> String {
    let cols = [
        "id",
        "created",
        "published",
        "document_url",
        "case_number",
        "type_code",
        "type_name",
        "section",
        "number_in_section",
        "note",
    ];
    let parts: Vec<String> = cols.iter().map(|c| format!("'{c}', {c}")).collect();
    if pg {
        format!("json_build_object({})::text", parts.join(", "))
    } else {
        format!("json_object({})", parts.join(", "))
    }
}

struct HashWrite<W: Write> {
    inner: W,
    sha: Sha256,
}

impl<W: Write> Write for HashWrite<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.sha.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

struct HashRead<R: Read> {
    inner: R,
    sha: Sha256,
}

impl<R: Read> Read for HashRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.sha.update(&buf[..n]);
        Ok(n)
    }
}

type ChunkWriter = flate2::write::GzEncoder<HashWrite<std::io::BufWriter<std::fs::File>>>;

fn open_chunk(dir: &Path, n: usize) -> std::io::Result<(String, ChunkWriter)> {
    let name = format!("actions-{n:05}.ndjson.gz");
    // A snapshot holds personal data: its files are its owner's only.
    let f = crate::privacy::create_private_file(&dir.join(&name))?;
    Ok((
        name,
        flate2::write::GzEncoder::new(
            HashWrite {
                inner: std::io::BufWriter::with_capacity(1 << 20, f),
                sha: Sha256::new(),
            },
            flate2::Compression::fast(),
        ),
    ))
}

fn close_chunk(w: ChunkWriter) -> std::io::Result<String> {
    let mut h = w.finish()?;
    h.flush()?;
    let f = h.inner.into_inner().map_err(|e| e.into_error())?;
    f.sync_all()?;
    Ok(hex::encode(h.sha.finalize()))
}

/// Writes a snapshot of the replica into `out` (which must not exist or be empty),
/// through a staging directory renamed when complete, readable by its owner only.
/// `after`: only actions above it. Without `include_pii` the notes of erased cases are
/// redacted ([`crate::privacy::redact_note`]).
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

async fn create_in(
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
        let b = indicatif::ProgressBar::new(total as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "snapshot {wide_bar} {pos}/{len} actions {per_sec} ETA {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Some(b)
    } else {
        None
    };
    // The erased cases, from the replica itself (the projections may not be built):
    // an action of an erasure type, or a note naming `datumVyskrtnuti`, anywhere up to
    // the checkpoint.
    let erased: std::collections::HashSet<String> = if include_pii {
        Default::default()
    } else {
        let types: Vec<String> = crate::privacy::ERASURE_TYPES
            .iter()
            .map(|t| format!("'{t}'"))
            .collect();
        tx.texts(
            &format!(
                "SELECT DISTINCT case_number FROM actions WHERE id <= $1 AND \
                 (type_code IN ({}) OR note LIKE '%datumVyskrtnuti%')",
                types.join(", ")
            ),
            &[upto.into()],
        )
        .await?
        .into_iter()
        .collect()
    };
    // Each row comes as `ID US case US JSON` (US: U+001F, which XML text cannot hold):
    // the JSON line built by the database is written as it is (restore parses it into
    // an action), but an erased case's, whose note is redacted first; the ID keeps the
    // chunk's bounds.
    let us = if tx.is_postgres() {
        "chr(31)"
    } else {
        "char(31)"
    };
    let sql = format!(
        "SELECT CAST(id AS TEXT) || {us} || case_number || {us} || {} FROM actions WHERE id > $1 AND id <= $2 ORDER BY id LIMIT $3",
        action_json_sql(tx.is_postgres())
    );
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
            let mut f = r.splitn(3, '\u{1f}');
            let (id, case, json) =
                (|| Some((f.next()?.parse::<i64>().ok()?, f.next()?, f.next()?)))()
                    .ok_or_else(|| SnapshotError::Other("an action row without its ID".into()))?;
            let redacted;
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
    tx.commit().await?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
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

/// The file holding the manifest's SHA-256 (`sha256sum` format).
pub const MANIFEST_SUM: &str = "manifest.json.sha256";

/// The longest line a chunk may hold: an action with a `poznamka` of a few kilobytes
/// (10 MB would be extraordinary); a longer one is refused before it is parsed.
pub const MAX_LINE: usize = 16 << 20;

/// Refuses `p` if it is a symbolic link (a snapshot from elsewhere must not make the
/// restore read files outside it).
fn not_a_link(p: &Path) -> Result<(), SnapshotError> {
    match std::fs::symlink_metadata(p) {
        Ok(md) if md.file_type().is_symlink() => Err(SnapshotError::Refused(format!(
            "{} is a symbolic link",
            p.display()
        ))),
        Ok(_) => Ok(()),
        Err(e) => Err(SnapshotError::Refused(format!("{}: {e}", p.display()))),
    }
}

pub fn read_manifest(dir: &Path) -> Result<SnapshotManifest, SnapshotError> {
    not_a_link(dir)?;
    let path = dir.join("manifest.json");
    not_a_link(&path)?;
    let sum_path = dir.join(MANIFEST_SUM);
    not_a_link(&sum_path)?;
    let text = std::fs::read_to_string(&path)
        .map_err(|e| SnapshotError::Refused(format!("{}: {e}", path.display())))?;
    let want = std::fs::read_to_string(&sum_path)
        .map_err(|e| SnapshotError::Refused(format!("{}: {e}", sum_path.display())))?;
    let got = hex::encode(Sha256::digest(text.as_bytes()));
    if want.split_whitespace().next() != Some(got.as_str()) {
        return Err(SnapshotError::Refused(
            "manifest.json does not match its checksum (manifest.json.sha256)".into(),
        ));
    }
    let m: SnapshotManifest = serde_json::from_str(&text)
        .map_err(|e| SnapshotError::Refused(format!("{}: {e}", path.display())))?;
    if m.format != FORMAT || m.format_version != FORMAT_VERSION {
        return Err(SnapshotError::Refused(format!(
            "format {} version {}; this program reads {FORMAT} version {FORMAT_VERSION}",
            m.format, m.format_version
        )));
    }
    Ok(m)
}

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

async fn load(
    store: &Store,
    m: &SnapshotManifest,
    dir: &Path,
    skip_upto: i64,
    epoch: i64,
    expected_checkpoint: Option<i64>,
    progress: bool,
) -> Result<Restored, SnapshotError> {
    let refuse = |s: String| SnapshotError::Refused(s);
    let bar = progress.then(|| {
        let b = indicatif::ProgressBar::new(m.actions as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "restore {wide_bar} {pos}/{len} actions {per_sec} ETA {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    });
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
    let cols = [
        "id",
        "created",
        "published",
        "document_url",
        "case_number",
        "type_code",
        "type_name",
        "section",
        "number_in_section",
        "note",
        "stored_at",
        "epoch",
    ];
    let mut loaded = 0i64;
    // The chunks are read, decompressed, parsed and verified on a thread of their own,
    // a few batches ahead of the inserts; any refusal ends the load before the commit.
    let mut rx = spawn_decoder(m.clone(), dir.to_path_buf(), skip_upto);
    let mut end = None;
    while let Some(msg) = rx.recv().await {
        match msg {
            Decoded::Actions(batch) => {
                let rows: Vec<Vec<Val>> = batch
                    .into_iter()
                    .map(|a| {
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
                            a.note.into(),
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
            Decoded::Refused(e) => return Err(e),
            Decoded::End { last, skipped } => end = Some((last, skipped)),
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
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(Restored {
        actions: loaded,
        skipped,
        checkpoint: m.checkpoint,
        epoch,
    })
}

/// What the decoding thread of a restore sends.
enum Decoded {
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
fn spawn_decoder(
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

fn decode(
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

/// Actions a restore inserts at a time.
const BATCH: usize = 2000;

/// The default snapshot directory name: `snapshot-<UTC time>`.
pub fn default_dir() -> PathBuf {
    PathBuf::from(format!(
        "snapshot-{}",
        chrono::Utc::now().format("%Y%m%dT%H%M%SZ")
    ))
}
