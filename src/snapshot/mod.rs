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
//!
//! The folder's files: `create` writes a snapshot, `restore` verifies and loads one;
//! this file holds the format (manifest, chunk files, checksums) both share.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

mod create;
mod quarantine;
mod restore;

pub use quarantine::QuarantineFile;

pub use create::create;
pub use restore::{Restored, restore};

pub const FORMAT: &str = "isir-snapshot";
pub const FORMAT_VERSION: u32 = 1;
/// Actions a chunk file holds.
pub const CHUNK_ACTIONS: i64 = 250_000;
pub(super) const READ: i64 = 5000;

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
    /// Whether `--include-pii` was asked. The notes of every erased case are redacted
    /// as `projection.redact_replica` redacts them whatever it (erasure is the law, not
    /// a scope); snapshots written with it by earlier versions, and snapshots before this
    /// field, may hold erased debtors' data.
    #[serde(default = "yes")]
    pub include_pii: bool,
    /// The erased cases whose notes were redacted.
    #[serde(default)]
    pub redacted_cases: i64,
    /// The quarantine's rows (spoiled records of the feed, with their bytes); absent in
    /// snapshots made before the quarantine existed.
    #[serde(default)]
    pub quarantine: Option<QuarantineFile>,
}

pub(super) fn yes() -> bool {
    true
}

pub(super) fn action_json_sql(pg: bool) -> String {
    let parts: Vec<String> = crate::store::ACTION_FIELDS
        .iter()
        .map(|c| format!("'{c}', {c}"))
        .collect();
    if pg {
        format!("json_build_object({})::text", parts.join(", "))
    } else {
        format!("json_object({})", parts.join(", "))
    }
}

pub(super) struct HashWrite<W: Write> {
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

pub(super) struct HashRead<R: Read> {
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

pub(super) type ChunkWriter =
    flate2::write::GzEncoder<HashWrite<std::io::BufWriter<std::fs::File>>>;

pub(super) fn open_chunk(dir: &Path, n: usize) -> std::io::Result<(String, ChunkWriter)> {
    open_file(dir, &format!("actions-{n:05}.ndjson.gz"))
}

/// A compressed, checksummed file of the snapshot, named `name`.
pub(super) fn open_file(dir: &Path, name: &str) -> std::io::Result<(String, ChunkWriter)> {
    let name = name.to_string();
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

pub(super) fn close_chunk(w: ChunkWriter) -> std::io::Result<String> {
    let mut h = w.finish()?;
    h.flush()?;
    let f = h.inner.into_inner().map_err(|e| e.into_error())?;
    f.sync_all()?;
    Ok(hex::encode(h.sha.finalize()))
}

/// The file holding the manifest's SHA-256 (`sha256sum` format).
pub const MANIFEST_SUM: &str = "manifest.json.sha256";

/// The longest line a chunk may hold: an action with a `poznamka` of a few kilobytes
/// (10 MB would be extraordinary); a longer one is refused before it is parsed.
pub const MAX_LINE: usize = 16 << 20;

/// Refuses `p` if it is a symbolic link (a snapshot from elsewhere must not make the
/// restore read files outside it).
pub(super) fn not_a_link(p: &Path) -> Result<(), SnapshotError> {
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

/// Actions a restore inserts at a time.
pub(super) const BATCH: usize = 2000;

/// The default snapshot directory name: `snapshot-<UTC time>`.
pub fn default_dir() -> PathBuf {
    PathBuf::from(format!(
        "snapshot-{}",
        chrono::Utc::now().format("%Y%m%dT%H%M%SZ")
    ))
}
