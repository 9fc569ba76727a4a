//! The Parquet form of an export (`--format parquet`): one file a table, `events`
//! partitioned by the Prague year of publication (`events/year=2024/part-0.parquet`,
//! Hive-style), typed columns, zstd, row groups streamed as they fill; and the rewrite
//! of a kept Parquet file for erasures (`export::purge`).
//!
//! Owns the column types of the Parquet files (`docs/EXPORTS.md`): the manifest's
//! `integer` as int64, `boolean` as boolean, `date` as a date (days), `datetime` as a
//! timestamp in microseconds in the time zone Europe/Prague (stored as UTC, shown in
//! Prague), every other column as UTF-8 text, each nullable; a missing value is a null,
//! an empty text stays an empty text. A masked column (`birth_date` without
//! `--include-pii`) is text (`***`). A value a typed column cannot hold (a date that is
//! not one) is a null, counted in the manifest's `unparsed` and named in a warning
//! (column and count, never the value): the CSV of the same export keeps it verbatim.
//!
//! Never reads the database: it is given the rows the table writer reads. Memory stays
//! flat: at most [`BATCH`] rows are held as Arrow arrays, and each open file holds at
//! most one row group ([`ROW_GROUP`] rows) encoded and compressed before it is written;
//! and what all open files of a table hold together (the events' years) is kept under
//! [`BUFFER_BUDGET`] by writing the largest files' row groups early.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Date32Builder, Int64Builder, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use sha2::Digest;

use super::table::{HashedFile, RowOut};
use super::{ExportError, Table};
use crate::privacy;

/// Rows gathered into one Arrow batch before it is handed to the writer.
pub(super) const BATCH: usize = 8192;

/// Rows of a row group: 128 Ki. A reader skips or splits a file by row groups, and
/// DuckDB, Polars and pyarrow each scan one row group a thread: about 128 thousand rows
/// give each column chunk a few hundred kilobytes to a few megabytes compressed (large
/// enough for zstd and the dictionaries to work, and for one read a column chunk), a
/// table of a million rows eight groups to spread over the cores and to skip by their
/// statistics (`action_id`, `case_number`, `published` grow or cluster), and bound what
/// the writer holds for each open file to one such group.
pub(super) const ROW_GROUP: usize = 128 * 1024;

/// What the open files of one table may hold in memory together, their pending rows and
/// unwritten row groups: beyond it the largest are written out as (shorter) row groups.
/// The events have a file for each year, and a stream of events published in many
/// years would otherwise hold a row group for each (measured at 2 000 000 simulated
/// actions over many years: 550 MiB).
pub(super) const BUFFER_BUDGET: usize = 64 << 20;
/// Rows between two looks at the files' memory.
const BUDGET_CHECK: u64 = 4096;

/// The time zone of every timestamp column.
pub const TIME_ZONE: &str = "Europe/Prague";

/// The type of a column in the Parquet files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Text,
    Int,
    Bool,
    Date,
    Timestamp,
}

impl Kind {
    /// The kind of column `name`, masked or not.
    pub(super) fn of(name: &str, masked: bool) -> Kind {
        let leaf = name.rsplit('.').next().unwrap_or(name);
        if masked && privacy::masked_column(leaf) {
            return Kind::Text;
        }
        match super::column_type(name) {
            "integer" => Kind::Int,
            "boolean" => Kind::Bool,
            "date" => Kind::Date,
            "datetime" => Kind::Timestamp,
            _ => Kind::Text,
        }
    }

    fn data_type(self) -> DataType {
        match self {
            Kind::Text => DataType::Utf8,
            Kind::Int => DataType::Int64,
            Kind::Bool => DataType::Boolean,
            Kind::Date => DataType::Date32,
            Kind::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some(TIME_ZONE.into())),
        }
    }

    /// The type as the manifest names it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Text => "string",
            Kind::Int => "int64",
            Kind::Bool => "boolean",
            Kind::Date => "date32",
            Kind::Timestamp => "timestamp[us, tz=Europe/Prague]",
        }
    }
}

