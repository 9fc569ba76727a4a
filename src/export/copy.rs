//! The PostgreSQL path of an export: `COPY (SELECT ...) TO STDOUT` inside the export's
//! snapshot, in CSV for the events table and in text format for the documents of cases
//! and parties, equal row for row to the row-by-row path (tested).

use std::io::Write;

use super::{CHUNK, ExportError, ExportOptions, Table};
use crate::privacy;
use crate::store::sql::Tx;

/// The SQL expression of each events column as its cell text, in the table's order: the
/// booleans as `true`/`false`, every other column through `text` (which says how an
/// empty or NULL value is sent).
pub(super) fn event_cells(text: impl Fn(&str) -> String) -> Vec<String> {
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
pub(super) fn events_copy_select(opts: &ExportOptions) -> String {
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
pub(super) async fn copy_out<'t>(
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
pub(super) async fn copy_lines(
    tx: &mut Tx,
    select: &str,
    mut row: impl FnMut(&str) -> Result<(), ExportError>,
    bar: &Option<crate::logging::Bar>,
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
pub(super) fn copy_text_value(bytes: &[u8]) -> Result<std::borrow::Cow<'_, str>, ExportError> {
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
pub(super) async fn copy_table(
    tx: &mut Tx,
    select: &str,
    w: &mut (dyn Write + Send),
    bar: &Option<crate::logging::Bar>,
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
pub(super) struct RecordCounter {
    in_quotes: bool,
    pub(super) records: u64,
}

impl RecordCounter {
    /// Feeds a piece; gives the records it ended.
    pub(super) fn feed(&mut self, bytes: &[u8]) -> u64 {
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
