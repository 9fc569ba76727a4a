//! Writing one table: the row-by-row path (keyset chunks inside the snapshot, every
//! cell through the formula guard when asked), the file sink (plain or gzip, counted and
//! hashed as written).

use std::io::Write;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::copy::{copy_lines, copy_table, event_cells, events_copy_select};
use super::{CHUNK, ExportError, ExportOptions, Table};
use crate::privacy::{self, Privacy};
use crate::readmodel::{columns, party_cells};
use crate::store::sql::{Tx, Val};

/// Counts and hashes the bytes that reach the file.
pub(super) struct Hashing<W: Write> {
    pub(super) inner: W,
    pub(super) sha: Sha256,
    pub(super) bytes: u64,
}

/// A file of an export, created (the owner's only when `private`), buffered, counted
/// and hashed as written.
pub(super) type HashedFile = Hashing<std::io::BufWriter<std::fs::File>>;

impl HashedFile {
    pub(super) fn create(path: &Path, private: bool) -> std::io::Result<HashedFile> {
        let file = if private {
            privacy::create_private_file(path)?
        } else {
            std::fs::File::create(path)?
        };
        Ok(Hashing {
            inner: std::io::BufWriter::with_capacity(1 << 20, file),
            sha: Sha256::new(),
            bytes: 0,
        })
    }
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
        let h = HashedFile::create(path, private)?;
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

/// Where the rows of a table go, a row at a time (a CSV file, or Parquet files): each
/// cell in the table's column order, `None` for a missing value.
pub(super) trait RowOut: Send {
    fn row(&mut self, cells: &[Option<&str>]) -> Result<(), ExportError>;
}

/// Both of two outputs, each row to the first and then the second: a table exported in
/// two formats is read once.
struct Tee<'a>(&'a mut dyn RowOut, &'a mut dyn RowOut);

impl RowOut for Tee<'_> {
    fn row(&mut self, cells: &[Option<&str>]) -> Result<(), ExportError> {
        self.0.row(cells)?;
        self.1.row(cells)
    }
}

/// A CSV writer over `w` (its header written) that passes every cell through the
/// formula guard when asked; a missing value is an empty field.
pub(super) struct Rows<W: Write> {
    pub(super) csv: csv::Writer<W>,
    guard: bool,
}

impl<W: Write> Rows<W> {
    pub(super) fn new(w: W, table: Table, guard: bool) -> Result<Rows<W>, ExportError> {
        let mut csv = csv::WriterBuilder::new().from_writer(w);
        csv.write_record(table.columns()).map_err(csv_err)?;
        Ok(Rows { csv, guard })
    }
}

impl<W: Write + Send> RowOut for Rows<W> {
    fn row(&mut self, cells: &[Option<&str>]) -> Result<(), ExportError> {
        let cells = cells.iter().map(|c| c.unwrap_or(""));
        if self.guard {
            let guarded: Vec<std::borrow::Cow<'_, str>> = cells.map(privacy::csv_cell).collect();
            self.csv.write_record(guarded.iter().map(|c| c.as_bytes()))
        } else {
            self.csv.write_record(cells)
        }
        .map_err(csv_err)
    }
}

/// The marker of a NULL in an events row read as one text (U+001E, which XML text, and
/// so the register, cannot contain, as U+001F between the fields).
const NULL_CELL: &str = "\u{1e}";

/// The cells of an events row read as one text.
fn event_row<'a>(
    line: &'a str,
    width: usize,
    cells: &mut Vec<Option<&'a str>>,
) -> Result<(), ExportError> {
    cells.clear();
    cells.extend(
        line.split('\u{1f}')
            .map(|f| if f == NULL_CELL { None } else { Some(f) }),
    );
    if cells.len() != width {
        return Err(ExportError::Invalid(format!(
            "an event row has {} fields, not {width}",
            cells.len()
        )));
    }
    Ok(())
}

/// The query of the events after `after` (`$1`, and a `LIMIT $2` when `chunk`), each row
/// one text: the fields joined by U+001F, a NULL as U+001E. No JSON is built or parsed
/// on the way.
pub(super) fn events_text_select(pg: bool, after: Option<i64>, chunk: bool) -> String {
    let (sep, null) = if pg {
        (" || chr(31) || ", "chr(30)")
    } else {
        (" || char(31) || ", "char(30)")
    };
    // (The formula guard is the writer's, on every cell: in SQL it cost an `IN` list's
    // ephemeral index probe per cell, a third of the export's time.)
    let exprs = event_cells(|c| format!("COALESCE(CAST({c} AS TEXT), {null})"));
    let filter = match after {
        // An integer, so formatting it into the statement is safe (COPY takes no
        // parameters).
        Some(a) => format!("action_id > {a}"),
        None => "action_id > $1".into(),
    };
    format!(
        "SELECT {} FROM timeline WHERE {filter} ORDER BY action_id{}",
        exprs.join(sep),
        if chunk { " LIMIT $2" } else { "" }
    )
}

