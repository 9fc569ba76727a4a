//! Writing one table: the row-by-row path (keyset chunks inside the snapshot, every
//! cell through the formula guard when asked), the file sink (plain or gzip, counted and
//! hashed as written).

use std::io::Write;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::copy::{copy_lines, copy_table, event_cells, events_copy_select};
use super::{CHUNK, ExportError, ExportOptions, Table};
use crate::privacy::{self, Privacy};
use crate::readmodel::columns;
use crate::store::sql::{Tx, Val};

/// Counts and hashes the bytes that reach the file.
pub(super) struct Hashing<W: Write> {
    pub(super) inner: W,
    pub(super) sha: Sha256,
    pub(super) bytes: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.sha.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

pub(super) enum Sink {
    Plain(Hashing<std::io::BufWriter<std::fs::File>>),
    Gzip(flate2::write::GzEncoder<Hashing<std::io::BufWriter<std::fs::File>>>),
}

impl Sink {
    pub(super) fn create(path: &Path, gzip: bool, private: bool) -> std::io::Result<Sink> {
        let file = if private {
            privacy::create_private_file(path)?
        } else {
            std::fs::File::create(path)?
        };
        let h = Hashing {
            inner: std::io::BufWriter::with_capacity(1 << 20, file),
            sha: Sha256::new(),
            bytes: 0,
        };
        Ok(if gzip {
            Sink::Gzip(flate2::write::GzEncoder::new(
                h,
                flate2::Compression::fast(),
            ))
        } else {
            Sink::Plain(h)
        })
    }
    pub(super) fn writer(&mut self) -> &mut (dyn Write + Send) {
        match self {
            Sink::Plain(h) => h,
            Sink::Gzip(g) => g,
        }
    }
    /// Flushes and syncs; gives (bytes, sha256).
    pub(super) fn finish(self) -> std::io::Result<(u64, String)> {
        let mut h = match self {
            Sink::Plain(h) => h,
            Sink::Gzip(g) => g.finish()?,
        };
        h.flush()?;
        let file = h.inner.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        Ok((h.bytes, hex::encode(h.sha.finalize())))
    }
}

/// A CSV writer over `w` that passes every cell through the formula guard when asked.
pub(super) struct Rows<W: Write> {
    csv: csv::Writer<W>,
    guard: bool,
}

impl<W: Write> Rows<W> {
    fn write<'a>(&mut self, cells: impl IntoIterator<Item = &'a str>) -> Result<(), ExportError> {
        if self.guard {
            let guarded: Vec<std::borrow::Cow<'a, str>> =
                cells.into_iter().map(privacy::csv_cell).collect();
            self.csv.write_record(guarded.iter().map(|c| c.as_bytes()))
        } else {
            self.csv.write_record(cells)
        }
        .map_err(csv_err)
    }
}

