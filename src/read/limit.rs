//! The time limit of every read: a statement that runs past `api.statement_timeout_ms`
//! is stopped by the database (PostgreSQL's `statement_timeout` on the read side's own
//! pool; on SQLite a progress handler that interrupts it) and its connection is free
//! again at once; the answer is a 503 problem with `Retry-After`. A read that waits
//! longer than `api.acquire_timeout_ms` for a connection gets the same.
//!
//! Owns opening the read side's connections and telling a timeout from other
//! failures; it runs no query of its own beyond arming the limit.

use std::time::Instant;

use super::{Problem, ReadState};
use crate::store::direct;
pub use crate::store::pgread::Plans;
use crate::store::sql::Tx;

/// Seconds a client is told to wait after a read ran out of time.
pub const RETRY_AFTER_TIMEOUT: u64 = 5;
/// Seconds a client is told to wait when every read connection was busy.
pub const RETRY_AFTER_BUSY: u64 = 1;
/// Seconds a client is told to wait when a projection the answer reads is not built.
pub const RETRY_AFTER_UNBUILT: u64 = 60;

/// Whether `e` is a statement stopped by its time limit.
pub fn timed_out(e: &sqlx::Error) -> bool {
    match e {
        // PostgreSQL `query_canceled` (what `statement_timeout` raises); SQLite
        // `SQLITE_INTERRUPT` (what the progress handler causes).
        sqlx::Error::Database(d) => matches!(d.code().as_deref(), Some("57014") | Some("9")),
        sqlx::Error::Io(io) => io.kind() == std::io::ErrorKind::TimedOut,
        _ => false,
    }
}

/// Whether `e` is a statement on a table that does not exist: a projection whose first
/// build has not swapped its table in yet, on a store an operator forced into phase
/// `serve` (PostgreSQL `undefined_table`; SQLite "no such table", from sqlx or from a
/// direct connection); or on a table of an earlier release's form that its builder has
/// not brought up to this release's yet (PostgreSQL `undefined_column`, SQLite "no such
/// column": e.g. SQLite's name search reads the parties' cells from the table itself).
pub fn missing_table(e: &sqlx::Error) -> bool {
    let sqlite = |m: &str| m.contains("no such table") || m.contains("no such column");
    match e {
        sqlx::Error::Database(d) => {
            matches!(d.code().as_deref(), Some("42P01") | Some("42703")) || sqlite(d.message())
        }
        sqlx::Error::Io(io) => sqlite(&io.to_string()),
        _ => false,
    }
}

/// Whether `e` is a database connection that could not be made or was lost: the server
/// refused or dropped it, or ended the session (`admin_shutdown`, `crash_shutdown`,
/// `cannot_connect_now`, a connection exception). (A direct SQLite connection's errors
/// come as other I/O kinds, [`direct::to_sqlx`].)
pub fn lost(e: &sqlx::Error) -> bool {
    use std::io::ErrorKind as K;
    match e {
        sqlx::Error::Io(io) => matches!(
            io.kind(),
            K::ConnectionRefused
                | K::ConnectionReset
                | K::ConnectionAborted
                | K::BrokenPipe
                | K::UnexpectedEof
                | K::NotConnected
        ),
        sqlx::Error::Database(d) => d
            .code()
            .is_some_and(|c| crate::store::pgread::session_ended(&c)),
        _ => false,
    }
}

/// A 503 with `Retry-After` for a projection that is not built yet, or not in this
/// release's form yet (the writer builds it again when it opens the projections).
pub fn unbuilt() -> Problem {
    Problem::unavailable(
        "a projection this answer reads is not built yet, or not in this release's form yet \
         (`isir project status`; `isir project catch-up` builds it); try again later",
    )
    .retry_after(RETRY_AFTER_UNBUILT)
}

/// The problem of a failed read: a timeout, a full pool, a lost database connection or a
/// projection not built yet is a 503 with `Retry-After`, anything else a 500.
pub fn problem(e: sqlx::Error) -> Problem {
    if missing_table(&e) {
        return unbuilt();
    }
    if timed_out(&e) {
        crate::telemetry::read_timeout("statement");
        return Problem::unavailable(
            "the query ran past this server's time limit (api.statement_timeout_ms) and was stopped; \
             narrow it (a filter, a smaller limit) or try again later",
        )
        .retry_after(RETRY_AFTER_TIMEOUT);
    }
    if lost(&e) {
        return Problem::unavailable(
            "the database connection failed or the server is restarting; try again in a moment",
        )
        .retry_after(RETRY_AFTER_BUSY);
    }
    if matches!(e, sqlx::Error::PoolTimedOut) {
        crate::telemetry::read_timeout("pool");
        return Problem::unavailable(
            "every read connection is busy (api.max_connections); try again in a moment",
        )
        .retry_after(RETRY_AFTER_BUSY);
    }
    Problem::internal(e)
}

fn deadline(state: &ReadState) -> Instant {
    Instant::now() + state.opts.statement_timeout
}

/// Arms the limit on a SQLite connection of the read pool (PostgreSQL's is a session
/// setting of that pool).
async fn arm(state: &ReadState, c: &mut sqlx::SqliteConnection) -> Result<(), sqlx::Error> {
    if state.limited {
        let at = deadline(state);
        c.lock_handle()
            .await?
            .set_progress_handler(1_000, move || Instant::now() < at);
    }
    Ok(())
}

