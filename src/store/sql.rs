//! A thin layer over the two back ends for the projection builders: a transaction that
//! runs the same SQL (with `$N` placeholders) on SQLite or PostgreSQL, binding a small
//! set of value types, and multi-row upserts.
//!
//! Owns no schema and no logic: builders say what to write.

use sqlx::{Postgres, Row, Sqlite, Transaction};

use crate::store::{Store, direct, pgread};

/// A value to bind.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    I(Option<i64>),
    T(Option<String>),
    B(bool),
    /// Bytes (a compressed note, a dictionary).
    Z(Option<Vec<u8>>),
}

impl From<i64> for Val {
    fn from(v: i64) -> Self {
        Val::I(Some(v))
    }
}
impl From<Option<i64>> for Val {
    fn from(v: Option<i64>) -> Self {
        Val::I(v)
    }
}
impl From<String> for Val {
    fn from(v: String) -> Self {
        Val::T(Some(v))
    }
}
impl From<&str> for Val {
    fn from(v: &str) -> Self {
        Val::T(Some(v.to_string()))
    }
}
impl From<Option<String>> for Val {
    fn from(v: Option<String>) -> Self {
        Val::T(v)
    }
}
impl From<Option<&str>> for Val {
    fn from(v: Option<&str>) -> Self {
        Val::T(v.map(str::to_string))
    }
}
impl From<bool> for Val {
    fn from(v: bool) -> Self {
        Val::B(v)
    }
}

pub enum Tx {
    Sqlite(Transaction<'static, Sqlite>),
    Postgres(Transaction<'static, Postgres>),
    /// No transaction: each statement on its own (one-statement reads).
    SqliteSingle(sqlx::pool::PoolConnection<Sqlite>),
    PostgresSingle(sqlx::pool::PoolConnection<Postgres>),
    /// A rusqlite connection (see [`crate::store::direct`]): read-only, in a read
    /// transaction or not, or a bulk write transaction. Its statements run on the
    /// calling thread.
    Direct(direct::Conn),
    /// A PostgreSQL connection of the read side's own pool ([`crate::store::pgread`]),
    /// no transaction: each statement on its own, run again on a new connection if the
    /// pooled one turns out broken.
    PgRead(pgread::Conn),
}

/// Prepares `sql` on a direct connection and binds `binds` as sqlx would: `$N` by name
/// (SQLite numbers named parameters in order of appearance, not by their digits), `?`
/// by position.
fn direct_prepare<'c>(
    d: &'c direct::Conn,
    sql: &str,
    binds: &[Val],
) -> Result<rusqlite::CachedStatement<'c>, sqlx::Error> {
    let mut st = d.conn().prepare_cached(sql).map_err(direct::to_sqlx)?;
    let named = sql.contains('$');
    for (i, b) in binds.iter().enumerate() {
        let idx = if named {
            st.parameter_index(&format!("${}", i + 1))
                .map_err(direct::to_sqlx)?
                .unwrap_or(i + 1)
        } else {
            i + 1
        };
        st.raw_bind_parameter(idx, b).map_err(direct::to_sqlx)?;
    }
    Ok(st)
}

impl rusqlite::ToSql for Val {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        match self {
            Val::I(v) => v.to_sql(),
            Val::T(v) => v.to_sql(),
            Val::B(v) => v.to_sql(),
            Val::Z(v) => v.to_sql(),
        }
    }
}

/// Runs `$body` with `$c` bound to the connection, whatever the variant.
macro_rules! on_conn {
    ($self:expr, $c:ident => $body:expr) => {
        match $self {
            Tx::Sqlite(t) => {
                let $c = &mut **t;
                $body
            }
            Tx::SqliteSingle(t) => {
                let $c = &mut **t;
                $body
            }
            Tx::Postgres(t) => {
                let $c = &mut **t;
                $body
            }
            Tx::PostgresSingle(t) => {
                let $c = &mut **t;
                $body
            }
            Tx::Direct(_) | Tx::PgRead(_) => {
                unreachable!("direct and pooled read connections are matched first")
            }
        }
    };
}

