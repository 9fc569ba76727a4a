//! Direct SQLite connections (rusqlite, the same bundled SQLite as sqlx) for the paths
//! where sqlx-sqlite's hand-off of every statement and row to a connection worker thread
//! costs more than the statement: the API's point lookups, the bulk reads of exports and
//! snapshots, and the bulk writes of a snapshot restore and a projection rebuild. A
//! statement here runs on the calling thread, so async callers keep to indexed, bounded
//! statements (a lookup, a keyset chunk, a batch of inserts).
//!
//! Owns opening connections to a SQLite file and pooling them. Its read connections are
//! opened read-only. Its write connections serve only bulk loads inside one
//! `BEGIN IMMEDIATE` transaction each: a restore, which checks the fencing epoch in it
//! like every writer, and a rebuild's steps, which write the builder's next version and
//! move its cursor with a compare-and-set.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use crate::store::Store;

/// How long a statement of a direct connection waits for a lock another connection holds.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// The file of a SQLite store, when it has one (not an in-memory database).
pub fn sqlite_file(store: &Store) -> Option<PathBuf> {
    match store {
        Store::Sqlite(p) => {
            let opts = p.connect_options();
            let f = opts.get_filename();
            let s = f.to_string_lossy();
            (!s.is_empty() && !s.contains(":memory:") && f.exists()).then(|| f.to_path_buf())
        }
        Store::Postgres(_) => None,
    }
}

/// Opens a connection to `path` with the store's settings: read-only, or read-write
/// with WAL, foreign keys and `synchronous = NORMAL`; the same 32 MiB page cache as the
/// sqlx connections. A write connection here carries bulk transactions, so it lets the
/// WAL grow to 64 MiB (16 384 pages) before it checkpoints instead of SQLite's 4 MiB:
/// each checkpoint copies pages into the file and syncs it, and a rebuild committing
/// every few thousand rows checkpointed every other commit, rewriting the same b-tree
/// pages each time (13 % of a timeline rebuild's time).
///
/// `mmap` bytes of the file are read through a memory map (`PRAGMA mmap_size`) instead
/// of being copied page by page from the OS's cache into this connection's: 0 for none.
fn open(path: &Path, write: bool, mmap: u64) -> rusqlite::Result<Connection> {
    let flags = if write {
        OpenFlags::SQLITE_OPEN_READ_WRITE
    } else {
        OpenFlags::SQLITE_OPEN_READ_ONLY
    };
    let c = Connection::open_with_flags(path, flags | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
    c.busy_timeout(BUSY_TIMEOUT)?;
    if write {
        c.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; \
             PRAGMA wal_autocheckpoint = 16384",
        )?;
    }
    c.execute_batch(&format!("PRAGMA cache_size = {}", crate::store::CACHE_SIZE))?;
    if mmap > 0 {
        c.execute_batch(&format!("PRAGMA mmap_size = {mmap}"))?;
    }
    c.set_prepared_statement_cache_capacity(64);
    Ok(c)
}

/// Idle connections to one file, reused: read-only ones across API requests, and the
/// one write connection of a rebuild across its steps (so its page cache stays warm).
#[derive(Debug)]
pub struct Pool {
    path: PathBuf,
    write: bool,
    idle: Mutex<Vec<Connection>>,
    keep: usize,
    mmap: u64,
}

impl Pool {
    /// A pool of read-only connections for `store` if it is a SQLite file; `keep` idle
    /// connections are kept; each maps up to `mmap` bytes of the file (the API's reads:
    /// `api.sqlite_mmap_mib`).
    pub fn for_store(store: &Store, keep: usize, mmap: u64) -> Option<Arc<Pool>> {
        Self::new(store, false, keep, mmap)
    }

    /// One read-write connection for `store` if it is a SQLite file, kept between uses.
    pub fn writer_for(store: &Store) -> Option<Arc<Pool>> {
        Self::new(store, true, 1, 0)
    }

    fn new(store: &Store, write: bool, keep: usize, mmap: u64) -> Option<Arc<Pool>> {
        sqlite_file(store).map(|path| {
            Arc::new(Pool {
                path,
                write,
                idle: Mutex::new(Vec::new()),
                keep: keep.max(1),
                mmap,
            })
        })
    }

    /// An idle connection, or a new one.
    pub fn get(self: &Arc<Self>) -> rusqlite::Result<Conn> {
        let idle = self.idle.lock().expect("direct pool").pop();
        let c = match idle {
            Some(c) => c,
            None => open(&self.path, self.write, self.mmap)?,
        };
        Ok(Conn {
            conn: Some(c),
            home: Some(self.clone()),
            in_tx: false,
        })
    }

    fn put(&self, c: Connection) {
        let mut idle = self.idle.lock().expect("direct pool");
        if idle.len() < self.keep {
            idle.push(c);
        }
    }
}

/// A direct connection, returned to its pool (if any) when dropped; a read transaction
/// still open then is rolled back first.
#[derive(Debug)]
pub struct Conn {
    conn: Option<Connection>,
    home: Option<Arc<Pool>>,
    in_tx: bool,
}

impl Conn {
    /// An unpooled read-only connection to `path`.
    pub fn open(path: &Path) -> rusqlite::Result<Conn> {
        Self::unpooled(path, false)
    }

    /// An unpooled read-write connection to `path`.
    pub fn open_write(path: &Path) -> rusqlite::Result<Conn> {
        Self::unpooled(path, true)
    }

