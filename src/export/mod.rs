//! Nightly CSV exports of the projections: one CSV per table from one consistent read
//! snapshot, with a `manifest.json` (watermark, files with rows, bytes and SHA-256,
//! columns with types, cases erased since the previous export, program version).
//!
//! Owns the export format (`docs/EXPORTS.md`). Reads the projection views only, never
//! the replica, and never writes the database. Atomic on disk: everything is written
//! into a staging directory next to the target, the manifest last, and the staging
//! directory is renamed to the target when complete, so a reader who sees the target
//! sees complete files, and a failed or killed export leaves nothing under a final name.
//! Memory stays flat: rows are read in keyset chunks inside the snapshot (SQLite, and
//! PostgreSQL's parties, whose cells are put together in Rust) or streamed by `COPY
//! (SELECT ...) TO STDOUT` inside it (PostgreSQL's cases and events), and written as
//! they come.

//!
//! The folder's files have fixed roles: `table` writes one table row by row, `copy` is
//! the PostgreSQL `COPY` path, `manifest` the manifest, `schedule` the nightly run and
//! its retention, `purge` the rewrite of kept exports that hold erased debtors; this
//! file is the one entry point, [`export`].

use std::path::{Path, PathBuf};

use crate::privacy::{self, Privacy};
use crate::readmodel::columns;
use crate::store::Store;
use crate::store::sql::Tx;
use manifest::watermark;
use table::{Sink, write_csv, write_rows};

mod copy;
mod manifest;
mod parquet;
mod parquet_purge;
pub mod purge;
mod schedule;
mod table;

pub use manifest::{
    Column, Erased, FORMAT, FileEntry, Manifest, ManifestWatermark, column_type, read_manifest,
    write_manifest,
};
pub use purge::Purged;
pub use schedule::{Nightly, list_exports, next_run, nightly_once, run_nightly};

/// Rows read a query inside the snapshot.
pub(crate) const CHUNK: i64 = 5000;

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("bad export request: {0}")]
    Invalid(String),
    #[error("the projections could not be read: {0}")]
    Database(#[from] sqlx::Error),
    #[error("writing the export: {0}")]
    Io(#[from] std::io::Error),
}

pub use crate::config::{Format, Table, parse_schedule};

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
    /// The formats written, each table in each, from the same snapshot.
    pub formats: Vec<Format>,
    /// Compress each CSV file with gzip (Parquet files are compressed inside, with zstd).
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
    /// Point `latest` beside `out` (a symbolic link in `out`'s parent) at the export once
    /// it is complete ([`point_latest`]).
    pub latest: bool,
}

/// The name of the link to the newest complete export, beside the exports.
pub const LATEST: &str = "latest";