/// Gives the next statements of a long read (a whole-result stream, which runs one
/// statement a page) the full time limit again; PostgreSQL limits each statement by
/// itself.
pub async fn rearm(state: &ReadState, tx: &mut Tx) -> Result<(), Problem> {
    match tx {
        Tx::Sqlite(t) => arm(state, t).await.map_err(problem),
        Tx::SqliteSingle(c) => arm(state, c).await.map_err(problem),
        Tx::Direct(c) => {
            c.limit(deadline(state));
            Ok(())
        }
        _ => Ok(()),
    }
}

/// A read transaction (one snapshot), time-limited.
pub async fn begin(state: &ReadState) -> Result<Tx, Problem> {
    let mut tx = Tx::begin_read(&state.store).await.map_err(problem)?;
    if let Tx::Sqlite(t) = &mut tx {
        arm(state, t).await.map_err(problem)?;
    }
    Ok(tx)
}

/// One connection without a transaction (a one-statement answer), time-limited; on a
/// SQLite file a direct connection, which runs on the calling thread. On PostgreSQL
/// its statements are planned as `plans` says.
pub async fn single(state: &ReadState, plans: Plans) -> Result<Tx, Problem> {
    match &state.direct {
        Some(pool) => {
            let c = pool.get().map_err(|e| problem(direct::to_sqlx(e)))?;
            c.limit(deadline(state));
            Ok(Tx::Direct(c))
        }
        None => {
            if let Some(pool) = &state.pg {
                return Ok(Tx::PgRead(pool.get(plans).await.map_err(problem)?));
            }
            let mut tx = Tx::single(&state.store).await.map_err(problem)?;
            if let Tx::SqliteSingle(c) = &mut tx {
                arm(state, c).await.map_err(problem)?;
            }
            Ok(tx)
        }
    }
}

/// A read transaction for many statements in one snapshot; direct on a SQLite file
/// (the caller runs it off the async threads), time-limited as a whole.
pub async fn many(state: &ReadState) -> Result<Tx, Problem> {
    match &state.direct {
        Some(pool) => {
            let mut c = pool.get().map_err(|e| problem(direct::to_sqlx(e)))?;
            c.limit(deadline(state));
            c.begin().map_err(|e| problem(direct::to_sqlx(e)))?;
            Ok(Tx::Direct(c))
        }
        None => begin(state).await,
    }
}

/// A list page's reads: on PostgreSQL one statement, its own snapshot, without a
/// transaction (no BEGIN, SET TRANSACTION and COMMIT round trips); elsewhere [`many`]
/// (on a SQLite file the tables' version and the page read in one snapshot, on a
/// direct connection the caller runs in place: a page is a few index walks of at most
/// `limit + 1` rows).
pub async fn page(state: &ReadState, plans: Plans) -> Result<Tx, Problem> {
    match state.store {
        crate::store::Store::Postgres(_) => single(state, plans).await,
        _ => many(state).await,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::{Error, ErrorKind};

    /// What a failed read answers, by the failure (the statuses of docs: a lost
    /// connection and a full pool pass, 503 with `Retry-After`; anything unknown is ours,
    /// a 500 without one).
    #[test]
    fn a_lost_connection_is_a_503_and_anything_else_a_500() {
        for kind in [
            ErrorKind::ConnectionRefused,
            ErrorKind::ConnectionReset,
            ErrorKind::BrokenPipe,
            ErrorKind::UnexpectedEof,
        ] {
            let p = problem(sqlx::Error::Io(Error::new(kind, "gone")));
            assert_eq!((p.status, p.retry_after), (503, Some(1)), "{kind:?}");
        }
        let p = problem(sqlx::Error::Io(Error::new(ErrorKind::TimedOut, "slow")));
        assert_eq!((p.status, p.retry_after), (503, Some(5)));
        let p = problem(sqlx::Error::PoolTimedOut);
        assert_eq!((p.status, p.retry_after), (503, Some(1)));
        // PostgreSQL ending the session (SQLSTATE from its appendix A): admin_shutdown,
        // crash_shutdown, cannot_connect_now, a connection exception.
        for code in ["57P01", "57P02", "57P03", "08006"] {
            let p = problem(pg(code));
            assert_eq!((p.status, p.retry_after), (503, Some(1)), "{code}");
        }
        for e in [
            sqlx::Error::Io(Error::new(ErrorKind::PermissionDenied, "no")),
            sqlx::Error::Protocol("unexpected message".into()),
            sqlx::Error::RowNotFound,
            // unique_violation, syntax_error: ours.
            pg("23505"),
            pg("42601"),
        ] {
            let p = problem(e);
            assert_eq!((p.status, p.retry_after), (500, None), "{}", p.detail);
        }
    }

    /// A database error with this SQLSTATE (also the privacy module's tests').
    pub(crate) fn pg(code: &'static str) -> sqlx::Error {
        #[derive(Debug)]
        struct Db(&'static str);
        impl std::fmt::Display for Db {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "error {}", self.0)
            }
        }
        impl std::error::Error for Db {}
        impl sqlx::error::DatabaseError for Db {
            fn message(&self) -> &str {
                "a database error"
            }
            fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
                Some(self.0.into())
            }
            fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
                self
            }
            fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
                self
            }
            fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
                self
            }
            fn kind(&self) -> sqlx::error::ErrorKind {
                sqlx::error::ErrorKind::Other
            }
        }
        sqlx::Error::Database(Box::new(Db(code)))
    }
}