/// The schema of `table`'s Parquet file.
pub(super) fn schema(table: Table, masked: bool) -> (SchemaRef, Vec<Kind>) {
    let kinds: Vec<Kind> = table
        .columns()
        .iter()
        .map(|c| Kind::of(c, masked))
        .collect();
    let fields: Vec<Field> = table
        .columns()
        .iter()
        .zip(&kinds)
        .map(|(c, k)| Field::new(*c, k.data_type(), true))
        .collect();
    (Arc::new(Schema::new(fields)), kinds)
}

pub(super) fn properties() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(
            ZstdLevel::try_new(3).expect("a valid zstd level"),
        ))
        .set_max_row_group_row_count(Some(ROW_GROUP))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_created_by(format!("isir {}", env!("CARGO_PKG_VERSION")))
        .build()
}

/// One column's values of the batch being gathered.
enum Col {
    Text(StringBuilder),
    Int(Int64Builder),
    Bool(BooleanBuilder),
    Date(Date32Builder),
    Timestamp(TimestampMicrosecondBuilder),
}

impl Col {
    fn new(k: Kind) -> Col {
        match k {
            Kind::Text => Col::Text(StringBuilder::with_capacity(BATCH, BATCH * 16)),
            Kind::Int => Col::Int(Int64Builder::with_capacity(BATCH)),
            Kind::Bool => Col::Bool(BooleanBuilder::with_capacity(BATCH)),
            Kind::Date => Col::Date(Date32Builder::with_capacity(BATCH)),
            Kind::Timestamp => Col::Timestamp(
                TimestampMicrosecondBuilder::with_capacity(BATCH).with_timezone(TIME_ZONE),
            ),
        }
    }

    /// Appends `v`; false when a typed column cannot hold it (a null is appended).
    fn push(&mut self, v: Option<&str>) -> bool {
        match self {
            Col::Text(b) => {
                b.append_option(v);
                true
            }
            Col::Int(b) => typed(v, |s| s.parse::<i64>().ok(), |x| b.append_option(x)),
            Col::Bool(b) => typed(v, parse_bool, |x| b.append_option(x)),
            Col::Date(b) => typed(v, parse_date, |x| b.append_option(x)),
            Col::Timestamp(b) => typed(v, parse_timestamp, |x| b.append_option(x)),
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Col::Text(b) => Arc::new(b.finish()),
            Col::Int(b) => Arc::new(b.finish()),
            Col::Bool(b) => Arc::new(b.finish()),
            Col::Date(b) => Arc::new(b.finish()),
            Col::Timestamp(b) => Arc::new(b.finish()),
        }
    }
}

/// A typed cell: an absent or empty value is a null; one that does not parse is a null
/// and false.
fn typed<T>(
    v: Option<&str>,
    parse: impl Fn(&str) -> Option<T>,
    mut put: impl FnMut(Option<T>),
) -> bool {
    match v.filter(|s| !s.is_empty()) {
        None => {
            put(None);
            true
        }
        Some(s) => {
            let x = parse(s);
            let ok = x.is_some();
            put(x);
            ok
        }
    }
}

fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "true" | "1" => Some(true),
        "false" | "0" => Some(false),
        _ => None,
    }
}

/// An `xsd:date` (`2008-01-01`, with or without the register's zone suffix
/// `+01:00`/`Z`), or the date of an `xsd:dateTime`: days since 1970-01-01. The zone
/// suffix of a date does not move it (a calendar date, not an instant).
pub(super) fn parse_date(s: &str) -> Option<i32> {
    let day = chrono::NaiveDate::parse_from_str(s.get(..10)?, "%Y-%m-%d").ok()?;
    let rest = &s[10..];
    let tail_ok = rest.is_empty()
        || rest == "Z"
        || (rest.len() == 6 && (rest.starts_with('+') || rest.starts_with('-')))
        || (rest.starts_with('T') && parse_timestamp(s).is_some());
    if !tail_ok {
        return None;
    }
    let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1)?;
    i32::try_from((day - epoch).num_days()).ok()
}

