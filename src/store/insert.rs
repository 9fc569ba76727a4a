//! Inserting a page's actions into the replica, inside the write transaction
//! `db.rs` opens (which has checked the checkpoint and the fencing epoch and holds the
//! write lock): multi-row INSERTs on SQLite, and on PostgreSQL one binary `COPY` for a
//! page none of whose IDs is stored. Owns only how rows go in; it never checks the
//! checkpoint or the epoch, and never commits.

use sqlx::QueryBuilder;

use super::db::{ACTION_COLUMNS, NOTE_AT_REST};
use super::notes::AtRest;
use crate::source::model::Action;

/// Rows a multi-row INSERT carries ([`FIELDS`] parameters each).
const INSERT_CHUNK: usize = 500;

/// The fields of a stored action row: the source's, the note at rest (two), `stored_at`
/// and `epoch`, in the order of [`target`].
const FIELDS: usize = super::ACTION_FIELDS.len() + 4;

/// The table and its columns as the INSERT and the COPY name them, in [`FIELDS`]' order.
fn target() -> String {
    format!("actions ({ACTION_COLUMNS}, {NOTE_AT_REST}, stored_at, epoch)")
}

/// The multi-row INSERT of actions, idempotent by ID, on the connection `$conn` of
/// back end `$db`: rows `INSERT_CHUNK` at a time.
macro_rules! insert_values {
    ($conn:expr, $db:ty, $rows:expr, $now:expr, $epoch:expr) => {{
        let mut inserted = 0;
        for chunk in $rows.chunks(INSERT_CHUNK) {
            let mut qb: QueryBuilder<$db> = QueryBuilder::new(format!("INSERT INTO {} ", target()));
            qb.push_values(chunk, |mut b, (a, n)| {
                b.push_bind(a.id)
                    .push_bind(a.created.as_str())
                    .push_bind(a.published.as_str())
                    .push_bind(a.document_url.as_deref())
                    .push_bind(a.case_number.as_str())
                    .push_bind(a.type_code.as_str())
                    .push_bind(a.type_name.as_str())
                    .push_bind(a.section.as_deref())
                    .push_bind(a.number_in_section)
                    .push_bind(n.text.as_deref())
                    .push_bind(n.z.as_deref())
                    .push_bind(n.dict)
                    .push_bind($now)
                    .push_bind($epoch);
            });
            qb.push(" ON CONFLICT (id) DO NOTHING");
            inserted += qb.build().execute(&mut *$conn).await?.rows_affected();
        }
        inserted
    }};
}

/// Inserting a page's actions (ascending IDs, already checked to follow the
/// checkpoint) inside the page's write transaction, which holds the write lock.
/// Idempotent by ID: an action already stored is left as it is. Returns the number of
/// actions inserted.
pub(super) trait InsertActions {
    async fn insert_actions(
        &mut self,
        rows: &[(&Action, AtRest)],
        now: i64,
        epoch: i64,
    ) -> Result<u64, sqlx::Error>;
}

impl InsertActions for sqlx::SqliteConnection {
    async fn insert_actions(
        &mut self,
        rows: &[(&Action, AtRest)],
        now: i64,
        epoch: i64,
    ) -> Result<u64, sqlx::Error> {
        Ok(insert_values!(self, sqlx::Sqlite, rows, now, epoch))
    }
}

impl InsertActions for sqlx::PgConnection {
    /// A page none of whose IDs is stored yet (every page the poller writes, unless the
    /// checkpoint was moved back) goes in by one binary `COPY`, PostgreSQL's bulk path;
    /// one that overlaps what is stored goes in by `INSERT … ON CONFLICT DO NOTHING`.
    /// The probe and the COPY are race-free: every writer of `actions` holds the
    /// `writer_state` row lock this transaction holds.
    async fn insert_actions(
        &mut self,
        rows: &[(&Action, AtRest)],
        now: i64,
        epoch: i64,
    ) -> Result<u64, sqlx::Error> {
        let (Some((first, _)), Some((last, _))) = (rows.first(), rows.last()) else {
            return Ok(0);
        };
        let overlaps: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM actions WHERE id BETWEEN $1 AND $2)")
                .bind(first.id)
                .bind(last.id)
                .fetch_one(&mut *self)
                .await?;
        if overlaps {
            return Ok(insert_values!(self, sqlx::Postgres, rows, now, epoch));
        }
        let mut copy = self
            .copy_in_raw(&format!(
                "COPY {} FROM STDIN WITH (FORMAT binary)",
                target()
            ))
            .await?;
        copy.send(copy_binary(rows, now, epoch)).await?;
        copy.finish().await
    }
}

/// `rows` in PostgreSQL's binary `COPY` format, the columns of [`target`] in order: a header, then per row its
/// field count and each field as its length (-1: NULL) and bytes (BIGINT: 8 bytes
/// big-endian; TEXT: UTF-8; BYTEA: as is), then -1.
fn copy_binary(rows: &[(&Action, AtRest)], now: i64, epoch: i64) -> Vec<u8> {
    fn int(b: &mut Vec<u8>, v: Option<i64>) {
        match v {
            Some(v) => {
                b.extend_from_slice(&8i32.to_be_bytes());
                b.extend_from_slice(&v.to_be_bytes());
            }
            None => b.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    fn bytes(b: &mut Vec<u8>, v: Option<&[u8]>) {
        match v {
            Some(v) => {
                let len = i32::try_from(v.len()).expect("a field under 2 GiB");
                b.extend_from_slice(&len.to_be_bytes());
                b.extend_from_slice(v);
            }
            None => b.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    let text = |b: &mut Vec<u8>, v: Option<&str>| bytes(b, v.map(str::as_bytes));
    let mut b = Vec::with_capacity(19 + rows.len() * 400);
    b.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
    b.extend_from_slice(&0i32.to_be_bytes()); // flags
    b.extend_from_slice(&0i32.to_be_bytes()); // header extension
    for (a, n) in rows {
        b.extend_from_slice(&(FIELDS as i16).to_be_bytes());
        int(&mut b, Some(a.id));
        text(&mut b, Some(&a.created));
        text(&mut b, Some(&a.published));
        text(&mut b, a.document_url.as_deref());
        text(&mut b, Some(&a.case_number));
        text(&mut b, Some(&a.type_code));
        text(&mut b, Some(&a.type_name));
        text(&mut b, a.section.as_deref());
        int(&mut b, a.number_in_section);
        text(&mut b, n.text.as_deref());
        bytes(&mut b, n.z.as_deref());
        int(&mut b, n.dict);
        int(&mut b, Some(now));
        int(&mut b, Some(epoch));
    }
    b.extend_from_slice(&(-1i16).to_be_bytes());
    b
}
