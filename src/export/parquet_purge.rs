//! The erasure purge of a kept Parquet file (`export::purge` calls it for each
//! `cases.parquet` and `parties.parquet` of an earlier export): the erased debtors'
//! rows leave `parties`; in `cases` the case's row stays with its first debtor's cells
//! null, its debtor count 0 and `erased` true, as the CSV purge does.
//!
//! Reads the file a batch at a time and writes the kept rows into a new file with the
//! same schema (the one the file holds: masked or not) and writer settings; never holds
//! the whole table. Never reads the database; the caller renames the new file over the
//! old one and records it in the manifest.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use sha2::Digest;

use super::parquet::{BATCH, parquet_err, properties};
use super::table::HashedFile;
use super::{ExportError, Table};

/// What a rewrite left: rows kept, rows removed, bytes, SHA-256.
pub(super) struct Rewritten {
    pub(super) rows: u64,
    pub(super) removed: u64,
    pub(super) bytes: u64,
    pub(super) sha256: String,
}

/// Rewrites `path` (a `table` file) into `tmp` purged of the erased cases in `set`.
pub(super) fn rewrite(
    path: &Path,
    tmp: &Path,
    table: Table,
    set: &HashSet<String>,
    private: bool,
) -> Result<Rewritten, ExportError> {
    let bad = |m: String| ExportError::Invalid(format!("{}: {m}", path.display()));
    let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path)?)
        .map_err(parquet_err)?
        .with_batch_size(BATCH);
    let schema = reader.schema().clone();
    let at = |n: &str| {
        schema
            .index_of(n)
            .map_err(|_| bad(format!("no column {n}")))
    };
    let case_at = at("case_number")?;
    let role_at = if table == Table::Parties {
        Some(at("role")?)
    } else {
        None
    };
    let blank: Vec<usize> = schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| f.name().starts_with("debtor."))
        .map(|(i, _)| i)
        .collect();
    let count_at = schema.index_of("debtor_count").ok();
    let erased_at = schema.index_of("erased").ok();
    let h = HashedFile::create(tmp, private)?;
    let mut w = ArrowWriter::try_new(h, schema.clone(), Some(properties())).map_err(parquet_err)?;
    let (mut rows, mut removed) = (0u64, 0u64);
    let text = |b: &RecordBatch, i: usize| -> Result<StringArray, ExportError> {
        b.column(i)
            .as_any()
            .downcast_ref::<StringArray>()
            .cloned()
            .ok_or_else(|| bad(format!("column {} is not text", schema.field(i).name())))
    };
    for batch in reader.build().map_err(parquet_err)? {
        let batch = batch.map_err(|e| bad(e.to_string()))?;
        let cases = text(&batch, case_at)?;
        let hit: BooleanArray = cases
            .iter()
            .map(|c| Some(c.is_some_and(|c| set.contains(c))))
            .collect();
        let out = match role_at {
            Some(r) => {
                let roles = text(&batch, r)?;
                // Kept: not an erased debtor's row (a row without a role may be one).
                let keep: BooleanArray = hit
                    .iter()
                    .zip(roles.iter())
                    .map(|(h, role)| {
                        let role = role.unwrap_or("");
                        Some(!(h == Some(true) && (role == "DLUŽNÍK" || role.is_empty())))
                    })
                    .collect();
                let kept = arrow_select::filter::filter_record_batch(&batch, &keep)
                    .map_err(|e| bad(e.to_string()))?;
                removed += (batch.num_rows() - kept.num_rows()) as u64;
                kept
            }
            None if hit.true_count() == 0 || blank.is_empty() => batch,
            None => {
                let n = batch.num_rows();
                let mut cols: Vec<ArrayRef> = batch.columns().to_vec();
                for &i in &blank {
                    cols[i] = arrow_select::nullif::nullif(cols[i].as_ref(), &hit)
                        .map_err(|e| bad(e.to_string()))?;
                }
                let set_to = |col: &ArrayRef, v: ArrayRef| {
                    arrow_select::zip::zip(&hit, &v.as_ref(), &col.as_ref())
                        .map_err(|e| bad(e.to_string()))
                };
                if let Some(i) = count_at {
                    cols[i] = set_to(&cols[i], Arc::new(Int64Array::from(vec![0i64; n])))?;
                }
                if let Some(i) = erased_at {
                    cols[i] = set_to(&cols[i], Arc::new(BooleanArray::from(vec![true; n])))?;
                }
                RecordBatch::try_new(schema.clone(), cols).map_err(|e| bad(e.to_string()))?
            }
        };
        rows += out.num_rows() as u64;
        w.write(&out).map_err(parquet_err)?;
    }
    let mut h = w.into_inner().map_err(parquet_err)?;
    std::io::Write::flush(&mut h)?;
    let file = h.inner.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    Ok(Rewritten {
        rows,
        removed,
        bytes: h.bytes,
        sha256: hex::encode(h.sha.finalize()),
    })
}