/// An `xsd:dateTime` (`2026-03-02T09:14:05.000+01:00`, or `Z`, or without a zone: then
/// Prague's local time), or an `xsd:date` (its midnight at its offset, or Prague's):
/// microseconds since the epoch, UTC.
pub(super) fn parse_timestamp(s: &str) -> Option<i64> {
    use chrono::TimeZone;
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Some(t.timestamp_micros());
    }
    let prague = |n: chrono::NaiveDateTime| {
        chrono_tz::Europe::Prague
            .from_local_datetime(&n)
            .earliest()
            .map(|t| t.timestamp_micros())
    };
    if let Ok(n) = chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f") {
        return prague(n);
    }
    // A date: midnight, at its offset when it has one.
    let day = chrono::NaiveDate::parse_from_str(s.get(..10)?, "%Y-%m-%d").ok()?;
    let midnight = day.and_hms_opt(0, 0, 0)?;
    match &s[10..] {
        "" => prague(midnight),
        "Z" => Some(midnight.and_utc().timestamp_micros()),
        off => {
            let t = chrono::DateTime::parse_from_rfc3339(&format!("{}T00:00:00{off}", &s[..10]))
                .ok()?;
            Some(t.timestamp_micros())
        }
    }
}

/// One Parquet file being written: rows gathered into a batch, batches to the writer,
/// the bytes counted and hashed as they reach the file.
pub(super) struct ParquetFile {
    schema: SchemaRef,
    cols: Vec<Col>,
    pending: usize,
    /// The bytes of the pending rows' cells (an estimate of what the builders hold).
    pending_bytes: usize,
    rows: u64,
    /// Cells a typed column could not hold, by column.
    unparsed: Vec<u64>,
    writer: ArrowWriter<HashedFile>,
}

/// A finished file: rows, bytes, SHA-256, cells not parsed by column.
pub(super) struct Written {
    pub(super) rows: u64,
    pub(super) bytes: u64,
    pub(super) sha256: String,
    pub(super) unparsed: BTreeMap<String, u64>,
}

impl ParquetFile {
    pub(super) fn create(
        path: &Path,
        schema: SchemaRef,
        kinds: &[Kind],
        private: bool,
    ) -> Result<ParquetFile, ExportError> {
        let h = HashedFile::create(path, private)?;
        let writer =
            ArrowWriter::try_new(h, schema.clone(), Some(properties())).map_err(parquet_err)?;
        Ok(ParquetFile {
            schema,
            cols: kinds.iter().map(|k| Col::new(*k)).collect(),
            pending: 0,
            pending_bytes: 0,
            rows: 0,
            unparsed: vec![0; kinds.len()],
            writer,
        })
    }

    pub(super) fn push(&mut self, cells: &[Option<&str>]) -> Result<(), ExportError> {
        if cells.len() != self.cols.len() {
            return Err(ExportError::Invalid(format!(
                "a row has {} cells, not {}",
                cells.len(),
                self.cols.len()
            )));
        }
        for (i, (c, v)) in self.cols.iter_mut().zip(cells).enumerate() {
            self.pending_bytes += v.map_or(1, |v| v.len() + 4);
            if !c.push(*v) {
                self.unparsed[i] += 1;
            }
        }
        self.pending += 1;
        self.rows += 1;
        if self.pending == BATCH {
            self.flush_batch()?;
        }
        Ok(())
    }

    fn flush_batch(&mut self) -> Result<(), ExportError> {
        if self.pending == 0 {
            return Ok(());
        }
        let arrays: Vec<ArrayRef> = self.cols.iter_mut().map(Col::finish).collect();
        let batch = RecordBatch::try_new(self.schema.clone(), arrays)
            .map_err(|e| ExportError::Invalid(format!("an Arrow batch: {e}")))?;
        self.writer.write(&batch).map_err(parquet_err)?;
        self.pending = 0;
        self.pending_bytes = 0;
        Ok(())
    }

