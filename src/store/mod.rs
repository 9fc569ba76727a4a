//! The replica store: the append-only `actions` table, the checkpoint and the writer's
//! fencing epoch, on SQLite (embedded default, WAL) or PostgreSQL, chosen by URL.
//!
//! Owns every SQL statement of the replica and the database forms of the lease and the
//! budget. Its invariant: actions, checkpoint and epoch move in one transaction, and a
//! write is refused unless it follows the checkpoint it states and carries an epoch no
//! lower than the highest seen. It never talks to the source or to Redis.

// The statement helpers every file of the store uses.
/// Runs the same body on whichever pool this is.
macro_rules! both {
    ($self:expr, |$pool:ident| $body:expr) => {
        match $self {
            Store::Sqlite($pool) => $body,
            Store::Postgres($pool) => $body,
        }
    };
}

/// Runs `body` in a write transaction: `$tx` is the transaction, `$lock` the suffix that
/// locks selected rows, `Db` the database type. The body commits.
macro_rules! write_tx {
    ($self:expr, |$tx:ident, $lock:ident| $body:block) => {
        match $self {
            Store::Sqlite(pool) => {
                #[allow(dead_code)]
                type Db = sqlx::Sqlite;
                let mut $tx = pool.begin_with("BEGIN IMMEDIATE").await?;
                let $lock = "";
                $body
            }
            Store::Postgres(pool) => {
                #[allow(dead_code)]
                type Db = sqlx::Postgres;
                let mut $tx = pool.begin().await?;
                let $lock = " FOR UPDATE";
                $body
            }
        }
    };
}

mod connect;
mod coord;
mod db;
pub mod direct;
pub mod files;
mod insert;
pub mod key;
pub mod notes;
pub mod pgread;
pub mod quarantine;
pub mod records;
pub mod roles;
pub mod sql;
pub use db::*;
pub use quarantine::{QUARANTINE_COLUMNS, QuarantineRow};

/// The columns of an action as the source gives it, in the order every statement, the
/// snapshot format and the bench dumps use.
pub const ACTION_FIELDS: [&str; 10] = [
    "id",
    "created",
    "published",
    "document_url",
    "case_number",
    "type_code",
    "type_name",
    "section",
    "number_in_section",
    "note",
];

/// Why a write was refused. Callers branch on these.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A newer writer exists: this one's lease is gone and it must stop.
    #[error("fenced: writer epoch {mine} is below the store's epoch {current}")]
    Fenced { mine: i64, current: i64 },
    /// The store's checkpoint is not the one the writer expected.
    #[error("checkpoint mismatch: expected {expected:?}, found {found:?}")]
    CheckpointMismatch {
        expected: Option<i64>,
        found: Option<i64>,
    },
    /// The page does not follow the checkpoint.
    #[error("out-of-order page: {0}")]
    OutOfOrder(String),
    /// The database failed (possibly transient); nothing was written.
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
}

/// The writer's durable state.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct WriterState {
    pub checkpoint: Option<i64>,
    pub epoch: i64,
    pub updated_at: i64,
    pub head_id: Option<i64>,
    pub head_checked_at: Option<i64>,
    pub last_tick_outcome: Option<String>,
    pub last_tick_at: Option<i64>,
}

impl WriterState {
    /// How far the source's newest ID is below the checkpoint, when the last tick found
    /// it so (`source_behind`; a stored head below the checkpoint alone proves nothing,
    /// as the checkpoint may have passed it since it was read).
    pub fn source_behind(&self) -> Option<i64> {
        if self.last_tick_outcome.as_deref() != Some("source_behind") {
            return None;
        }
        match (self.head_id, self.checkpoint) {
            (Some(h), Some(c)) if h < c => Some(c - h),
            _ => None,
        }
    }
}

/// The operator's sentence for a source behind the replica (log, tick record, status).
pub fn behind_text(head: i64, checkpoint: i64) -> String {
    format!(
        "the source's newest ID {head} is below the checkpoint {checkpoint} ({} IDs): \
         a reset or different register at source.url; nothing fetched",
        checkpoint - head
    )
}

/// The lease as the database holds it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LeaseRow {
    pub holder: Option<String>,
    pub expires_at: i64,
    pub epoch: i64,
}

/// The answer of a database lease attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbLease {
    Granted { epoch: i64, expires_at: i64 },
    HeldBy { holder: String, expires_at: i64 },
}

/// The answer of a database budget take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbTake {
    Granted { used: u64 },
    DayExhausted { used: u64 },
    MinuteFull { retry_after_ms: i64 },
}

/// One tick as recorded for status.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TickRecord {
    #[serde(serialize_with = "rfc3339::ms")]
    pub at: i64,
    pub outcome: String,
    pub pages: i64,
    pub actions: i64,
    pub requests: i64,
    pub checkpoint: Option<i64>,
    pub detail: Option<String>,
}

/// Now, in milliseconds since the epoch (how every time is stored).
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// A stored time (milliseconds since the epoch) as RFC 3339.
pub fn fmt_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339())
        .unwrap_or_else(|| ms.to_string())
}

/// Serde helpers: a stored time (ms) written as RFC 3339 in every JSON the program
/// prints or serves (`#[serde(serialize_with = "crate::store::rfc3339::ms")]`), as the
/// text forms show it.
pub mod rfc3339 {
    use serde::Serializer;

    pub fn ms<S: Serializer>(ms: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::fmt_ms(*ms))
    }

    pub fn opt_ms<S: Serializer>(ms: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
        match ms {
            Some(v) => s.serialize_some(&super::fmt_ms(*v)),
            None => s.serialize_none(),
        }
    }
}

impl From<crate::checkpoint::Refusal> for StoreError {
    fn from(r: crate::checkpoint::Refusal) -> Self {
        use crate::checkpoint::Refusal;
        match r {
            Refusal::Fenced { mine, current } => StoreError::Fenced { mine, current },
            Refusal::Mismatch { expected, found } => {
                StoreError::CheckpointMismatch { expected, found }
            }
            Refusal::OutOfOrder(why) => StoreError::OutOfOrder(why),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_statements_name_the_action_fields_in_order() {
        assert_eq!(super::db::ACTION_COLUMNS, super::ACTION_FIELDS.join(", "));
    }
}
