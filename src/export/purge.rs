//! Erasure reaches exports already on disk: after each nightly export, every earlier
//! export kept under `export.dir` whose watermark is below a § 425 erasure is rewritten
//! without the erased debtors' rows in `parties` and with the debtor's cells emptied in
//! `cases` (or removed when it cannot be read), and both manifests say so. CSV files are
//! rewritten here, Parquet files by `parquet_purge`.
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
use sha2::Digest;

use super::{ExportError, Format, Manifest, Table, read_manifest, write_manifest};
use crate::store::Store;
use crate::store::sql::Tx;

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
    for f in m
        .files
        .iter_mut()
        .filter(|f| matches!(f.table, Table::Parties | Table::Cases))
    {
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
        if f.format == Format::Parquet {
            let tmp = dir.join(format!(".{}.rewrite", f.name));
            let r = super::parquet_purge::rewrite(&path, &tmp, f.table, &set, m.include_pii)?;
            removed += r.removed;
            f.rows = r.rows;
            f.bytes = r.bytes;
            f.sha256 = r.sha256;
            std::fs::rename(&tmp, &path)?;
            continue;
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
        let case_at = col("case_number")?;
        let purge = if f.table == Table::Parties {
            Purge::Rows {
                role_at: col("role")?,
            }
        } else {
            // A case keeps its row; the first debtor's cells are emptied, as a case
            // erased before an export has them. An export of an earlier release has
            // no such cells: nothing to purge.
            let blank: Vec<usize> = headers
                .iter()
                .enumerate()
                .filter(|(_, h)| h.starts_with("debtor."))
                .map(|(i, _)| i)
                .collect();
            if blank.is_empty() {
                continue;
            }
            Purge::Cells {
                blank,
                count_at: headers.iter().position(|h| h == "debtor_count"),
                erased_at: headers.iter().position(|h| h == "erased"),
            }
        };
        let tmp = dir.join(format!(".{}.rewrite", f.name));
        let mut sink = super::table::HashedFile::create(&tmp, m.include_pii)?;
        let (rows, gone) = if gz {
            let enc = flate2::write::GzEncoder::new(&mut sink, flate2::Compression::fast());
            let (enc, rows, gone) = filter(&mut rd, enc, &headers, &set, case_at, &purge)?;
            enc.finish()?;
            (rows, gone)
        } else {
            let (_, rows, gone) = filter(&mut rd, &mut sink, &headers, &set, case_at, &purge)?;
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

/// How a file is purged of an erased case.
enum Purge {
    /// `parties`: the erased debtors' rows go.
    Rows { role_at: usize },
    /// `cases`: the case's row stays with its debtor cells emptied, its debtor count 0
    /// and `erased` true.
    Cells {
        blank: Vec<usize>,
        count_at: Option<usize>,
        erased_at: Option<usize>,
    },
}

/// Copies the rows of `rd` to `out` purged of the erased cases in `set`; gives `out`,
/// the rows kept and the rows removed.
fn filter<R: Read, W: Write>(
    rd: &mut csv::Reader<R>,
    out: W,
    headers: &csv::StringRecord,
    set: &HashSet<String>,
    case_at: usize,
    purge: &Purge,
) -> Result<(W, u64, u64), ExportError> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record(headers).map_err(super::table::csv_err)?;
    let (mut kept, mut gone) = (0u64, 0u64);
    for r in rd.records() {
        let r = r.map_err(super::table::csv_err)?;
        let case = r.get(case_at).unwrap_or("");
        match purge {
            Purge::Rows { role_at } if erased_row(set, case, r.get(*role_at).unwrap_or("")) => {
                gone += 1;
                continue;
            }
            Purge::Cells {
                blank,
                count_at,
                erased_at,
            } if set.contains(case) => {
                let cells: csv::StringRecord = r
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        if blank.contains(&i) {
                            ""
                        } else if Some(i) == *count_at {
                            "0"
                        } else if Some(i) == *erased_at {
                            "true"
                        } else {
                            v
                        }
                    })
                    .collect();
                w.write_record(&cells).map_err(super::table::csv_err)?;
            }
            _ => w.write_record(&r).map_err(super::table::csv_err)?,
        }
        kept += 1;
    }
    let out = w
        .into_inner()
        .map_err(|e| ExportError::Io(e.into_error()))?;
    Ok((out, kept, gone))
}