    /// What the file holds in memory: its pending rows and its unwritten row group.
    fn buffered(&self) -> usize {
        self.pending_bytes + self.writer.memory_size()
    }

    /// Writes the pending rows and the row group in progress to the file.
    fn spill(&mut self) -> Result<(), ExportError> {
        self.flush_batch()?;
        self.writer.flush().map_err(parquet_err)
    }

    /// The row groups written so far (for the tests of the memory budget).
    #[cfg(test)]
    fn row_groups(&self) -> usize {
        self.writer.flushed_row_groups().len()
    }

    /// Writes what is left and the footer, syncs the file.
    pub(super) fn finish(mut self) -> Result<Written, ExportError> {
        self.flush_batch()?;
        let mut h = self.writer.into_inner().map_err(parquet_err)?;
        h.flush()?;
        let file = h.inner.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        let unparsed = self
            .schema
            .fields()
            .iter()
            .zip(&self.unparsed)
            .filter(|(_, n)| **n > 0)
            .map(|(f, n)| (f.name().clone(), *n))
            .collect();
        Ok(Written {
            rows: self.rows,
            bytes: h.bytes,
            sha256: hex::encode(h.sha.finalize()),
            unparsed,
        })
    }
}

pub(super) fn parquet_err(e: parquet::errors::ParquetError) -> ExportError {
    match e {
        parquet::errors::ParquetError::External(x) => match x.downcast::<std::io::Error>() {
            Ok(io) => ExportError::Io(*io),
            Err(x) => ExportError::Invalid(format!("Parquet: {x}")),
        },
        other => ExportError::Invalid(format!("Parquet: {other}")),
    }
}

/// The Parquet files of one table: one file, or for `events` one a Prague year of
/// publication (`events/year=YYYY/part-0.parquet`; an event whose publication time does
/// not parse goes to `year=__HIVE_DEFAULT_PARTITION__`, Hive's name for a null key).
pub(super) struct ParquetOut {
    dir: PathBuf,
    table: Table,
    schema: SchemaRef,
    kinds: Vec<Kind>,
    private: bool,
    /// The column that names the partition (`published`), for `events`.
    part_at: Option<usize>,
    files: BTreeMap<String, ParquetFile>,
    /// Rows since the files' memory was last looked at.
    since_check: u64,
    budget: usize,
}

/// A written file of a table: its name under the export's directory, its partition.
pub(super) struct OutFile {
    pub(super) name: String,
    pub(super) partition: Option<(String, String)>,
    pub(super) written: Written,
}

/// The directory of the events' partitions.
pub const EVENTS_DIR: &str = "events";
/// The partition of events whose publication time does not parse.
const NULL_PARTITION: &str = "__HIVE_DEFAULT_PARTITION__";

impl ParquetOut {
    pub(super) fn new(dir: &Path, table: Table, masked: bool, private: bool) -> ParquetOut {
        let (schema, kinds) = schema(table, masked);
        let part_at = (table == Table::Events)
            .then(|| table.columns().iter().position(|c| *c == "published"))
            .flatten();
        ParquetOut {
            dir: dir.to_path_buf(),
            table,
            schema,
            kinds,
            private,
            part_at,
            files: BTreeMap::new(),
            since_check: 0,
            budget: BUFFER_BUDGET,
        }
    }

    /// Keeps what the open files hold under the budget: the largest write their row
    /// groups out until the files hold half of it.
    fn keep_to_budget(&mut self) -> Result<(), ExportError> {
        let mut sizes: Vec<(usize, String)> = self
            .files
            .iter()
            .map(|(k, f)| (f.buffered(), k.clone()))
            .collect();
        let mut total: usize = sizes.iter().map(|(s, _)| s).sum();
        if total <= self.budget {
            return Ok(());
        }
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        for (size, key) in sizes {
            if total <= self.budget / 2 {
                break;
            }
            self.files.get_mut(&key).expect("an open file").spill()?;
            total -= size;
        }
        Ok(())
    }