/// Binds the [`Val`]s `$binds` to the sqlx query `$q` in order (exported for the plan
/// tests, which bind the statements the read side runs).
#[doc(hidden)]
#[macro_export]
macro_rules! bind_all {
    ($q:expr, $binds:expr) => {{
        let mut q = $q;
        for b in $binds {
            q = match b {
                $crate::store::sql::Val::I(v) => q.bind(*v),
                $crate::store::sql::Val::T(v) => q.bind(v.clone()),
                $crate::store::sql::Val::B(v) => q.bind(*v),
                $crate::store::sql::Val::Z(v) => q.bind(v.clone()),
            };
        }
        q
    }};
}

impl Tx {
    /// A write transaction (the write lock taken up front on SQLite).
    pub async fn begin(store: &Store) -> Result<Tx, sqlx::Error> {
        Ok(match store {
            Store::Sqlite(p) => Tx::Sqlite(p.begin_with("BEGIN IMMEDIATE").await?),
            Store::Postgres(p) => Tx::Postgres(p.begin().await?),
        })
    }

    /// A read transaction (one consistent snapshot on both back ends).
    pub async fn begin_read(store: &Store) -> Result<Tx, sqlx::Error> {
        Ok(match store {
            Store::Sqlite(p) => Tx::Sqlite(p.begin().await?),
            Store::Postgres(p) => {
                let mut t = p.begin().await?;
                sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    .execute(&mut *t)
                    .await?;
                Tx::Postgres(t)
            }
        })
    }

    /// No transaction, for a read of one statement (already atomic): saves the round
    /// trips of BEGIN and COMMIT on the hot read paths.
    pub async fn single(store: &Store) -> Result<Tx, sqlx::Error> {
        Ok(match store {
            Store::Sqlite(p) => Tx::SqliteSingle(p.acquire().await?),
            Store::Postgres(p) => Tx::PostgresSingle(p.acquire().await?),
        })
    }

    /// A read transaction on a direct connection when the store is a SQLite file (bulk
    /// reads: exports, snapshots), else [`Tx::begin_read`].
    pub async fn begin_read_direct(store: &Store) -> Result<Tx, sqlx::Error> {
        match direct::sqlite_file(store) {
            Some(path) => {
                let mut c = direct::Conn::open(&path).map_err(direct::to_sqlx)?;
                c.begin().map_err(direct::to_sqlx)?;
                Ok(Tx::Direct(c))
            }
            None => Tx::begin_read(store).await,
        }
    }

    /// A write transaction on a direct connection when the store is a SQLite file (bulk
    /// loads: snapshot restore), else [`Tx::begin`]. The caller checks the fencing epoch
    /// inside it, as with any write.
    pub async fn begin_direct(store: &Store) -> Result<Tx, sqlx::Error> {
        match direct::Pool::writer_for(store) {
            Some(pool) => Tx::begin_in(&pool),
            None => Tx::begin(store).await,
        }
    }

    /// A write transaction on the connection of `pool` (a [`direct::Pool::writer_for`]).
    pub fn begin_in(pool: &std::sync::Arc<direct::Pool>) -> Result<Tx, sqlx::Error> {
        let mut c = pool.get().map_err(direct::to_sqlx)?;
        c.begin_immediate().map_err(direct::to_sqlx)?;
        Ok(Tx::Direct(c))
    }

