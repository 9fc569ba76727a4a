//! The two back ends behind one type (opened by `connect.rs`), and every statement of
//! the replica: actions, writer state, tick log, epochs. Every statement is written once
//! and runs on both pools (sqlx accepts `$N` placeholders on SQLite too); transactions
//! take the write lock up front (`BEGIN IMMEDIATE` on SQLite, `FOR UPDATE` on
//! PostgreSQL).

use sqlx::{PgPool, Row, SqlitePool};

use super::notes::{AtRest, Packer, Unpacker};
use super::sql::Tx;
use super::*;
use crate::checkpoint;
use crate::source::model::{Action, Page, Spoiled};

/// The replica store on one of the two back ends. Cheap to clone.
#[derive(Clone, Debug)]
pub enum Store {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Runs a SELECT of `ACTION_COLUMNS` with the given binds and maps the rows to actions.
macro_rules! fetch_actions {
    ($self:expr, $sql:expr, [$($b:expr),*]) => {
        both!($self, |p| {
            sqlx::query($sql)
                $(.bind($b))*
                .fetch_all(p)
                .await?
                .into_iter()
                .map(|r| row_action(&r))
                .collect::<Result<Vec<_>, sqlx::Error>>()?
        })
    };
}

/// The columns of a note at rest that follow `ACTION_COLUMNS` in every SELECT of actions
/// ([`super::notes`]).
pub(crate) const NOTE_AT_REST: &str = "note_z, note_dict";

pub(crate) const ACTION_COLUMNS: &str = "id, created, published, document_url, case_number, type_code, type_name, section, number_in_section, note";

/// The page cache of every SQLite connection, in KiB as `PRAGMA cache_size` takes it
/// (negative): 32 MiB (the default is 2 MiB): projection indexes take random inserts,
/// and a small cache makes them disk-bound.
pub(crate) const CACHE_SIZE: &str = "-32768";

/// Actions after `$1` in ID order, at most `$2`.
pub(crate) const ACTIONS_AFTER: &str = "SELECT id, created, published, document_url, case_number, type_code, type_name, section, number_in_section, note, note_z, note_dict \
     FROM actions WHERE id > $1 ORDER BY id LIMIT $2";
/// Actions up to `$3` after the position (`$1`, `$2`) in (case number, ID) order, at
/// most `$4`.
pub(crate) const ACTIONS_BY_CASE: &str = "SELECT id, created, published, document_url, case_number, type_code, type_name, section, number_in_section, note, note_z, note_dict \
     FROM actions WHERE (case_number, id) > ($1, $2) AND id <= $3 ORDER BY case_number, id LIMIT $4";

impl Store {
    // -----------------------------------------------------------------------------------
    // The replica and the checkpoint

    pub async fn writer_state(&self) -> Result<WriterState, StoreError> {
        let sql = "SELECT checkpoint, epoch, updated_at, head_id, head_checked_at, last_tick_outcome, last_tick_at \
                   FROM writer_state WHERE singleton = 1";
        let row = both!(self, |p| {
            let r = sqlx::query(sql).fetch_one(p).await?;
            WriterState {
                checkpoint: r.try_get(0)?,
                epoch: r.try_get(1)?,
                updated_at: r.try_get(2)?,
                head_id: r.try_get(3)?,
                head_checked_at: r.try_get(4)?,
                last_tick_outcome: r.try_get(5)?,
                last_tick_at: r.try_get(6)?,
            }
        });
        Ok(row)
    }

    pub async fn checkpoint(&self) -> Result<Option<i64>, StoreError> {
        Ok(self.writer_state().await?.checkpoint)
    }

    /// Stores `page` and moves the checkpoint to its last ID in one transaction, if the
    /// store's checkpoint is `expected` and `epoch` is not below the store's: its sound
    /// and repaired records in `actions`, its spoiled records in `quarantine` (and the
    /// held-back ones counted per case in `case_quarantine`). The checkpoint moves past
    /// a held-back record too ([`Page::last_id`]). Idempotent by ID (and, for spoiled
    /// records, by ID and bytes). An empty page changes nothing. Returns the number of
    /// actions inserted.
    pub async fn write_page(
        &self,
        epoch: i64,
        expected: Option<i64>,
        page: &Page,
    ) -> Result<u64, StoreError> {
        let actions: Vec<&Action> = page.actions().collect();
        self.write_batch(
            epoch,
            expected,
            page.after,
            &actions,
            &page.spoiled,
            page.last_id(),
        )
        .await
    }