    pub(super) fn kinds(&self) -> &[Kind] {
        &self.kinds
    }

    fn year(published: Option<&str>) -> String {
        use chrono::TimeZone;
        published
            .and_then(parse_timestamp)
            .and_then(|us| chrono_tz::Europe::Prague.timestamp_micros(us).single())
            .map(|t| chrono::Datelike::year(&t).to_string())
            .unwrap_or_else(|| NULL_PARTITION.into())
    }

    /// Finishes every file; gives them by name. A table without a partition always has
    /// its one file, even without rows; `events` has a file for each year it holds, and
    /// without events one empty file in the partition of no year, so that a reader's
    /// glob over `events/*/*.parquet` finds the schema and no rows rather than no file.
    pub(super) fn finish(mut self) -> Result<Vec<OutFile>, ExportError> {
        if self.files.is_empty() {
            match self.part_at {
                None => self.file("")?,
                Some(_) => self.file(NULL_PARTITION)?,
            };
        }
        let mut out = Vec::new();
        for (key, f) in std::mem::take(&mut self.files) {
            let (name, partition) = self.name(&key);
            out.push(OutFile {
                name,
                partition,
                written: f.finish()?,
            });
        }
        Ok(out)
    }

    fn name(&self, key: &str) -> (String, Option<(String, String)>) {
        match self.part_at {
            Some(_) => (
                format!("{EVENTS_DIR}/year={key}/part-0.parquet"),
                Some(("year".into(), key.into())),
            ),
            None => (format!("{}.parquet", self.table.name()), None),
        }
    }

    fn file(&mut self, key: &str) -> Result<&mut ParquetFile, ExportError> {
        if !self.files.contains_key(key) {
            let (name, _) = self.name(key);
            let path = self.dir.join(&name);
            if let Some(p) = path.parent() {
                if self.private {
                    privacy::create_private_dir(p)?;
                } else {
                    std::fs::create_dir_all(p)?;
                }
            }
            let f = ParquetFile::create(&path, self.schema.clone(), &self.kinds, self.private)?;
            self.files.insert(key.to_string(), f);
        }
        Ok(self.files.get_mut(key).expect("just inserted"))
    }
}