    pub async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            Tx::Sqlite(t) => t.commit().await,
            Tx::Postgres(t) => t.commit().await,
            Tx::SqliteSingle(_) | Tx::PostgresSingle(_) | Tx::PgRead(_) => Ok(()),
            Tx::Direct(mut c) => c.commit().map_err(direct::to_sqlx),
        }
    }

    /// The PostgreSQL connection under this transaction (for `COPY`), if it is one.
    pub fn postgres_conn(&mut self) -> Option<&mut sqlx::PgConnection> {
        match self {
            Tx::Postgres(t) => Some(&mut **t),
            Tx::PostgresSingle(c) => Some(&mut **c),
            _ => None,
        }
    }

    /// Whether its statements run on a direct connection, on the calling thread.
    pub fn is_direct(&self) -> bool {
        matches!(self, Tx::Direct(_))
    }

    pub fn is_postgres(&self) -> bool {
        matches!(
            self,
            Tx::Postgres(_) | Tx::PostgresSingle(_) | Tx::PgRead(_)
        )
    }

    /// ` FOR UPDATE` on PostgreSQL (SQLite holds the write lock already).
    pub fn lock(&self) -> &'static str {
        if self.is_postgres() {
            " FOR UPDATE"
        } else {
            ""
        }
    }

    pub async fn exec(&mut self, sql: &str, binds: &[Val]) -> Result<u64, sqlx::Error> {
        if let Tx::Direct(d) = self {
            let mut st = direct_prepare(d, sql, binds)?;
            return st.raw_execute().map(|n| n as u64).map_err(direct::to_sqlx);
        }
        if let Tx::PgRead(c) = self {
            return crate::pg_read!(c, c => bind_all!(sqlx::query(sql), binds)
                .execute(c)
                .await
                .map(|r| r.rows_affected()));
        }
        Ok(on_conn!(self, c => bind_all!(sqlx::query(sql), binds)
            .execute(c)
            .await?
            .rows_affected()))
    }

    /// The first column of every row, as text.
    pub async fn texts(&mut self, sql: &str, binds: &[Val]) -> Result<Vec<String>, sqlx::Error> {
        if let Tx::Direct(d) = self {
            let mut st = direct_prepare(d, sql, binds)?;
            let mut rows = st.raw_query();
            let mut out = Vec::new();
            while let Some(r) = rows.next().map_err(direct::to_sqlx)? {
                out.push(r.get::<_, String>(0).map_err(direct::to_sqlx)?);
            }
            return Ok(out);
        }
        if let Tx::PgRead(c) = self {
            let rows = crate::pg_read!(c, c => bind_all!(sqlx::query(sql), binds)
                .fetch_all(c)
                .await)?;
            return rows.iter().map(|r| r.try_get::<String, _>(0)).collect();
        }
        on_conn!(self, c => bind_all!(sqlx::query(sql), binds)
            .fetch_all(c)
            .await?
            .iter()
            .map(|r| r.try_get::<String, _>(0))
            .collect())
    }

    /// Every row, each made into a `T` by `f` from its cells ([`Cells`], borrowed from
    /// the row: no copy of a text the row holds).
    pub async fn rows_with<T>(
        &mut self,
        sql: &str,
        binds: &[Val],
        f: impl Fn(&dyn Cells) -> Result<T, sqlx::Error>,
    ) -> Result<Vec<T>, sqlx::Error> {
        if let Tx::Direct(d) = self {
            let mut st = direct_prepare(d, sql, binds)?;
            let mut rows = st.raw_query();
            let mut out = Vec::new();
            while let Some(r) = rows.next().map_err(direct::to_sqlx)? {
                out.push(f(r)?);
            }
            return Ok(out);
        }
        if let Tx::PgRead(c) = self {
            let rows = crate::pg_read!(c, c => bind_all!(sqlx::query(sql), binds)
                .fetch_all(c)
                .await)?;
            return rows.iter().map(|r| f(r)).collect();
        }
        on_conn!(self, c => bind_all!(sqlx::query(sql), binds)
            .fetch_all(c)
            .await?
            .iter()
            .map(|r| f(r))
            .collect())
    }

    /// The first column of the first row, as a number.
    pub async fn int(&mut self, sql: &str, binds: &[Val]) -> Result<Option<i64>, sqlx::Error> {
        if let Tx::Direct(d) = self {
            let mut st = direct_prepare(d, sql, binds)?;
            let mut rows = st.raw_query();
            return match rows.next().map_err(direct::to_sqlx)? {
                Some(r) => r.get::<_, i64>(0).map(Some).map_err(direct::to_sqlx),
                None => Ok(None),
            };
        }
        if let Tx::PgRead(c) = self {
            let row = crate::pg_read!(c, c => bind_all!(sqlx::query(sql), binds)
                .fetch_optional(c)
                .await)?;
            return row.map(|r| r.try_get::<i64, _>(0)).transpose();
        }
        on_conn!(self, c => bind_all!(sqlx::query(sql), binds)
            .fetch_optional(c)
            .await?
            .map(|r| r.try_get::<i64, _>(0))
            .transpose())
    }

    /// `INSERT ... ON CONFLICT (key) DO UPDATE SET every other column`, in chunks.
    pub async fn upsert(
        &mut self,
        table: &str,
        cols: &[&str],
        key: &[&str],
        rows: &[Vec<Val>],
    ) -> Result<(), sqlx::Error> {
        let update: Vec<String> = cols
            .iter()
            .filter(|c| !key.contains(c))
            .map(|c| format!("{c} = excluded.{c}"))
            .collect();
        let tail = if update.is_empty() {
            format!(" ON CONFLICT ({}) DO NOTHING", key.join(", "))
        } else {
            format!(
                " ON CONFLICT ({}) DO UPDATE SET {}",
                key.join(", "),
                update.join(", ")
            )
        };
        self.insert_with(table, cols, rows, &tail).await
    }

    /// Plain multi-row inserts, in chunks; `tail` follows the VALUES list.
    pub async fn insert_with(
        &mut self,
        table: &str,
        cols: &[&str],
        rows: &[Vec<Val>],
        tail: &str,
    ) -> Result<(), sqlx::Error> {
        if let Tx::Direct(d) = self {
            // On the calling thread a prepared one-row statement is the fastest form.
            let sql = format!(
                "INSERT INTO {table} ({}) VALUES ({}){tail}",
                cols.join(", "),
                vec!["?"; cols.len()].join(",")
            );
            let mut st = d.conn().prepare_cached(&sql).map_err(direct::to_sqlx)?;
            for r in rows {
                for (i, v) in r.iter().enumerate() {
                    st.raw_bind_parameter(i + 1, v).map_err(direct::to_sqlx)?;
                }
                st.raw_execute().map_err(direct::to_sqlx)?;
            }
            return Ok(());
        }
        // Small statements: binding cost grows faster than linearly with parameters.
        let per = (if self.is_postgres() { 6_000 } else { 8_000 } / cols.len()).clamp(1, 500);
        for chunk in rows.chunks(per) {
            let mut sql = format!("INSERT INTO {table} ({}) VALUES ", cols.join(", "));
            let mut n = 0;
            for (i, _) in chunk.iter().enumerate() {
                if i > 0 {
                    sql.push(',');
                }
                sql.push('(');
                for j in 0..cols.len() {
                    if j > 0 {
                        sql.push(',');
                    }
                    n += 1;
                    if self.is_postgres() {
                        sql.push('$');
                        sql.push_str(&n.to_string());
                    } else {
                        // Anonymous parameters: sqlx-sqlite resolves `$N` names one by one,
                        // which grows faster than linearly in long statements.
                        sql.push('?');
                    }
                }
                sql.push(')');
            }
            sql.push_str(tail);
            let binds: Vec<Val> = chunk.iter().flatten().cloned().collect();
            self.exec(&sql, &binds).await?;
        }
        Ok(())
    }
}

