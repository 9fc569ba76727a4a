//! Nightly CSV exports of the projections: one CSV per table from one consistent read
//! snapshot, with a `manifest.json` (watermark, files with rows, bytes and SHA-256,
//! columns with types, cases erased since the previous export, program version).
//!
//! Owns the export format (`docs/EXPORTS.md`). Reads the projection views only, never
//! the replica, and never writes the database. Atomic on disk: everything is written
//! into a staging directory next to the target, the manifest last, and the staging
//! directory is renamed to the target when complete, so a reader who sees the target
//! sees complete files, and a failed or killed export leaves nothing under a final name.
//! Memory stays flat: rows are read in keyset chunks inside the snapshot (SQLite) or
//! streamed by `COPY (SELECT ...) TO STDOUT` inside it (PostgreSQL), and written as
//! they come.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::privacy::{self, Privacy};
use crate::projection::columns;
use crate::projection::sql::{Tx, Val};
use crate::store::Store;

pub mod purge;
pub use purge::Purged;

/// Rows read a query inside the snapshot.
const CHUNK: i64 = 5000;

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("bad export request: {0}")]
    Invalid(String),
    #[error("the projections could not be read: {0}")]
    Database(#[from] sqlx::Error),
    #[error("writing the export: {0}")]
    Io(#[from] std::io::Error),
}

pub use crate::config::{Table, parse_schedule};

impl Table {
    /// The table's columns, in the order of its CSV header.
    pub fn columns(self) -> &'static [&'static str] {
        match self {
            Table::Cases => columns::CASE_COLUMNS,
            Table::Parties => columns::SUBJECT_COLUMNS,
            Table::Events => columns::EVENT_COLUMNS,
            Table::Stats => columns::STATS_COLUMNS,
        }
    }
}