impl RowOut for ParquetOut {
    fn row(&mut self, cells: &[Option<&str>]) -> Result<(), ExportError> {
        let key = match self.part_at {
            Some(at) => Self::year(cells.get(at).copied().flatten()),
            None => String::new(),
        };
        self.file(&key)?.push(cells)?;
        self.since_check += 1;
        if self.since_check == BUDGET_CHECK {
            self.since_check = 0;
            self.keep_to_budget()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_timestamps_parse_as_the_protocol_writes_them() {
        let day = |y, m, d| {
            (chrono::NaiveDate::from_ymd_opt(y, m, d).unwrap()
                - chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap())
            .num_days() as i32
        };
        assert_eq!(parse_date("2008-01-01"), Some(day(2008, 1, 1)));
        assert_eq!(parse_date("2015-08-21+02:00"), Some(day(2015, 8, 21)));
        assert_eq!(parse_date("2015-08-21Z"), Some(day(2015, 8, 21)));
        assert_eq!(parse_date("1969-12-31"), Some(-1));
        assert_eq!(
            parse_date("2015-08-21T23:30:00.000+02:00"),
            Some(day(2015, 8, 21))
        );
        for bad in [
            "",
            "2015-13-01",
            "21.08.2015",
            "2015-08-21junk",
            "2015-08-2",
        ] {
            assert_eq!(parse_date(bad), None, "{bad:?}");
        }
        // 2026-03-02T09:14:05+01:00 is 08:14:05 UTC.
        let utc = chrono::NaiveDate::from_ymd_opt(2026, 3, 2)
            .unwrap()
            .and_hms_opt(8, 14, 5)
            .unwrap()
            .and_utc()
            .timestamp_micros();
        assert_eq!(parse_timestamp("2026-03-02T09:14:05.000+01:00"), Some(utc));
        assert_eq!(parse_timestamp("2026-03-02T09:14:05+01:00"), Some(utc));
        assert_eq!(parse_timestamp("2026-03-02T08:14:05Z"), Some(utc));
        // Without a zone: Prague's time (CET in March before the change).
        assert_eq!(parse_timestamp("2026-03-02T09:14:05"), Some(utc));
        assert_eq!(
            parse_timestamp("2026-03-02T09:14:05.5"),
            Some(utc + 500_000)
        );
        // A date: midnight at its offset.
        let midnight = chrono::NaiveDate::from_ymd_opt(2015, 8, 20)
            .unwrap()
            .and_hms_opt(22, 0, 0)
            .unwrap()
            .and_utc()
            .timestamp_micros();
        assert_eq!(parse_timestamp("2015-08-21+02:00"), Some(midnight));
        assert_eq!(parse_timestamp("2015-08-21"), Some(midnight));
        for bad in ["", "yesterday", "2026-03-02 09:14", "2026-02-30T00:00:00Z"] {
            assert_eq!(parse_timestamp(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_year_is_prague_s() {
        // 23:30 UTC on New Year's Eve is already the next year in Prague.
        assert_eq!(ParquetOut::year(Some("2023-12-31T23:30:00Z")), "2024");
        assert_eq!(ParquetOut::year(Some("2024-01-01T00:30:00+01:00")), "2024");
        assert_eq!(ParquetOut::year(Some("not a time")), NULL_PARTITION);
        assert_eq!(ParquetOut::year(None), NULL_PARTITION);
    }

    /// Events published over many years, interleaved, each year a file: what the open
    /// files hold together stays under the budget, written early as more row groups, and
    /// every row is in its year's file (read back by the parquet crate's reader).
    #[test]
    fn the_open_files_keep_to_the_memory_budget() {
        let dir = tempfile::tempdir().unwrap();
        let mut out = ParquetOut::new(dir.path(), Table::Events, true, false);
        out.budget = 1 << 20;
        let cols = Table::Events.columns();
        let (years, per_year) = (40usize, 3000usize);
        let note = "x".repeat(200);
        let mut peak = 0;
        for i in 0..years * per_year {
            let year = 1990 + i % years;
            let id = i.to_string();
            let published = format!("{year}-06-01T12:00:00+02:00");
            let cells: Vec<Option<&str>> = cols
                .iter()
                .map(|c| match *c {
                    "action_id" => Some(id.as_str()),
                    "published" | "created" => Some(published.as_str()),
                    "secondary_action" | "secondary_document" => Some("false"),
                    "slot_action_id" | "number_in_section" => None,
                    "type_name" => Some(note.as_str()),
                    _ => Some("a"),
                })
                .collect();
            out.row(&cells).unwrap();
            if out.since_check == 0 {
                let total: usize = out.files.values().map(ParquetFile::buffered).sum();
                peak = peak.max(total);
            }
        }
        assert!(peak > 0 && peak <= out.budget, "held {peak} bytes");
        assert!(
            out.files.values().all(|f| f.row_groups() >= 1),
            "written early"
        );
        let files = out.finish().unwrap();
        assert_eq!(files.len(), years);
        for f in files {
            assert_eq!(f.written.rows, per_year as u64, "{}", f.name);
            let file = std::fs::File::open(dir.path().join(&f.name)).unwrap();
            let reader =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                    .unwrap()
                    .build()
                    .unwrap();
            let n: usize = reader.map(|b| b.unwrap().num_rows()).sum();
            assert_eq!(n, per_year, "{}", f.name);
        }
    }
}