    /// As [`Store::write_page`], for actions given directly (snapshot restore).
    pub async fn write_actions(
        &self,
        epoch: i64,
        expected: Option<i64>,
        after: i64,
        actions: &[&Action],
    ) -> Result<u64, StoreError> {
        let last = actions.last().map(|a| a.id);
        self.write_batch(epoch, expected, after, actions, &[], last)
            .await
    }

    async fn write_batch(
        &self,
        epoch: i64,
        expected: Option<i64>,
        after: i64,
        actions: &[&Action],
        spoiled: &[Spoiled],
        last: Option<i64>,
    ) -> Result<u64, StoreError> {
        let now = now_ms();
        // The notes as the rows will hold them: compressed with the newest dictionary,
        // outside the write lock. (A dictionary added meanwhile changes nothing: each
        // row names its own.)
        let dict = if actions.iter().any(|a| a.note.is_some()) {
            super::notes::current(&mut Tx::single(self).await?).await?
        } else {
            None
        };
        let mut packer = Packer::new(dict);
        let rows: Vec<(&Action, AtRest)> = actions
            .iter()
            .map(|a| (*a, packer.pack(a.note.as_deref())))
            .collect();
        write_tx!(self, |tx, lock| {
            let sql =
                format!("SELECT checkpoint, epoch FROM writer_state WHERE singleton = 1{lock}");
            let row = sqlx::query(&sql).fetch_one(&mut *tx).await?;
            let found: Option<i64> = row.try_get(0)?;
            let current: i64 = row.try_get(1)?;
            checkpoint::admit(found, current, expected, epoch)?;
            checkpoint::follows(found, after, actions.iter().map(|a| a.id))?;
            for s in spoiled {
                let held = !s.reason.is_repair();
                let known: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM quarantine WHERE action_id IS NOT DISTINCT FROM $1 AND raw = $2",
                )
                .bind(s.id)
                .bind(&s.raw)
                .fetch_one(&mut *tx)
                .await?;
                if known > 0 {
                    continue;
                }
                sqlx::query(
                    "INSERT INTO quarantine (action_id, case_number, reason, detail, status, raw, page_after, received_at, epoch) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                )
                .bind(s.id)
                .bind(s.case_number.as_deref())
                .bind(s.reason.as_str())
                .bind(&s.detail)
                .bind(if held { "held" } else { "repaired" })
                .bind(&s.raw)
                .bind(after)
                .bind(now)
                .bind(epoch)
                .execute(&mut *tx)
                .await?;
                if held && let Some(case) = s.case_number.as_deref() {
                    sqlx::query(
                        "INSERT INTO case_quarantine (case_number, held) VALUES ($1, 1) \
                         ON CONFLICT (case_number) DO UPDATE SET held = case_quarantine.held + 1",
                    )
                    .bind(case)
                    .execute(&mut *tx)
                    .await?;
                }
            }
            let Some(last) = last else {
                if !spoiled.is_empty() {
                    tx.commit().await?;
                }
                return Ok(0);
            };
            let inserted =
                super::insert::InsertActions::insert_actions(&mut *tx, &rows, now, epoch).await?;
            sqlx::query("UPDATE writer_state SET checkpoint = $1, epoch = $2, updated_at = $3 WHERE singleton = 1")
                .bind(last)
                .bind(epoch.max(current))
                .bind(now)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(inserted)
        })
    }

    /// Claims `epoch` for a new lease grant: only if it is above every epoch the store has
    /// seen, so that no two grants ever share one (a Redis restart between one holder's
    /// grant and its claim could otherwise hand the same epoch to two holders). Returns
    /// the store's epoch before the claim: the claim held if it is below `epoch`.
    pub async fn claim_epoch(&self, epoch: i64) -> Result<i64, StoreError> {
        Ok(self.register_epoch_inner(epoch).await?.1)
    }

    /// Raises the store's epoch to at least `epoch`; returns the store's epoch after.
    /// A lease grant calls this so that a stale holder is fenced even before the new
    /// holder's first write.
    pub async fn register_epoch(&self, epoch: i64) -> Result<i64, StoreError> {
        Ok(self.register_epoch_inner(epoch).await?.0)
    }