#[derive(Debug, Clone)]
pub struct ExportOptions {
    pub out: PathBuf,
    pub tables: Vec<Table>,
    pub gzip: bool,
    /// Only events after this action ID (the previous export's watermark); the other
    /// tables are always complete.
    pub since_watermark: Option<i64>,
    /// Personal data as stored; without it they are masked as in the API (birth numbers
    /// and dates `***`, person IDs as references, see `crate::privacy`). With it every
    /// file is created readable by its owner only.
    pub include_pii: bool,
    /// The CSV formula guard (`crate::privacy::csv_cell`) on every cell; on by default.
    pub formula_guard: bool,
    /// The previous export's watermark, for the list of cases erased since; defaults to
    /// `since_watermark`. None: every erased case is listed.
    pub previous_watermark: Option<i64>,
    /// Draw a progress bar on stderr.
    pub progress: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ManifestWatermark {
    /// The lowest cursor of the projection builders: every action up to it is in.
    pub action_id: i64,
    pub published: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Column {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FileEntry {
    pub table: Table,
    pub name: String,
    pub rows: u64,
    pub bytes: u64,
    pub sha256: String,
    pub columns: Vec<Column>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Erased {
    /// Erasures after this action ID (None: all).
    pub since: Option<i64>,
    pub cases: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub format: String,
    pub program: String,
    pub version: String,
    pub written_at: String,
    pub watermark: ManifestWatermark,
    pub since_watermark: Option<i64>,
    pub include_pii: bool,
    pub gzip: bool,
    pub files: Vec<FileEntry>,
    pub erased_since_previous: Erased,
    /// Whether text cells starting with `=`, `+`, `-`, `@`, a tab or a carriage return
    /// carry a leading `'` (absent in exports before the guard: false).
    #[serde(default)]
    pub formula_guard: bool,
    /// Earlier exports that held debtors erased since, and what was done to them
    /// (filled by the nightly run, `export::purge`).
    #[serde(default)]
    pub purged: Vec<Purged>,
    /// Set in an earlier export's manifest when a later run rewrote it for erasures.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rewritten: Vec<Purged>,
}

pub const FORMAT: &str = "isir-export/1";

/// The type of a column, as the manifest and `docs/EXPORTS.md` give it.
pub fn column_type(name: &str) -> &'static str {
    let base = name.rsplit('.').next().unwrap_or(name);
    match base {
        "erased" | "secondary_action" | "secondary_document" => "boolean",
        "documents" | "claims" | "count" | "number_in_section" => "integer",
        b if b.ends_with("action_id") => "integer",
        "opened" | "claims_deadline" | "ended" | "birth_date" | "legal_force_date" => "date",
        "published"
        | "created"
        | "latest_published"
        | "erased_at"
        | "corrected_published"
        | "annulled"
        | "left_case" => "datetime",
        _ => "string",
    }
}

/// Counts and hashes the bytes that reach the file.
struct Hashing<W: Write> {
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

enum Sink {
    Plain(Hashing<std::io::BufWriter<std::fs::File>>),
    Gzip(flate2::write::GzEncoder<Hashing<std::io::BufWriter<std::fs::File>>>),
}

impl Sink {
    fn create(path: &Path, gzip: bool, private: bool) -> std::io::Result<Sink> {
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
    fn writer(&mut self) -> &mut (dyn Write + Send) {
        match self {
            Sink::Plain(h) => h,
            Sink::Gzip(g) => g,
        }
    }
    /// Flushes and syncs; gives (bytes, sha256).
    fn finish(self) -> std::io::Result<(u64, String)> {
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

async fn watermark(tx: &mut Tx) -> Result<ManifestWatermark, sqlx::Error> {
    let cursor = tx
        .int(
            "SELECT MIN(cursor) FROM proj_meta WHERE name NOT LIKE '%#next'",
            &[],
        )
        .await?
        .unwrap_or(-1);
    let published = tx
        .texts(
            "SELECT published FROM timeline WHERE action_id = $1",
            &[cursor.into()],
        )
        .await?
        .pop();
    Ok(ManifestWatermark {
        action_id: cursor,
        published,
    })
}

/// A CSV writer over `w` that passes every cell through the formula guard when asked.
struct Rows<W: Write> {
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
async fn write_table(
    tx: &mut Tx,
    table: Table,
    opts: &ExportOptions,
    privacy: &Privacy,
    w: &mut (dyn Write + Send),
    bar: &Option<indicatif::ProgressBar>,
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
            let exprs = event_cells(|c| {
                let e = format!("COALESCE(CAST({c} AS TEXT), '')");
                if opts.formula_guard {
                    privacy::csv_cell_sql(&e, pg)
                } else {
                    e
                }
            });
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
            let mut write_doc = |d: &str| -> Result<Vec<columns::Cell>, ExportError> {
                let row = columns::cells(d, cols).map_err(|e| {
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

/// The SQL expression of each events column as its cell text, in the table's order: the
/// booleans as `true`/`false`, every other column through `text` (which says how an
/// empty or NULL value is sent).
fn event_cells(text: impl Fn(&str) -> String) -> Vec<String> {
    Table::Events
        .columns()
        .iter()
        .map(|c| match *c {
            "secondary_action" | "secondary_document" => {
                format!("CASE WHEN {c} THEN 'true' ELSE 'false' END")
            }
            c => text(c),
        })
        .collect()
}

/// The query whose rows `COPY ... TO STDOUT` sends as the events table on PostgreSQL:
/// the same columns, order and cell text as the row-by-row path, which it must equal
/// (tested). Empty texts are sent as NULL: COPY quotes an empty string (`""`) to tell it
/// from NULL, the `csv` crate writes both as nothing.
fn events_copy_select(opts: &ExportOptions) -> String {
    let exprs = event_cells(|c| {
        let e = format!("NULLIF(CAST({c} AS TEXT), '')");
        if opts.formula_guard {
            privacy::csv_cell_sql(&e, true)
        } else {
            e
        }
    });
    // An integer, so formatting it into the statement is safe (COPY takes no parameters).
    let after = opts.since_watermark.unwrap_or(-1);
    format!(
        "SELECT {} FROM timeline WHERE action_id > {after} ORDER BY action_id",
        exprs.join(", ")
    )
}

/// Starts `COPY ({select}) TO STDOUT{with}` on the export's PostgreSQL transaction.
async fn copy_out<'t>(
    tx: &'t mut Tx,
    select: &str,
    with: &str,
) -> Result<futures::stream::BoxStream<'t, sqlx::Result<bytes::Bytes>>, ExportError> {
    let conn = tx
        .postgres_conn()
        .ok_or_else(|| ExportError::Invalid("COPY needs PostgreSQL".into()))?;
    Ok(conn
        .copy_out_raw(&format!("COPY ({select}) TO STDOUT{with}"))
        .await?)
}

/// Streams the one text column of `select` through `COPY ... TO STDOUT` (text format:
/// a line a row, backslash escapes) inside the export's snapshot, and gives each value
/// to `row`; gives the rows.
async fn copy_lines(
    tx: &mut Tx,
    select: &str,
    mut row: impl FnMut(&str) -> Result<(), ExportError>,
    bar: &Option<indicatif::ProgressBar>,
) -> Result<u64, ExportError> {
    use futures::TryStreamExt;
    let mut stream = copy_out(tx, select, "").await?;
    let mut rows = 0u64;
    let mut line = |bytes: &[u8]| -> Result<(), ExportError> {
        let text = copy_text_value(bytes)?;
        row(&text)?;
        rows += 1;
        if rows.is_multiple_of(CHUNK as u64)
            && let Some(b) = bar
        {
            b.inc(CHUNK as u64);
        }
        Ok(())
    };
    // A line cut between two pieces of the stream.
    let mut carry: Vec<u8> = Vec::new();
    while let Some(chunk) = stream.try_next().await? {
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', &chunk) {
            if carry.is_empty() {
                line(&chunk[start..end])?;
            } else {
                carry.extend_from_slice(&chunk[start..end]);
                line(&carry)?;
                carry.clear();
            }
            start = end + 1;
        }
        carry.extend_from_slice(&chunk[start..]);
    }
    if !carry.is_empty() {
        return Err(ExportError::Invalid("COPY ended inside a row".into()));
    }
    if let Some(b) = bar {
        b.inc(rows % CHUNK as u64);
    }
    Ok(rows)
}

/// A value of COPY's text format: `\\`, `\n`, `\r`, `\t`, `\b`, `\f`, `\v` stand for
/// the character (COPY TO writes no other escape); `\N` is NULL, which the projections'
/// `doc` never is.
fn copy_text_value(bytes: &[u8]) -> Result<std::borrow::Cow<'_, str>, ExportError> {
    let bad = |m: &str| ExportError::Invalid(format!("COPY sent {m}"));
    if memchr::memchr(b'\\', bytes).is_none() {
        return std::str::from_utf8(bytes)
            .map(std::borrow::Cow::Borrowed)
            .map_err(|_| bad("text that is not UTF-8"));
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut it = bytes.iter();
    while let Some(&b) = it.next() {
        if b != b'\\' {
            out.push(b);
            continue;
        }
        out.push(match it.next() {
            Some(b'\\') => b'\\',
            Some(b'n') => b'\n',
            Some(b'r') => b'\r',
            Some(b't') => b'\t',
            Some(b'b') => 0x08,
            Some(b'f') => 0x0c,
            Some(b'v') => 0x0b,
            Some(b'N') if bytes == b"\\N" => return Err(bad("a NULL document")),
            other => return Err(bad(&format!("an unknown escape {other:?}"))),
        });
    }
    String::from_utf8(out)
        .map(std::borrow::Cow::Owned)
        .map_err(|_| bad("text that is not UTF-8"))
}

/// Streams `COPY (select) TO STDOUT` in CSV into `w`, inside the export's snapshot;
/// gives the rows (records counted outside quotes, as a value may hold a newline).
async fn copy_table(
    tx: &mut Tx,
    select: &str,
    w: &mut (dyn Write + Send),
    bar: &Option<indicatif::ProgressBar>,
) -> Result<u64, ExportError> {
    use futures::TryStreamExt;
    let mut stream = copy_out(tx, select, " WITH (FORMAT csv)").await?;
    let mut count = RecordCounter::default();
    while let Some(chunk) = stream.try_next().await? {
        let n = count.feed(&chunk);
        w.write_all(&chunk)?;
        if let Some(b) = bar {
            b.inc(n);
        }
    }
    Ok(count.records)
}

/// Counts the records of a CSV stream fed in pieces: line ends outside quotes (a quote
/// inside a quoted value is doubled, so toggling on every quote stays right).
#[derive(Default)]
struct RecordCounter {
    in_quotes: bool,
    records: u64,
}

impl RecordCounter {
    /// Feeds a piece; gives the records it ended.
    fn feed(&mut self, bytes: &[u8]) -> u64 {
        let before = self.records;
        for at in memchr::memchr2_iter(b'"', b'\n', bytes) {
            if bytes[at] == b'"' {
                self.in_quotes = !self.in_quotes;
            } else if !self.in_quotes {
                self.records += 1;
            }
        }
        self.records - before
    }
}

fn csv_err(e: csv::Error) -> ExportError {
    match e.into_kind() {
        csv::ErrorKind::Io(io) => ExportError::Io(io),
        other => ExportError::Invalid(format!("CSV: {other:?}")),
    }
}

/// Removes staging directories that killed exports of `out` left.
fn clean_stale(out: &Path) {
    let (Some(parent), Some(name)) = (out.parent(), out.file_name()) else {
        return;
    };
    let prefix = format!(".{}.partial-", name.to_string_lossy());
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    if let Ok(rd) = std::fs::read_dir(parent) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

/// The staging directory of an export to `out`.
pub fn staging_dir(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| "export".into());
    out.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

/// Writes an export to `opts.out` (which must not exist, or be empty).
pub async fn export(store: &Store, opts: &ExportOptions) -> Result<Manifest, ExportError> {
    if opts.tables.is_empty() {
        return Err(ExportError::Invalid("no table asked for".into()));
    }
    let out = &opts.out;
    if out.exists() {
        let empty = out.is_dir() && std::fs::read_dir(out)?.next().is_none();
        if !empty {
            return Err(ExportError::Invalid(format!(
                "{} exists and is not empty; exports go to a new directory",
                out.display()
            )));
        }
    }
    if let Some(p) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(p)?;
    }
    clean_stale(out);
    let staging = staging_dir(out);
    if opts.include_pii {
        privacy::create_private_dir(&staging)?;
    } else {
        std::fs::create_dir_all(&staging)?;
    }
    let r = write_all(store, opts, &staging).await;
    match r {
        Ok(m) => {
            if out.exists() {
                std::fs::remove_dir(out)?;
            }
            std::fs::rename(&staging, out)?;
            if let Some(p) = out.parent().filter(|p| !p.as_os_str().is_empty())
                && let Ok(d) = std::fs::File::open(p)
            {
                let _ = d.sync_all();
            }
            Ok(m)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            Err(e)
        }
    }
}

async fn write_all(
    store: &Store,
    opts: &ExportOptions,
    dir: &Path,
) -> Result<Manifest, ExportError> {
    let mut tx = Tx::begin_read_direct(store).await?;
    let built = tx
        .int(
            "SELECT COUNT(*) FROM proj_meta WHERE name NOT LIKE '%#next'",
            &[],
        )
        .await?
        .unwrap_or(0);
    if built < crate::projection::NAMES.len() as i64 {
        return Err(ExportError::Invalid(
            "the projections are not built yet (`isir project catch-up`)".into(),
        ));
    }
    let wm = watermark(&mut tx).await?;
    let key = tx
        .texts(
            "SELECT value FROM settings WHERE key = $1",
            &[privacy::KEY_SETTING.into()],
        )
        .await?
        .pop()
        .ok_or_else(|| {
            ExportError::Invalid("the database has no privacy key: run `isir migrate`".into())
        })?;
    let privacy = Privacy::from_hex(&key).map_err(ExportError::Invalid)?;
    let bar = if opts.progress {
        let mut total = 0i64;
        for t in &opts.tables {
            total += match t {
                Table::Cases => tx.int("SELECT COUNT(*) FROM cases", &[]).await?,
                Table::Parties => tx.int("SELECT COUNT(*) FROM parties", &[]).await?,
                Table::Events => {
                    tx.int(
                        "SELECT COUNT(*) FROM timeline WHERE action_id > $1",
                        &[opts.since_watermark.unwrap_or(-1).into()],
                    )
                    .await?
                }
                Table::Stats => Some(0),
            }
            .unwrap_or(0);
        }
        let b = indicatif::ProgressBar::new(total.max(0) as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "export {msg} {wide_bar} {pos}/{len} rows {per_sec} ETA {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Some(b)
    } else {
        None
    };
    let mut files = Vec::new();
    for t in &opts.tables {
        let name = format!("{}.csv{}", t.name(), if opts.gzip { ".gz" } else { "" });
        if let Some(b) = &bar {
            b.set_message(t.name());
        }
        let mut sink = Sink::create(&dir.join(&name), opts.gzip, opts.include_pii)?;
        let rows = write_table(&mut tx, *t, opts, &privacy, sink.writer(), &bar).await?;
        let (bytes, sha256) = sink.finish()?;
        files.push(FileEntry {
            table: *t,
            name,
            rows,
            bytes,
            sha256,
            columns: t
                .columns()
                .iter()
                .map(|c| Column {
                    name: c.to_string(),
                    kind: column_type(c).into(),
                })
                .collect(),
        });
    }
    let since = opts.previous_watermark.or(opts.since_watermark);
    let erased = tx
        .texts(
            "SELECT case_number FROM erasures WHERE action_id > $1 ORDER BY case_number",
            &[since.unwrap_or(-1).into()],
        )
        .await?;
    tx.commit().await?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let m = Manifest {
        format: FORMAT.into(),
        program: "isir".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        written_at: chrono::Utc::now().to_rfc3339(),
        watermark: wm,
        since_watermark: opts.since_watermark,
        include_pii: opts.include_pii,
        gzip: opts.gzip,
        files,
        erased_since_previous: Erased {
            since,
            cases: erased,
        },
        formula_guard: opts.formula_guard,
        purged: Vec::new(),
        rewritten: Vec::new(),
    };
    // The manifest last.
    write_manifest(dir, &m)?;
    Ok(m)
}

/// Writes `m` as the manifest of `dir` through a temporary file renamed over it (the
/// owner's only when the export holds personal data).
pub fn write_manifest(dir: &Path, m: &Manifest) -> Result<(), ExportError> {
    let tmp = dir.join(".manifest.json.tmp");
    let mut f = if m.include_pii {
        privacy::create_private_file(&tmp)?
    } else {
        std::fs::File::create(&tmp)?
    };
    f.write_all(
        serde_json::to_string_pretty(m)
            .unwrap_or_default()
            .as_bytes(),
    )?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join("manifest.json"))?;
    Ok(())
}

/// Reads the manifest of an export directory.
pub fn read_manifest(dir: &Path) -> Result<Manifest, ExportError> {
    let text = std::fs::read_to_string(dir.join("manifest.json"))?;
    serde_json::from_str(&text)
        .map_err(|e| ExportError::Invalid(format!("{}: {e}", dir.join("manifest.json").display())))
}

/// The next time after `now` that is `at` in Prague (a time skipped by the spring
/// change runs at the first valid minute after it).
pub fn next_run(
    now: chrono::DateTime<chrono::Utc>,
    at: chrono::NaiveTime,
) -> chrono::DateTime<chrono::Utc> {
    use chrono::TimeZone;
    use chrono_tz::Europe::Prague;
    let local = now.with_timezone(&Prague).date_naive();
    for d in 0..3 {
        let day = local + chrono::Days::new(d);
        let mut t = day.and_time(at);
        for _ in 0..120 {
            if let Some(x) = Prague.from_local_datetime(&t).earliest() {
                let x = x.with_timezone(&chrono::Utc);
                if x > now {
                    return x;
                }
                break;
            }
            t += chrono::Duration::minutes(1);
        }
    }
    now + chrono::Duration::days(1)
}

/// The nightly schedule's settings.
#[derive(Debug, Clone)]
pub struct Nightly {
    pub at: chrono::NaiveTime,
    pub dir: PathBuf,
    pub keep: usize,
    pub gzip: bool,
    pub include_pii: bool,
    pub formula_guard: bool,
    pub tables: Vec<Table>,
}

/// Exports under `dir` named by their Prague date and time, oldest first.
pub fn list_exports(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.join("manifest.json").is_file())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// One nightly export into `dir/<Prague date>T<HHMM>`, then removes all but the newest
/// `keep`. The previous export's watermark names the erasures to purge downstream.
pub async fn nightly_once(store: &Store, n: &Nightly) -> Result<Manifest, ExportError> {
    use chrono_tz::Europe::Prague;
    std::fs::create_dir_all(&n.dir)?;
    let previous = list_exports(&n.dir)
        .last()
        .and_then(|p| read_manifest(p).ok())
        .map(|m| m.watermark.action_id);
    let name = chrono::Utc::now()
        .with_timezone(&Prague)
        .format("%Y-%m-%dT%H%M%S")
        .to_string();
    let m = export(
        store,
        &ExportOptions {
            out: n.dir.join(&name),
            tables: n.tables.clone(),
            gzip: n.gzip,
            since_watermark: None,
            include_pii: n.include_pii,
            formula_guard: n.formula_guard,
            previous_watermark: previous,
            progress: false,
        },
    )
    .await?;
    let mut m = m;
    let all = list_exports(&n.dir);
    let kept = if all.len() > n.keep {
        for old in &all[..all.len() - n.keep] {
            std::fs::remove_dir_all(old)?;
        }
        &all[all.len() - n.keep..]
    } else {
        &all[..]
    };
    // Erasure reaches what is kept: every earlier export is purged of the debtors
    // erased after its watermark, and this run's manifest says which.
    let new = n.dir.join(&name);
    let earlier: Vec<PathBuf> = kept.iter().filter(|p| **p != new).cloned().collect();
    m.purged = purge::purge(store, &earlier).await?;
    if !m.purged.is_empty() {
        write_manifest(&new, &m)?;
    }
    Ok(m)
}

/// Runs the nightly export at `n.at` Prague time until `shutdown`, while the phase
/// includes `project` (the projections exist). A failure is logged and retried the
/// next night.
pub async fn run_nightly(
    store: Store,
    n: Nightly,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let next = next_run(chrono::Utc::now(), n.at);
        let wait = (next - chrono::Utc::now()).to_std().unwrap_or_default();
        tracing::info!(at = %next, "next nightly export");
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.wait_for(|v| *v) => return,
        }
        let phase = store
            .setting("phase")
            .await
            .ok()
            .flatten()
            .and_then(|p| crate::phase::Phase::parse(&p));
        if phase.is_none_or(|p| p < crate::phase::Phase::Project) {
            tracing::info!("nightly export skipped: the phase does not include project");
            continue;
        }
        match nightly_once(&store, &n).await {
            Ok(m) => tracing::info!(
                watermark = m.watermark.action_id,
                files = m.files.len(),
                "nightly export written"
            ),
            Err(e) => tracing::error!(error = %e, "nightly export failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{RecordCounter, copy_text_value};

    #[test]
    fn copy_text_values_are_unescaped() {
        assert_eq!(copy_text_value(br#"{"a":"b"}"#).unwrap(), r#"{"a":"b"}"#);
        assert_eq!(
            copy_text_value(br#"{"a":"x\\"y\\\\z\tq"}"#).unwrap(),
            "{\"a\":\"x\\\"y\\\\z\tq\"}"
        );
        assert!(copy_text_value(b"\\N").is_err());
        assert!(copy_text_value(b"a\\").is_err());
        assert!(copy_text_value(b"\xff").is_err());
    }

    #[test]
    fn records_are_counted_across_pieces_and_outside_quotes() {
        let csv = b"1,\"a\nb\",x\n2,\"say \"\"hi\"\"\n\",y\n3,,\n";
        for cut in 0..csv.len() {
            let mut c = RecordCounter::default();
            let n = c.feed(&csv[..cut]) + c.feed(&csv[cut..]);
            assert_eq!((n, c.records), (3, 3), "cut at {cut}");
        }
    }
}