/// Writes one table's rows to `out`; gives its rows. (On PostgreSQL a CSV of the events
/// goes by [`copy_table`] instead, see [`write_csv`].)
pub(super) async fn write_rows(
    tx: &mut Tx,
    table: Table,
    opts: &ExportOptions,
    privacy: &Privacy,
    out: &mut dyn RowOut,
    bar: &Option<crate::logging::Bar>,
) -> Result<u64, ExportError> {
    let cols = table.columns();
    let mut rows = 0u64;
    let pg = tx.is_postgres();
    match table {
        Table::Stats => {
            let all = tx
                .texts(
                    "SELECT dim || '|' || key || '|' || CAST(count AS TEXT) FROM stats WHERE count <> 0 ORDER BY dim, key",
                    &[],
                )
                .await?;
            for r in all {
                let cells: Vec<Option<&str>> = r.splitn(3, '|').map(Some).collect();
                out.row(&cells)?;
                rows += 1;
            }
        }
        Table::Events if pg => {
            let select = events_text_select(true, Some(opts.since_watermark.unwrap_or(-1)), false);
            rows = copy_lines(
                tx,
                &select,
                |line| {
                    let mut cells = Vec::with_capacity(cols.len());
                    event_row(line, cols.len(), &mut cells)?;
                    out.row(&cells)
                },
                bar,
            )
            .await?;
        }
        Table::Events => {
            let sql = events_text_select(false, None, true);
            let mut after = opts.since_watermark.unwrap_or(-1);
            loop {
                let lines = tx.texts(&sql, &[after.into(), CHUNK.into()]).await?;
                let mut cells = Vec::with_capacity(cols.len());
                for l in &lines {
                    event_row(l, cols.len(), &mut cells)?;
                    out.row(&cells)?;
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
                    let mut masked = row.clone();
                    privacy.mask_cells(cols, &mut masked);
                    out.row(&opt_cells(&masked))?;
                } else {
                    out.row(&opt_cells(&row))?;
                }
                Ok(row)
            };
            if pg && matches!(table, Table::Cases) {
                // The documents come in one stream, in the snapshot, without a query
                // a chunk. (The parties are read as on SQLite, by chunks of their cells:
                // the `parties` view's document, put together in SQL, costs ten times
                // what `doc_from` does.)
                let select = "SELECT doc FROM cases ORDER BY case_number";
                rows = copy_lines(tx, select, |doc| write_doc(doc).map(|_| ()), bar).await?;
            } else {
                loop {
                    let (sql, binds): (String, Vec<Val>) = match table {
                        Table::Cases => (
                            "SELECT doc FROM cases WHERE case_number > $1 ORDER BY case_number LIMIT $2"
                                .into(),
                            vec![key[0].as_str().into(), CHUNK.into()],
                        ),
                        // The cells, the document put together in Rust (as the API
                        // reads them; the view's SQL form costs ten times as much).
                        _ => (
                            format!(
                                "SELECT {} FROM {} WHERE (case_number, court, person_id) > ($1, $2, $3) \
                                 ORDER BY case_number, court, person_id LIMIT $4",
                                party_cells::read_columns(""),
                                party_cells::VIEW
                            ),
                            vec![
                                key[0].as_str().into(),
                                key[1].as_str().into(),
                                key[2].as_str().into(),
                                CHUNK.into(),
                            ],
                        ),
                    };
                    let docs = match table {
                        Table::Cases => tx.texts(&sql, &binds).await?,
                        _ => {
                            tx.rows_with(&sql, &binds, |r| party_cells::doc_from(r, 0))
                                .await?
                        }
                    };
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
    Ok(rows)
}

/// The cells of a document's row: a JSON `null` (or an absent key) is a missing value.
fn opt_cells(row: &[columns::Cell]) -> Vec<Option<&str>> {
    row.iter()
        .map(|c| match c {
            columns::Cell::Null => None,
            columns::Cell::Str(s) | columns::Cell::Other(s) => Some(s.as_str()),
        })
        .collect()
}

/// Writes one table as CSV to `w`, each row also to `also` when given (the table's
/// Parquet files: both formats from one read); gives its rows. Alone, on PostgreSQL,
/// the events go through `COPY ... TO STDOUT (FORMAT csv)`, equal row for row (tested).
pub(super) async fn write_csv(
    tx: &mut Tx,
    table: Table,
    opts: &ExportOptions,
    privacy: &Privacy,
    w: &mut (dyn Write + Send),
    bar: &Option<crate::logging::Bar>,
    also: Option<&mut dyn RowOut>,
) -> Result<u64, ExportError> {
    if also.is_none() && tx.is_postgres() && table == Table::Events {
        let mut csv = csv::WriterBuilder::new().from_writer(&mut *w);
        csv.write_record(table.columns()).map_err(csv_err)?;
        csv.flush()?;
        drop(csv);
        return copy_table(tx, &events_copy_select(opts), w, bar).await;
    }
    let mut rows = Rows::new(&mut *w, table, opts.formula_guard)?;
    let n = match also {
        Some(other) => {
            write_rows(tx, table, opts, privacy, &mut Tee(&mut rows, other), bar).await?
        }
        None => write_rows(tx, table, opts, privacy, &mut rows, bar).await?,
    };
    rows.csv.flush()?;
    Ok(n)
}

pub(super) fn csv_err(e: csv::Error) -> ExportError {
    match e.into_kind() {
        csv::ErrorKind::Io(io) => ExportError::Io(io),
        other => ExportError::Invalid(format!("CSV: {other:?}")),
    }
}