    /// Raises the store's epoch to at least `epoch`; gives (after, before).
    async fn register_epoch_inner(&self, epoch: i64) -> Result<(i64, i64), StoreError> {
        write_tx!(self, |tx, lock| {
            let sql = format!("SELECT epoch FROM writer_state WHERE singleton = 1{lock}");
            let current: i64 = sqlx::query(&sql).fetch_one(&mut *tx).await?.try_get(0)?;
            if epoch > current {
                sqlx::query("UPDATE writer_state SET epoch = $1 WHERE singleton = 1")
                    .bind(epoch)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok((current.max(epoch), current))
        })
    }

    /// Sets the checkpoint, fenced like a write. Only [`crate::poller::by_hand::set_by_hand`]
    /// calls it.
    pub async fn set_checkpoint(
        &self,
        epoch: i64,
        checkpoint: Option<i64>,
    ) -> Result<(), StoreError> {
        write_tx!(self, |tx, lock| {
            let sql = format!("SELECT epoch FROM writer_state WHERE singleton = 1{lock}");
            let current: i64 = sqlx::query(&sql).fetch_one(&mut *tx).await?.try_get(0)?;
            checkpoint::fenced(current, epoch)?;
            sqlx::query(
                "UPDATE writer_state SET checkpoint = $1, updated_at = $2 WHERE singleton = 1",
            )
            .bind(checkpoint)
            .bind(now_ms())
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    pub async fn record_head(&self, head: i64, at: i64) -> Result<(), StoreError> {
        both!(self, |p| sqlx::query(
            "UPDATE writer_state SET head_id = $1, head_checked_at = $2 WHERE singleton = 1"
        )
        .bind(head)
        .bind(at)
        .execute(p)
        .await?
        .rows_affected());
        Ok(())
    }

    pub async fn record_tick(&self, t: &TickRecord) -> Result<(), StoreError> {
        both!(self, |p| {
            sqlx::query(
                "INSERT INTO tick_log (at, outcome, pages, actions, requests, checkpoint, detail) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(t.at)
            .bind(&t.outcome)
            .bind(t.pages)
            .bind(t.actions)
            .bind(t.requests)
            .bind(t.checkpoint)
            .bind(&t.detail)
            .execute(p)
            .await?;
            sqlx::query("UPDATE writer_state SET last_tick_outcome = $1, last_tick_at = $2 WHERE singleton = 1")
                .bind(&t.outcome)
                .bind(t.at)
                .execute(p)
                .await?;
            sqlx::query("DELETE FROM tick_log WHERE at < $1")
                .bind(t.at - 7 * 86_400_000)
                .execute(p)
                .await?;
        });
        Ok(())
    }

    /// When the last tick that reached the head or its batch limit was recorded (ticks
    /// are kept 7 days).
    pub async fn last_successful_tick(&self) -> Result<Option<i64>, StoreError> {
        let sql = "SELECT MAX(at) FROM tick_log WHERE outcome IN ('caught_up', 'batch_limit')";
        Ok(both!(self, |p| sqlx::query(sql)
            .fetch_one(p)
            .await?
            .try_get(0)?))
    }

    pub async fn recent_ticks(&self, limit: i64) -> Result<Vec<TickRecord>, StoreError> {
        let sql = "SELECT at, outcome, pages, actions, requests, checkpoint, detail FROM tick_log ORDER BY seq DESC LIMIT $1";
        let rows = both!(self, |p| {
            sqlx::query(sql)
                .bind(limit)
                .fetch_all(p)
                .await?
                .into_iter()
                .map(|r| {
                    Ok(TickRecord {
                        at: r.try_get(0)?,
                        outcome: r.try_get(1)?,
                        pages: r.try_get(2)?,
                        actions: r.try_get(3)?,
                        requests: r.try_get(4)?,
                        checkpoint: r.try_get(5)?,
                        detail: r.try_get(6)?,
                    })
                })
                .collect::<Result<Vec<_>, sqlx::Error>>()?
        });
        Ok(rows)
    }

    pub async fn count_actions(&self) -> Result<i64, StoreError> {
        Ok(both!(self, |p| sqlx::query("SELECT COUNT(*) FROM actions")
            .fetch_one(p)
            .await?
            .try_get(0)?))
    }

    /// Actions stored per hour (from the tick log) since `since_ms`: (hour start in ms,
    /// actions), oldest first, hours without actions left out.
    pub async fn stored_per_hour(&self, since_ms: i64) -> Result<Vec<(i64, i64)>, StoreError> {
        let sql = "SELECT (at / 3600000) * 3600000 AS h, CAST(SUM(actions) AS BIGINT) FROM tick_log \
                   WHERE at >= $1 GROUP BY h ORDER BY h";
        Ok(both!(self, |p| {
            sqlx::query(sql)
                .bind(since_ms)
                .fetch_all(p)
                .await?
                .into_iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                .collect::<Result<Vec<(i64, i64)>, sqlx::Error>>()?
        }))
    }

    /// Stored actions with an ID above `after`, in ID order, at most `limit`.
    pub async fn actions_after(&self, after: i64, limit: i64) -> Result<Vec<Action>, StoreError> {
        let rows = fetch_actions!(self, ACTIONS_AFTER, [after, limit]);
        self.unpack(rows).await
    }

    /// Stored actions up to `upto` in (case number, ID) order, after the position
    /// `after` in that order, at most `limit` (a bulk rebuild walks the replica case by
    /// case through the index `actions (case_number, id)`).
    pub async fn actions_by_case(
        &self,
        after: (&str, i64),
        upto: i64,
        limit: i64,
    ) -> Result<Vec<Action>, StoreError> {
        let rows = fetch_actions!(self, ACTIONS_BY_CASE, [after.0, after.1, upto, limit]);
        self.unpack(rows).await
    }

    /// The stored actions of one case up to `upto`, in ID order.
    pub async fn actions_of_case(
        &self,
        case_number: &str,
        upto: i64,
    ) -> Result<Vec<Action>, StoreError> {
        let sql = format!(
            "SELECT {ACTION_COLUMNS}, {NOTE_AT_REST} FROM actions WHERE case_number = $1 AND id <= $2 ORDER BY id"
        );
        let rows = fetch_actions!(self, &sql, [case_number, upto]);
        self.unpack(rows).await
    }

    /// The actions of `rows` with their notes decoded (the dictionaries loaded as needed).
    async fn unpack(&self, rows: Vec<(Action, AtRest)>) -> Result<Vec<Action>, StoreError> {
        let mut u = if rows.iter().any(|(_, n)| n.z.is_some()) {
            let mut tx = Tx::single(self).await?;
            Some(Unpacker::for_tx(&mut tx, rows.iter().map(|(_, n)| &n.dict)).await?)
        } else {
            None
        };
        let mut out = Vec::with_capacity(rows.len());
        for (mut a, n) in rows {
            a.note = match &mut u {
                Some(u) => u.unpack(a.id, n)?,
                None => n.text,
            };
            out.push(a);
        }
        Ok(out)
    }

    /// Actions stored per epoch: (epoch, count, min id, max id). For lease checkers.
    pub async fn epochs(&self) -> Result<Vec<(i64, i64, i64, i64)>, StoreError> {
        let sql =
            "SELECT epoch, COUNT(*), MIN(id), MAX(id) FROM actions GROUP BY epoch ORDER BY epoch";
        Ok(both!(self, |p| sqlx::query(sql)
            .fetch_all(p)
            .await?
            .into_iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?)))
            .collect::<Result<Vec<_>, sqlx::Error>>()?))
    }
}

/// An action row (`ACTION_COLUMNS`, `NOTE_AT_REST`): the action without its note, and
/// the note as the row holds it.
fn row_action<R: Row>(r: &R) -> Result<(Action, AtRest), sqlx::Error>
where
    usize: sqlx::ColumnIndex<R>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<String>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<i64>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<Vec<u8>>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let note = AtRest {
        text: r.try_get(9)?,
        z: r.try_get(10)?,
        dict: r.try_get(11)?,
    };
    let action = Action {
        id: r.try_get(0)?,
        created: r.try_get(1)?,
        published: r.try_get(2)?,
        document_url: r.try_get(3)?,
        case_number: r.try_get(4)?,
        type_code: r.try_get(5)?,
        type_name: r.try_get(6)?,
        section: r.try_get(7)?,
        number_in_section: r.try_get(8)?,
        note: None,
    };
    Ok((action, note))
}
