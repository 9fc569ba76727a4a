//! The quarantine: the spoiled records of the feed, held back (not in `actions`) or
//! repaired (in `actions`, their bytes as received kept here), and the per-case count
//! of held-back actions (`case_quarantine`, a read model the API may read).
//!
//! Owns every statement on these tables but the poller's insert, which runs inside the
//! page's transaction in `db.rs`. A held-back record leaves the quarantine only through
//! [`Store::release_quarantined`], fenced like a page write; it never moves the
//! checkpoint (which is already past every quarantined ID).

use sqlx::Row;

use super::*;
use crate::checkpoint;
use crate::source::model::Action;

/// One quarantine row, without its bytes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct QuarantineRow {
    /// The row's key, in the order received.
    pub seq: i64,
    pub action_id: Option<i64>,
    pub case_number: Option<String>,
    /// `cp1250`, `encoding`, `missing_field`, `bad_value`, `out_of_order`.
    pub reason: String,
    pub detail: String,
    /// `held` (not in the replica) or `repaired` (in the replica).
    pub status: String,
    pub page_after: i64,
    /// When it was received, ms since the Unix epoch.
    pub received_at: i64,
    pub epoch: i64,
}

/// The columns of a quarantine row, as [`QuarantineRow`] and snapshots take them.
pub const QUARANTINE_COLUMNS: &str =
    "seq, action_id, case_number, reason, detail, status, page_after, received_at, epoch";

fn row_of<R: Row>(r: &R) -> Result<QuarantineRow, sqlx::Error>
where
    usize: sqlx::ColumnIndex<R>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<String>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<i64>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    Ok(QuarantineRow {
        seq: r.try_get(0)?,
        action_id: r.try_get(1)?,
        case_number: r.try_get(2)?,
        reason: r.try_get(3)?,
        detail: r.try_get(4)?,
        status: r.try_get(5)?,
        page_after: r.try_get(6)?,
        received_at: r.try_get(7)?,
        epoch: r.try_get(8)?,
    })
}

impl Store {
    /// The quarantine rows, in the order received; only the held-back ones if `held_only`.
    pub async fn quarantine_rows(&self, held_only: bool) -> Result<Vec<QuarantineRow>, StoreError> {
        let filter = if held_only {
            " WHERE status = 'held'"
        } else {
            ""
        };
        let sql = format!("SELECT {QUARANTINE_COLUMNS} FROM quarantine{filter} ORDER BY seq");
        Ok(both!(self, |p| sqlx::query(&sql)
            .fetch_all(p)
            .await?
            .iter()
            .map(row_of)
            .collect::<Result<Vec<_>, sqlx::Error>>()?))
    }

    /// The bytes of quarantine row `seq` exactly as received.
    pub async fn quarantine_raw(&self, seq: i64) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(both!(self, |p| sqlx::query_scalar(
            "SELECT raw FROM quarantine WHERE seq = $1"
        )
        .bind(seq)
        .fetch_optional(p)
        .await?))
    }

    /// (held back, repaired) records in the quarantine table.
    pub async fn quarantine_counts(&self) -> Result<(i64, i64), StoreError> {
        let sql = "SELECT \
                   CAST(COALESCE(SUM(CASE WHEN status = 'held' THEN 1 ELSE 0 END), 0) AS BIGINT), \
                   CAST(COALESCE(SUM(CASE WHEN status = 'repaired' THEN 1 ELSE 0 END), 0) AS BIGINT) \
                   FROM quarantine";
        Ok(both!(self, |p| {
            let r = sqlx::query(sql).fetch_one(p).await?;
            (r.try_get(0)?, r.try_get(1)?)
        }))
    }

    /// How many actions of `case_number` are held back (the read model
    /// `case_quarantine`: what the API reads).
    pub async fn quarantined_in_case(&self, case_number: &str) -> Result<i64, StoreError> {
        let n: Option<i64> = both!(self, |p| sqlx::query_scalar(
            "SELECT held FROM case_quarantine WHERE case_number = $1"
        )
        .bind(case_number)
        .fetch_optional(p)
        .await?);
        Ok(n.unwrap_or(0))
    }

    /// Moves held-back row `seq` into the replica as `action` (which now parses),
    /// fenced by `epoch` like a page write: the action is inserted (an ID already stored
    /// is left as it is), the row is marked `repaired` when `repaired` (its bytes stay)
    /// or deleted, and the case's count goes down. The checkpoint does not move: it is
    /// already past the action. Returns whether the action was inserted; a row that is
    /// no longer held, or whose ID the replica already holds, is left as it is (`false`).
    pub async fn release_quarantined(
        &self,
        epoch: i64,
        seq: i64,
        action: &Action,
        repaired: bool,
    ) -> Result<bool, StoreError> {
        let now = now_ms();
        write_tx!(self, |tx, lock| {
            let sql = format!("SELECT epoch FROM writer_state WHERE singleton = 1{lock}");
            let current: i64 = sqlx::query(&sql).fetch_one(&mut *tx).await?.try_get(0)?;
            checkpoint::fenced(current, epoch)?;
            let row = sqlx::query(
                "SELECT case_number FROM quarantine WHERE seq = $1 AND status = 'held'",
            )
            .bind(seq)
            .fetch_optional(&mut *tx)
            .await?;
            let Some(row) = row else {
                return Ok(false);
            };
            let case: Option<String> = row.try_get(0)?;
            // An ID the replica already holds stays held: the bytes may disagree with
            // the stored action, and an operator decides.
            let taken: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM actions WHERE id = $1")
                .bind(action.id)
                .fetch_one(&mut *tx)
                .await?;
            if taken > 0 {
                return Ok(false);
            }
            let inserted = sqlx::query(&format!(
                "INSERT INTO actions ({}, stored_at, epoch) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
                 ON CONFLICT (id) DO NOTHING",
                super::db::ACTION_COLUMNS
            ))
            .bind(action.id)
            .bind(action.created.as_str())
            .bind(action.published.as_str())
            .bind(action.document_url.as_deref())
            .bind(action.case_number.as_str())
            .bind(action.type_code.as_str())
            .bind(action.type_name.as_str())
            .bind(action.section.as_deref())
            .bind(action.number_in_section)
            .bind(action.note.as_deref())
            .bind(now)
            .bind(epoch.max(current))
            .execute(&mut *tx)
            .await?
            .rows_affected()
                > 0;
            if repaired {
                sqlx::query("UPDATE quarantine SET status = 'repaired', reason = 'cp1250', action_id = $2, case_number = $3 WHERE seq = $1")
                    .bind(seq)
                    .bind(action.id)
                    .bind(action.case_number.as_str())
                    .execute(&mut *tx)
                    .await?;
            } else {
                sqlx::query("DELETE FROM quarantine WHERE seq = $1")
                    .bind(seq)
                    .execute(&mut *tx)
                    .await?;
            }
            if let Some(case) = case {
                sqlx::query("UPDATE case_quarantine SET held = held - 1 WHERE case_number = $1")
                    .bind(&case)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query("DELETE FROM case_quarantine WHERE case_number = $1 AND held <= 0")
                    .bind(&case)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(inserted)
        })
    }
}