/// Points `LATEST` in `out`'s parent at `out` (a relative symbolic link), atomically: a
/// new link under a temporary name renamed over the old one, so a reader of
/// `latest/...` sees the export before or the one after, never a missing or half
/// written one. A `latest` there that is not a symbolic link (a directory, a file) is
/// left alone and named in the error.
pub fn point_latest(out: &Path) -> Result<(), ExportError> {
    let parent = match out.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(p) => p.to_path_buf(),
        None => PathBuf::from("."),
    };
    let name = out
        .file_name()
        .ok_or_else(|| ExportError::Invalid(format!("{}: no directory name", out.display())))?;
    let link = parent.join(LATEST);
    if let Ok(m) = std::fs::symlink_metadata(&link)
        && !m.file_type().is_symlink()
    {
        return Err(ExportError::Invalid(format!(
            "{} exists and is not a symbolic link: left alone, `latest` not updated",
            link.display()
        )));
    }
    let tmp = parent.join(format!(".{LATEST}.tmp-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    #[cfg(unix)]
    std::os::unix::fs::symlink(name, &tmp)?;
    #[cfg(not(unix))]
    {
        let _ = name;
        return Err(ExportError::Invalid(
            "`latest` needs symbolic links (Unix)".into(),
        ));
    }
    std::fs::rename(&tmp, &link)?;
    if let Ok(d) = std::fs::File::open(&parent) {
        let _ = d.sync_all();
    }
    Ok(())
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
    if opts.formats.is_empty() {
        return Err(ExportError::Invalid("no format asked for".into()));
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
            if opts.latest {
                point_latest(out)?;
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
    if built < crate::readmodel::meta::NAMES.len() as i64 {
        return Err(ExportError::Invalid(
            "the projections are not built yet (`isir project catch-up`)".into(),
        ));
    }
    let wm = watermark(&mut tx).await?;
    let key = tx
        .texts(
            "SELECT value FROM secrets WHERE key = $1",
            &[privacy::KEY_SETTING.into()],
        )
        .await
        .map_err(|e| {
            if privacy::denied_sql(&e) {
                ExportError::Invalid(
                    "this database role may not read the privacy key (a reader role): run \
                     exports as the writer's role (docs/PRIVACY.md)"
                        .into(),
                )
            } else {
                e.into()
            }
        })?
        .pop()
        .ok_or_else(|| {
            ExportError::Invalid("the database has no privacy key: run `isir migrate`".into())
        })?;
    let privacy = Privacy::from_hex(&key).map_err(ExportError::Invalid)?;
    let formats = unique(&opts.formats);
    let tables = unique(&opts.tables);
    let pg = tx.is_postgres();
    let both = formats.contains(&Format::Csv) && formats.contains(&Format::Parquet);
    // Both formats from one read of a table, except PostgreSQL's events, whose CSV is
    // `COPY`'s own.
    let one_read = |t: Table| !(pg && t == Table::Events);
    let bar = if opts.progress {
        let mut total = 0i64;
        for t in &tables {
            let reads = if both && !one_read(*t) { 2 } else { 1 };
            total += reads
                * match t {
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
        crate::logging::Bar::new(
            true,
            total.max(0) as u64,
            "export {msg} {wide_bar} {pos}/{len} rows {per_sec} ETA {eta}",
        )
    } else {
        None
    };
    let w = Writing {
        opts,
        privacy: &privacy,
        dir,
        bar: &bar,
    };
    let (mut csv_files, mut parquet_files) = (Vec::new(), Vec::new());
    for t in &tables {
        if both && one_read(*t) {
            if let Some(b) = &bar {
                b.set_message(t.name().to_string());
            }
            let mut pq = w.parquet_out(*t);
            csv_files.push(write_csv_file(&mut tx, *t, &w, Some(&mut pq)).await?);
            parquet_files.extend(parquet_entries(*t, pq)?);
            continue;
        }
        for format in &formats {
            if let Some(b) = &bar {
                b.set_message(format!("{} {}", t.name(), format.name()));
            }
            match format {
                Format::Csv => csv_files.push(write_csv_file(&mut tx, *t, &w, None).await?),
                Format::Parquet => {
                    parquet_files.extend(write_parquet_files(&mut tx, *t, &w).await?)
                }
            }
        }
    }
    // The manifest lists the files format by format, in the order asked.
    let mut files = Vec::new();
    for format in &formats {
        match format {
            Format::Csv => files.append(&mut csv_files),
            Format::Parquet => files.append(&mut parquet_files),
        }
    }
    let since = opts.previous_watermark.or(opts.since_watermark);
    let erased = tx
        .texts(
            "SELECT case_number FROM erasures WHERE action_id > $1 ORDER BY case_number",
            &[since.unwrap_or(-1).into()],
        )
        .await?;
    tx.commit().await?;
    drop(bar);
    let m = Manifest {
        format: FORMAT.into(),
        program: manifest::PROGRAM.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        written_at: chrono::Utc::now().to_rfc3339(),
        watermark: wm,
        since_watermark: opts.since_watermark,
        include_pii: opts.include_pii,
        gzip: opts.gzip,
        formats,
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

/// `v` without repeats, in its order.
fn unique<T: PartialEq + Copy>(v: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for x in v {
        if !out.contains(x) {
            out.push(*x);
        }
    }
    out
}

fn csv_name(t: Table, opts: &ExportOptions) -> String {
    format!("{}.csv{}", t.name(), if opts.gzip { ".gz" } else { "" })
}

fn csv_entry(t: Table, name: String, rows: u64, (bytes, sha256): (u64, String)) -> FileEntry {
    FileEntry {
        table: t,
        format: Format::Csv,
        name,
        partition: None,
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
        unparsed: Default::default(),
    }
}

/// What writing any table's files needs besides its rows.
struct Writing<'a> {
    opts: &'a ExportOptions,
    privacy: &'a Privacy,
    dir: &'a Path,
    bar: &'a Option<crate::logging::Bar>,
}

impl Writing<'_> {
    /// The CSV file of `t` (created) and its name.
    fn csv_sink(&self, t: Table) -> Result<(String, Sink), ExportError> {
        let name = csv_name(t, self.opts);
        let sink = Sink::create(&self.dir.join(&name), self.opts.gzip, self.opts.include_pii)?;
        Ok((name, sink))
    }

    /// The Parquet files of `t`, opened as its rows come.
    fn parquet_out(&self, t: Table) -> parquet::ParquetOut {
        let pii = self.opts.include_pii;
        parquet::ParquetOut::new(self.dir, t, !pii, pii)
    }
}

/// The CSV file of `t`; each row also to `also` when given (the table's Parquet files:
/// both formats from one read, the same files, byte for byte, as each alone: tested).
async fn write_csv_file(
    tx: &mut Tx,
    t: Table,
    w: &Writing<'_>,
    also: Option<&mut dyn table::RowOut>,
) -> Result<FileEntry, ExportError> {
    let (name, mut sink) = w.csv_sink(t)?;
    let rows = write_csv(tx, t, w.opts, w.privacy, sink.writer(), w.bar, also).await?;
    Ok(csv_entry(t, name, rows, sink.finish()?))
}

async fn write_parquet_files(
    tx: &mut Tx,
    t: Table,
    w: &Writing<'_>,
) -> Result<Vec<FileEntry>, ExportError> {
    let mut out = w.parquet_out(t);
    write_rows(tx, t, w.opts, w.privacy, &mut out, w.bar).await?;
    parquet_entries(t, out)
}

/// The manifest's entries of a table's finished Parquet files.
fn parquet_entries(t: Table, out: parquet::ParquetOut) -> Result<Vec<FileEntry>, ExportError> {
    let columns: Vec<Column> = t
        .columns()
        .iter()
        .zip(out.kinds())
        .map(|(c, k)| Column {
            name: c.to_string(),
            kind: k.name().into(),
        })
        .collect();
    let mut files = Vec::new();
    for f in out.finish()? {
        for (col, n) in &f.written.unparsed {
            tracing::warn!(table = t.name(), column = %col, cells = n, file = %f.name, "values a typed Parquet column cannot hold, written as nulls (the CSV keeps them)");
        }
        files.push(FileEntry {
            table: t,
            format: Format::Parquet,
            name: f.name,
            partition: f
                .partition
                .map(|(k, v)| std::collections::BTreeMap::from([(k, v)])),
            rows: f.written.rows,
            bytes: f.written.bytes,
            sha256: f.written.sha256,
            columns: columns.clone(),
            unparsed: f.written.unparsed,
        });
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::copy::{RecordCounter, copy_text_value};

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