/// Writes one table; gives its rows.
pub(super) async fn write_table(
    tx: &mut Tx,
    table: Table,
    opts: &ExportOptions,
    privacy: &Privacy,
    w: &mut (dyn Write + Send),
    bar: &Option<crate::logging::Bar>,
) -> Result<u64, ExportError> {
    let cols = table.columns();
    let mut csv = csv::WriterBuilder::new().from_writer(&mut *w);
    csv.write_record(cols).map_err(csv_err)?;
    let mut rows = 0u64;
    let pg = tx.is_postgres();
    if pg && table == Table::Events {
        csv.flush()?;
        drop(csv);
        return copy_table(tx, &events_copy_select(opts), w, bar).await;
    }
    let mut csv = Rows {
        csv,
        guard: opts.formula_guard,
    };
    match table {
        Table::Stats => {
            let all = tx
                .texts(
                    "SELECT dim || '|' || key || '|' || CAST(count AS TEXT) FROM stats WHERE count <> 0 ORDER BY dim, key",
                    &[],
                )
                .await?;
            for r in all {
                csv.write(r.splitn(3, '|'))?;
                rows += 1;
            }
        }
        Table::Events => {
            // The timeline has a column per field: each row comes as one text with the
            // fields joined by U+001F, which XML text (and so the register) cannot
            // contain; no JSON is built or parsed on the way.
            let sep = if pg {
                " || chr(31) || "
            } else {
                " || char(31) || "
            };
            // (The formula guard is the writer's, on every cell: in SQL it cost an `IN`
            // list's ephemeral index probe per cell, a third of the export's time.)
            let exprs = event_cells(|c| format!("COALESCE(CAST({c} AS TEXT), '')"));
            let sql = format!(
                "SELECT {} FROM timeline WHERE action_id > $1 ORDER BY action_id LIMIT $2",
                exprs.join(sep)
            );
            let mut after = opts.since_watermark.unwrap_or(-1);
            loop {
                let lines = tx.texts(&sql, &[after.into(), CHUNK.into()]).await?;
                for l in &lines {
                    let f: Vec<&str> = l.split('\u{1f}').collect();
                    if f.len() != cols.len() {
                        return Err(ExportError::Invalid(format!(
                            "an event row has {} fields, not {}",
                            f.len(),
                            cols.len()
                        )));
                    }
                    csv.write(f)?;
                }
                let n = lines.len();
                if let Some(l) = lines.last() {
                    after = l
                        .split('\u{1f}')
                        .next()
                        .and_then(|id| id.parse().ok())
                        .ok_or_else(|| ExportError::Invalid("an event without an ID".into()))?;
                }
                rows += n as u64;
                if let Some(b) = bar {
                    b.inc(n as u64);
                }
                if (n as i64) < CHUNK {
                    break;
                }
            }
        }
        _ => {
            // Keyset position: case_number / (case_number, court, person_id).
            let mut key: Vec<String> = match table {
                Table::Cases => vec![String::new()],
                _ => vec![String::new(); 3],
            };
            // Where the keyset columns are in a row.
            let key_names: &[&str] = match table {
                Table::Cases => &["case_number"],
                _ => &["case_number", "court", "person_id"],
            };
            let key_at: Vec<usize> = key_names
                .iter()
                .map(|k| cols.iter().position(|c| c == k).expect("a key column"))
                .collect();
            // Only the exported fields are read out of each document, then masked; the
            // keyset position is read before the mask (a person ID becomes a reference).
            let mask = !opts.include_pii;
            let reader = columns::Reader::new(cols);
            let mut write_doc = |d: &str| -> Result<Vec<columns::Cell>, ExportError> {
                let row = reader.cells(d).map_err(|e| {
                    ExportError::Invalid(format!("a projection document does not parse: {e}"))
                })?;
                if mask {
                    let mut out = row.clone();
                    privacy.mask_cells(cols, &mut out);
                    csv.write(out.iter().map(columns::Cell::as_str))?;
                } else {
                    csv.write(row.iter().map(columns::Cell::as_str))?;
                }
                Ok(row)
            };
            let (from, order) = match table {
                Table::Cases => ("cases", "case_number"),
                _ => ("parties", "case_number, court, person_id"),
            };
            if pg {
                // The documents come in one stream, in the snapshot, without a query
                // a chunk.
                let select = format!("SELECT doc FROM {from} ORDER BY {order}");
                rows = copy_lines(tx, &select, |doc| write_doc(doc).map(|_| ()), bar).await?;
            } else {
                loop {
                    let (sql, binds): (String, Vec<Val>) = match table {
                        Table::Cases => (
                            "SELECT doc FROM cases WHERE case_number > $1 ORDER BY case_number LIMIT $2"
                                .into(),
                            vec![key[0].as_str().into(), CHUNK.into()],
                        ),
                        _ => (
                            "SELECT doc FROM parties WHERE (case_number, court, person_id) > ($1, $2, $3) \
                             ORDER BY case_number, court, person_id LIMIT $4"
                                .into(),
                            vec![
                                key[0].as_str().into(),
                                key[1].as_str().into(),
                                key[2].as_str().into(),
                                CHUNK.into(),
                            ],
                        ),
                    };
                    let docs = tx.texts(&sql, &binds).await?;
                    let n = docs.len();
                    for (i, d) in docs.iter().enumerate() {
                        let row = write_doc(d)?;
                        if i + 1 == n {
                            key = key_at
                                .iter()
                                .map(|&k| row[k].as_str().to_string())
                                .collect();
                        }
                    }
                    rows += n as u64;
                    if let Some(b) = bar {
                        b.inc(n as u64);
                    }
                    if (n as i64) < CHUNK {
                        break;
                    }
                }
            }
        }
    }
    csv.csv.flush()?;
    Ok(rows)
}

pub(super) fn csv_err(e: csv::Error) -> ExportError {
    match e.into_kind() {
        csv::ErrorKind::Io(io) => ExportError::Io(io),
        other => ExportError::Invalid(format!("CSV: {other:?}")),
    }
}