/// `$start, $start+1, ...` for an IN list of `n` values (`?` on SQLite, where the list
/// must then be the statement's only parameters).
pub fn placeholders(start: usize, n: usize) -> String {
    (start..start + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(",")
}

impl Tx {
    /// Placeholders for an IN list that holds all of a statement's parameters.
    pub fn list(&self, n: usize) -> String {
        if self.is_postgres() {
            placeholders(1, n)
        } else {
            vec!["?"; n].join(",")
        }
    }

    /// Placeholders for `rows` tuples of `width` values, `(…),(…)`, that hold all of a
    /// statement's parameters (a `VALUES` list to match row values against).
    pub fn tuples(&self, rows: usize, width: usize) -> String {
        (0..rows)
            .map(|r| {
                let inner = if self.is_postgres() {
                    placeholders(1 + r * width, width)
                } else {
                    vec!["?"; width].join(",")
                };
                format!("({inner})")
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// A row's cells by index, as [`Tx::rows_with`] hands them over: a text or an integer,
/// `None` for NULL.
pub trait Cells {
    fn text(&self, i: usize) -> Result<Option<&str>, sqlx::Error>;
    fn int(&self, i: usize) -> Result<Option<i64>, sqlx::Error>;
}

impl Cells for rusqlite::Row<'_> {
    fn text(&self, i: usize) -> Result<Option<&str>, sqlx::Error> {
        use rusqlite::types::ValueRef;
        match self.get_ref(i).map_err(direct::to_sqlx)? {
            ValueRef::Null => Ok(None),
            v => v
                .as_str()
                .map(Some)
                .map_err(|e| sqlx::Error::Decode(Box::new(e))),
        }
    }
    fn int(&self, i: usize) -> Result<Option<i64>, sqlx::Error> {
        self.get::<_, Option<i64>>(i).map_err(direct::to_sqlx)
    }
}

impl Cells for sqlx::sqlite::SqliteRow {
    fn text(&self, i: usize) -> Result<Option<&str>, sqlx::Error> {
        self.try_get::<Option<&str>, _>(i)
    }
    fn int(&self, i: usize) -> Result<Option<i64>, sqlx::Error> {
        self.try_get::<Option<i64>, _>(i)
    }
}

impl Cells for sqlx::postgres::PgRow {
    fn text(&self, i: usize) -> Result<Option<&str>, sqlx::Error> {
        self.try_get::<Option<&str>, _>(i)
    }
    fn int(&self, i: usize) -> Result<Option<i64>, sqlx::Error> {
        self.try_get::<Option<i64>, _>(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `$N` binds the N-th value wherever it stands in the text, as with sqlx.
    #[tokio::test]
    async fn direct_binds_dollar_parameters_by_number() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute_batch("CREATE TABLE t (a TEXT, b INTEGER)")
            .unwrap();
        let mut c = direct::Conn::open_write(&path).unwrap();
        c.begin_immediate().unwrap();
        let mut tx = Tx::Direct(c);
        tx.exec(
            "INSERT INTO t (b, a) VALUES ($2, $1)",
            &["x".into(), 7i64.into()],
        )
        .await
        .unwrap();
        tx.insert_with("t", &["a", "b"], &[vec!["y".into(), 8i64.into()]], "")
            .await
            .unwrap();
        assert_eq!(
            tx.texts(
                "SELECT a || '/' || b FROM t WHERE b = $2 AND a = $1",
                &["x".into(), 7i64.into()]
            )
            .await
            .unwrap(),
            vec!["x/7".to_string()]
        );
        assert_eq!(
            tx.int("SELECT b FROM t WHERE a = ?", &["y".into()])
                .await
                .unwrap(),
            Some(8)
        );
        assert_eq!(
            tx.int("SELECT b FROM t WHERE a = ?", &["z".into()])
                .await
                .unwrap(),
            None
        );
        tx.commit().await.unwrap();
        let n: i64 = rusqlite::Connection::open(&path)
            .unwrap()
            .query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 2);
    }
}
