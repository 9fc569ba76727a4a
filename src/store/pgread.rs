//! The read side's PostgreSQL connections for one-statement answers (a case, a list
//! page, a search page): a pool of its own instead of sqlx's, because sqlx 0.8's pool
//! sends a round trip of its own (a `Sync` and its `ReadyForQuery`) when it hands a
//! connection out and another when it takes it back, so a one-statement read cost the
//! server three exchanges instead of one.
//!
//! Owns checking connections out and in. A connection goes back to the pool only when
//! its last statement ended with the server's answer (a success or a database error,
//! after which the connection is ready again); one whose statement was cut off (the
//! request dropped mid-statement) or whose link failed is closed. A statement that
//! finds a connection from the pool broken (the server restarted since it was last used)
//! runs once more on a new connection: these are reads of one statement, so running one
//! again changes nothing. It never writes: its sessions are the read side's (read-only
//! on `isir serve`, every statement under `statement_timeout`).
//!
//! A checkout says how its statements are planned ([`Plans`]): every read of the API
//! (lookups, list pages, the feed, name search) keeps a plan made once per connection.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How PostgreSQL plans the statements of a checkout: a session setting of the
/// connection (`plan_cache_mode`), so each kind has connections of its own; the permits
/// are shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plans {
    /// Planned once on a connection and the plan kept for every value
    /// (`force_generic_plan`): lookups by key, list pages, the feed and name search,
    /// whose every shape is an index walk in keyset or rank order whatever the values
    /// (the plan tests check the generic plans). PostgreSQL's default planned them again at every execution, as
    /// the generic plan's estimate for an unknown `LIMIT` never beat the custom one: a
    /// list page's planning cost more than its execution.
    Kept,
    /// PostgreSQL's default (`auto`): planned for the values while that pays. (No read
    /// of the API asks for it since name search walks its term table: a statement whose
    /// best plan depends on its values would.)
    PerValue,
}

impl Plans {
    fn slot(self) -> usize {
        match self {
            Plans::Kept => 0,
            Plans::PerValue => 1,
        }
    }
}

/// Idle connections to one PostgreSQL database, by [`Plans`], and the permits that bound
/// how many are out at once.
#[derive(Debug)]
pub struct Pool {
    opts: [PgConnectOptions; 2],
    idle: Mutex<[Vec<PgConnection>; 2]>,
    permits: Arc<Semaphore>,
    wait: Duration,
}

impl Pool {
    /// At most `max` connections with the options `opts` (made as they are needed); a
    /// checkout waits `wait` for one, then fails as sqlx's pool does
    /// ([`sqlx::Error::PoolTimedOut`]).
    pub fn new(opts: PgConnectOptions, max: u32, wait: Duration) -> Arc<Pool> {
        let kept = opts
            .clone()
            .options([("plan_cache_mode", "force_generic_plan")]);
        Arc::new(Pool {
            opts: [kept, opts],
            idle: Mutex::new([Vec::new(), Vec::new()]),
            permits: Arc::new(Semaphore::new(max.max(1) as usize)),
            wait,
        })
    }

    /// An idle connection whose statements are planned as `plans` says, or a new one.
    pub async fn get(self: &Arc<Self>, plans: Plans) -> Result<Conn, sqlx::Error> {
        let permit = tokio::time::timeout(self.wait, self.permits.clone().acquire_owned())
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)?
            .map_err(|_| sqlx::Error::PoolClosed)?;
        let idle = self.idle.lock().expect("pg read pool")[plans.slot()].pop();
        let (conn, reused) = match idle {
            Some(c) => (c, true),
            None => (self.connect(plans).await?, false),
        };
        Ok(Conn {
            conn: Some(conn),
            home: self.clone(),
            plans,
            _permit: permit,
            reused,
            clean: true,
        })
    }

    async fn connect(&self, plans: Plans) -> Result<PgConnection, sqlx::Error> {
        tokio::time::timeout(
            self.wait,
            PgConnection::connect_with(&self.opts[plans.slot()]),
        )
        .await
        .map_err(|_| sqlx::Error::PoolTimedOut)?
    }
}

/// Whether `e` says the connection itself is gone (its link failed, or the server
/// ended the session: `admin_shutdown`, `crash_shutdown`, a connection exception), as
/// opposed to a statement the server refused or stopped.
pub fn broken(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(d) => d.code().is_some_and(|c| session_ended(&c)),
        _ => false,
    }
}

/// Whether a PostgreSQL error code says the server ended or refused the session: a
/// connection exception (class 08), `admin_shutdown`, `crash_shutdown`,
/// `cannot_connect_now`.
pub fn session_ended(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03")
}

/// A checked-out connection; back to its pool when dropped, if its last statement ended
/// cleanly ([`Conn::answered`]).
#[derive(Debug)]
pub struct Conn {
    conn: Option<PgConnection>,
    home: Arc<Pool>,
    plans: Plans,
    _permit: OwnedSemaphorePermit,
    /// Taken from the pool (not made for this checkout) and not used since: a broken
    /// link found by its first statement is the server's restart, not this read's fault.
    reused: bool,
    /// No statement was cut off and the link did not fail.
    clean: bool,
}

impl Conn {
    /// Starts a statement: whether it may run once more on a new connection if it finds
    /// the link broken (the first statement of a connection from the pool). Until
    /// [`Conn::answered`], the connection counts as mid-statement: a future dropped in
    /// between leaves it so, and `Drop` closes it.
    pub fn start(&mut self) -> bool {
        self.clean = false;
        std::mem::replace(&mut self.reused, false)
    }

    /// The connection, for the statement between [`Conn::start`] and
    /// [`Conn::answered`].
    pub fn raw(&mut self) -> &mut PgConnection {
        self.conn.as_mut().expect("connection present until drop")
    }

    /// The statement ended with `r`: unless its link failed, the connection is ready
    /// again (after a database error sqlx reads up to the server's `ReadyForQuery`
    /// before the next statement).
    pub fn answered<T>(&mut self, r: &Result<T, sqlx::Error>) {
        self.clean = !matches!(r, Err(e) if broken(e));
    }

    /// Replaces a broken connection with a new one.
    pub async fn reconnect(&mut self) -> Result<(), sqlx::Error> {
        // (Until a new one is made the broken one stays, not clean: `Drop` closes it.)
        let c = self.home.connect(self.plans).await?;
        self.conn = Some(c);
        Ok(())
    }
}

/// Runs `$body` with `$c` the connection of the [`Conn`] `$conn`, once more on a new
/// connection when the first statement of a pooled connection finds it broken.
#[macro_export]
#[doc(hidden)]
macro_rules! pg_read {
    ($conn:expr, $c:ident => $body:expr) => {{
        loop {
            let retry = $conn.start();
            let r = {
                let $c = $conn.raw();
                $body
            };
            $conn.answered(&r);
            match r {
                Err(e) if retry && $crate::store::pgread::broken(&e) => $conn.reconnect().await?,
                r => break r,
            }
        }
    }};
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take()
            && self.clean
        {
            self.home.idle.lock().expect("pg read pool")[self.plans.slot()].push(c);
        }
        // (Otherwise the connection is dropped: its socket closes and the server ends the
        // session.)
    }
}
