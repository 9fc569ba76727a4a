//! Erasure reaches exports already on disk: after each nightly export, every earlier
//! export kept under `export.dir` whose watermark is below a § 425 erasure is rewritten
//! without the erased debtors' rows (or removed when it cannot be read), and both
//! manifests say so.
//!
//! Touches only exports the nightly run recognises as its own (`list_exports`: its
//! name, a real directory, this program's manifest) and never follows a symbolic link.
//!
//! Owns the rewriting of kept exports. Reads the `erasures` projection only; never
//! writes the database. A rewrite goes through a temporary file renamed over the old
//! one, the manifest last, so a reader never sees half a file. Exports written elsewhere
//! (`isir export --out`) are the operator's to handle (`docs/runbooks/erasure.md`).

use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{ExportError, Manifest, Table, read_manifest, write_manifest};
use crate::projection::sql::Tx;
use crate::store::Store;

/// What a run did to an earlier export that held erased debtors.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Purged {
    /// The export's directory name.
    pub export: String,
    /// `rewritten` (the erased debtors' rows removed) or `removed` (the whole export,
    /// when its manifest or files could not be read).
    pub action: String,
    /// The erased cases it was purged of (erasures after its watermark).
    pub cases: Vec<String>,
    pub rows_removed: u64,
    pub at: String,
}

/// Whether a row of `parties` is (or may be) an erased debtor's.
fn erased_row(cases: &HashSet<String>, case: &str, role: &str) -> bool {
    cases.contains(case) && (role == "DLUŽNÍK" || role.is_empty())
}

/// Purges every export in `exports` (not the one just written; the nightly run passes
/// only those [`super::list_exports`] recognises as its own) of the debtors erased
/// after its watermark. Gives what was done, for the new manifest.
pub async fn purge(
    store: &Store,
    exports: &[std::path::PathBuf],
) -> Result<Vec<Purged>, ExportError> {
    let mut done = Vec::new();
    let mut tx = Tx::begin_read(store).await?;
    for dir in exports {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        let at = chrono::Utc::now().to_rfc3339();
        let m = match read_manifest(dir) {
            Ok(m) => m,
            Err(_) => {
                // What cannot be read cannot be shown to hold no erased debtor.
                std::fs::remove_dir_all(dir)?;
                done.push(Purged {
                    export: name,
                    action: "removed".into(),
                    cases: Vec::new(),
                    rows_removed: 0,
                    at,
                });
                continue;
            }
        };
        let cases = tx
            .texts(
                "SELECT case_number FROM erasures WHERE action_id > $1 ORDER BY case_number",
                &[m.watermark.action_id.into()],
            )
            .await?;
        if cases.is_empty() {
            continue;
        }
        match rewrite(dir, m, &cases, &at) {
            Ok(removed) => done.push(Purged {
                export: name,
                action: "rewritten".into(),
                cases,
                rows_removed: removed,
                at,
            }),
            Err(e) => {
                tracing::warn!(export = %name, error = %e, "an export could not be rewritten for erasures; removing it");
                std::fs::remove_dir_all(dir)?;
                done.push(Purged {
                    export: name,
                    action: "removed".into(),
                    cases,
                    rows_removed: 0,
                    at,
                });
            }
        }
    }
    tx.commit().await?;
    Ok(done)
}

/// Rewrites the export in `dir` without the rows of erased debtors of `cases`; gives
/// the rows removed. The manifest records the rewrite.
fn rewrite(dir: &Path, mut m: Manifest, cases: &[String], at: &str) -> Result<u64, ExportError> {
    let set: HashSet<String> = cases.iter().cloned().collect();
    let mut removed = 0u64;
    for f in m.files.iter_mut().filter(|f| f.table == Table::Parties) {
        // A file of the export itself: a plain name, a regular file (a link is never
        // followed, nor written through).
        let path = dir.join(&f.name);
        let plain = Path::new(&f.name).file_name() == Some(std::ffi::OsStr::new(&f.name));
        if !plain || !std::fs::symlink_metadata(&path)?.file_type().is_file() {
            return Err(ExportError::Invalid(format!(
                "{}: not a file of the export",
                f.name
            )));
        }
        let gz = f.name.ends_with(".gz");
        let input: Box<dyn Read> = if gz {
            Box::new(flate2::read::GzDecoder::new(std::fs::File::open(&path)?))
        } else {
            Box::new(std::fs::File::open(&path)?)
        };
        let mut rd = csv::ReaderBuilder::new()
            .has_headers(true)
            .from_reader(input);
        let headers = rd.headers().map_err(super::table::csv_err)?.clone();
        let col = |n: &str| {
            headers
                .iter()
                .position(|h| h == n)
                .ok_or_else(|| ExportError::Invalid(format!("{}: no column {n}", f.name)))
        };
        let (case_at, role_at) = (col("case_number")?, col("role")?);
        let tmp = dir.join(format!(".{}.rewrite", f.name));
        let file = if m.include_pii {
            crate::privacy::create_private_file(&tmp)?
        } else {
            std::fs::File::create(&tmp)?
        };
        let mut sink = super::table::Hashing {
            inner: std::io::BufWriter::new(file),
            sha: Sha256::new(),
            bytes: 0,
        };
        let (rows, gone) = if gz {
            let enc = flate2::write::GzEncoder::new(&mut sink, flate2::Compression::fast());
            let (enc, rows, gone) = filter(&mut rd, enc, &headers, &set, case_at, role_at)?;
            enc.finish()?;
            (rows, gone)
        } else {
            let (_, rows, gone) = filter(&mut rd, &mut sink, &headers, &set, case_at, role_at)?;
            (rows, gone)
        };
        removed += gone;
        sink.inner.flush()?;
        sink.inner.get_ref().sync_all()?;
        f.rows = rows;
        f.bytes = sink.bytes;
        f.sha256 = hex::encode(sink.sha.finalize());
        std::fs::rename(&tmp, &path)?;
    }
    m.rewritten.push(Purged {
        export: dir
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default(),
        action: "rewritten".into(),
        cases: cases.to_vec(),
        rows_removed: removed,
        at: at.into(),
    });
    write_manifest(dir, &m)?;
    Ok(removed)
}

/// Copies the rows of `rd` to `out` but the erased debtors'; gives `out`, the rows
/// kept and the rows removed.
fn filter<R: Read, W: Write>(
    rd: &mut csv::Reader<R>,
    out: W,
    headers: &csv::StringRecord,
    set: &HashSet<String>,
    case_at: usize,
    role_at: usize,
) -> Result<(W, u64, u64), ExportError> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record(headers).map_err(super::table::csv_err)?;
    let (mut kept, mut gone) = (0u64, 0u64);
    for r in rd.records() {
        let r = r.map_err(super::table::csv_err)?;
        if erased_row(
            set,
            r.get(case_at).unwrap_or(""),
            r.get(role_at).unwrap_or(""),
        ) {
            gone += 1;
        } else {
            w.write_record(&r).map_err(super::table::csv_err)?;
            kept += 1;
        }
    }
    let out = w
        .into_inner()
        .map_err(|e| ExportError::Io(e.into_error()))?;
    Ok((out, kept, gone))
}