    fn unpooled(path: &Path, write: bool) -> rusqlite::Result<Conn> {
        Ok(Conn {
            conn: Some(open(path, write, 0)?),
            home: None,
            in_tx: false,
        })
    }

    /// Starts a write transaction, taking the write lock now.
    pub fn begin_immediate(&mut self) -> rusqlite::Result<()> {
        self.conn().execute_batch("BEGIN IMMEDIATE")?;
        self.in_tx = true;
        Ok(())
    }

    pub fn conn(&self) -> &Connection {
        self.conn.as_ref().expect("connection present until drop")
    }

    /// Starts a read transaction: the statements that follow see one snapshot.
    pub fn begin(&mut self) -> rusqlite::Result<()> {
        self.conn().execute_batch("BEGIN")?;
        // A deferred transaction takes its snapshot at the first read: read now.
        self.conn()
            .query_row("SELECT COUNT(*) FROM sqlite_master", [], |_| Ok(()))?;
        self.in_tx = true;
        Ok(())
    }

    /// Interrupts every statement of this connection that runs past `deadline` (the read
    /// side's time limit): it fails then as a timeout ([`to_sqlx`]). Until the
    /// connection is dropped or limited again.
    pub fn limit(&self, deadline: std::time::Instant) {
        self.conn()
            .progress_handler(1_000, Some(move || std::time::Instant::now() >= deadline));
    }

    /// Ends the read transaction, if one is open.
    pub fn commit(&mut self) -> rusqlite::Result<()> {
        if self.in_tx {
            self.in_tx = false;
            self.conn().execute_batch("COMMIT")?;
        }
        Ok(())
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take() {
            // A time limit ends with its use (and must not stop the rollback).
            c.progress_handler(0, None::<fn() -> bool>);
            if self.in_tx && c.execute_batch("ROLLBACK").is_err() {
                return; // not returned to the pool in an unknown state
            }
            if let Some(home) = &self.home {
                home.put(c);
            }
        }
    }
}

/// Runs one of the store's action SELECTs (`ACTIONS_AFTER`,
/// `ACTIONS_BY_CASE`) on `c`, the notes decoded ([`super::notes`]).
pub fn actions(
    c: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<Vec<crate::source::Action>, sqlx::Error> {
    use super::notes::{AtRest, Unpacker};
    let mut st = c.prepare_cached(sql).map_err(to_sqlx)?;
    let rows = st
        .query_map(params, |r| {
            let a = crate::source::Action {
                id: r.get(0)?,
                created: r.get(1)?,
                published: r.get(2)?,
                document_url: r.get(3)?,
                case_number: r.get(4)?,
                type_code: r.get(5)?,
                type_name: r.get(6)?,
                section: r.get(7)?,
                number_in_section: r.get(8)?,
                note: None,
            };
            let n = AtRest {
                text: r.get(9)?,
                z: r.get(10)?,
                dict: r.get(11)?,
            };
            Ok((a, n))
        })
        .map_err(to_sqlx)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(to_sqlx)?;
    let mut u = Unpacker::for_direct(c, rows.iter().map(|(_, n)| &n.dict)).map_err(to_sqlx)??;
    rows.into_iter()
        .map(|(mut a, n)| {
            a.note = u.unpack(a.id, n)?;
            Ok(a)
        })
        .collect()
}

/// A rusqlite error in the form the store's callers handle (as a driver I/O failure).
pub fn to_sqlx(e: rusqlite::Error) -> sqlx::Error {
    // An interrupted statement ran past its time limit (`Conn::limit`): a timeout.
    let kind = match &e {
        rusqlite::Error::SqliteFailure(f, _)
            if f.code == rusqlite::ErrorCode::OperationInterrupted =>
        {
            std::io::ErrorKind::TimedOut
        }
        _ => std::io::ErrorKind::Other,
    };
    sqlx::Error::Io(std::io::Error::new(kind, format!("sqlite: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The API's page reads map what `api.sqlite_mmap_mib` asks: SQLite caps
    /// `mmap_size` at its build's `SQLITE_MAX_MMAP_SIZE` without an error (2 GiB unless
    /// `.cargo/config.toml` raised it), so a build that lost the flag shows here.
    #[test]
    fn read_connections_map_what_is_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.db");
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (x)")
            .unwrap();
        let mapped = |asked: u64| -> i64 {
            let c = open(&path, false, asked).unwrap();
            c.query_row("PRAGMA mmap_size", [], |r| r.get(0)).unwrap()
        };
        let tib = 1i64 << 40;
        assert_eq!(mapped(1 << 40), tib, "the whole of a large file");
        assert_eq!(
            mapped(crate::config::ApiSettings::default().sqlite_mmap_mib << 20),
            tib
        );
        assert_eq!(mapped(0), 0);
        // A store's writer maps nothing, whatever its readers do.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let store = rt
            .block_on(Store::connect(&format!("sqlite://{}", path.display()), 1))
            .unwrap();
        let pooled = |p: Arc<Pool>| -> i64 {
            let c = p.get().unwrap();
            c.conn()
                .query_row("PRAGMA mmap_size", [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(pooled(Pool::for_store(&store, 1, 1 << 40).unwrap()), tib);
        assert_eq!(pooled(Pool::writer_for(&store).unwrap()), 0);
    }
}
