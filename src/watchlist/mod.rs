//! Watchlists: named sets of watched subjects (IČOs, birth numbers, case numbers) with
//! the roles to watch, read by creditors through their change feed (`feed`) and pushed
//! to a webhook by the notifier (`notify`, `deliver`).
//!
//! Owns the `watchlists` and `watch_entries` tables: operators create, change and remove
//! lists (`isir watch`, the admin listener); the notifier moves a list's cursor and
//! delivery state. It reads the projections (`parties`, `timeline`) and never the
//! replica's `actions`; it never writes the replica or a projection, and nothing on the
//! writer's path waits for it.

pub mod admin;
pub mod deliver;
pub mod entries;
pub mod feed;
pub mod notify;
pub mod target;

use std::collections::BTreeSet;

use base64::Engine;
use serde::Serialize;

use crate::store::sql::{Tx, Val};
use crate::store::{Store, now_ms};
pub use entries::{BadLine, Entry, Kind};
pub use target::Policy;

/// Entries a list may hold.
pub const MAX_ENTRIES: usize = 100_000;

/// Which parties of a case a list watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Roles {
    /// The debtor only: a case against a watched subject.
    Debtor,
    /// Any party: debtor, creditor, petitioning creditor, administrator.
    All,
}

impl Roles {
    pub fn as_str(self) -> &'static str {
        match self {
            Roles::Debtor => "debtor",
            Roles::All => "all",
        }
    }
    pub fn parse(s: &str) -> Option<Roles> {
        match s {
            "debtor" => Some(Roles::Debtor),
            "all" => Some(Roles::All),
            _ => None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("{0}")]
    Invalid(String),
    #[error("{} bad entries, nothing was imported: {}", .0.len(), lines(.0))]
    BadLines(Vec<BadLine>),
    #[error("a watchlist named {0:?} exists")]
    Exists(String),
    #[error("no watchlist named {0:?}")]
    NotFound(String),
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
}

fn lines(b: &[BadLine]) -> String {
    b.iter()
        .take(20)
        .map(|l| {
            if l.line > 0 {
                format!("line {}: {}", l.line, l.error)
            } else {
                l.error.clone()
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
        + if b.len() > 20 { "; ..." } else { "" }
}

/// A list as stored, without its secrets.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Watchlist {
    pub name: String,
    /// `debtor` or `all`.
    pub roles: String,
    pub webhook_url: Option<String>,
    /// Creation time (RFC 3339).
    #[serde(serialize_with = "crate::store::rfc3339::ms")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: i64,
    /// The projection watermark when it was created: its feed starts after it.
    pub created_watermark: i64,
    pub entries: i64,
    /// The feed position delivered to the webhook (the `after` of the next delivery).
    pub cursor: i64,
    pub delivered_batches: i64,
    pub delivered_events: i64,
    #[serde(serialize_with = "crate::store::rfc3339::opt_ms")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub last_delivered_at: Option<i64>,
    /// Since when the batch now pending has failed.
    #[serde(serialize_with = "crate::store::rfc3339::opt_ms")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub failing_since: Option<i64>,
    /// 1 when it has failed for longer than `watch.failing_after_secs`.
    pub failing: i64,
    pub last_error: Option<String>,
    #[serde(serialize_with = "crate::store::rfc3339::opt_ms")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub last_attempt_at: Option<i64>,
    /// Whether a previous secret still signs beside the current one (rotation).
    pub rotating: bool,
}

const LIST_COLUMNS: &str = "name, roles, webhook_url, created_at, created_watermark, entries, cursor, \
     delivered_batches, delivered_events, last_delivered_at, failing_since, failing, last_error, \
     last_attempt_at, (previous_secret IS NOT NULL AND COALESCE(previous_until, 0) > $1) AS rotating";

/// A list's entries counted by kind, as `isir watch show` and the admin route report them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ByKind {
    pub ico: usize,
    pub rc: usize,
    pub case: usize,
}

impl ByKind {
    pub fn of(entries: &[Entry]) -> ByKind {
        let mut b = ByKind::default();
        for e in entries {
            match e.kind {
                Kind::Ico => b.ico += 1,
                Kind::Rc => b.rc += 1,
                Kind::Case => b.case += 1,
            }
        }
        b
    }
}

/// What a new list is made of.
#[derive(Debug, Clone)]
pub struct NewList {
    pub name: String,
    pub roles: Roles,
    pub webhook_url: Option<String>,
    /// `whsec_` + base64; generated when absent and a webhook is set.
    pub secret: Option<String>,
    pub entries: BTreeSet<Entry>,
}

/// A list name: 1–64 of `a-z`, `0-9`, `-`, `_` (it is a path segment and a key scope).
pub fn check_name(name: &str) -> Result<(), WatchError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(WatchError::Invalid(format!(
            "watchlist name {name:?} must be 1-64 characters of a-z, 0-9, - and _"
        )))
    }
}

/// A Standard Webhooks secret: `whsec_` and the base64 of 24 to 64 random bytes.
pub fn check_secret(s: &str) -> Result<(), WatchError> {
    let raw = s.strip_prefix("whsec_").unwrap_or(s);
    match base64::engine::general_purpose::STANDARD.decode(raw) {
        Ok(b) if (24..=64).contains(&b.len()) => Ok(()),
        _ => Err(WatchError::Invalid(
            "the secret must be `whsec_` followed by the base64 of 24 to 64 bytes".into(),
        )),
    }
}

/// A new random secret.
pub fn new_secret() -> String {
    use rand::RngCore;
    let mut b = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut b);
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(b)
    )
}

/// The projection watermark now (or, before any projection, the replica's checkpoint):
/// where a new list's feed starts.
async fn watermark_now(tx: &mut Tx) -> Result<i64, sqlx::Error> {
    Ok(tx
        .int(
            "SELECT COALESCE((SELECT MIN(cursor) FROM proj_meta WHERE name NOT LIKE '%#next'), \
             (SELECT checkpoint FROM writer_state WHERE singleton = 1), -1)",
            &[],
        )
        .await?
        .unwrap_or(-1))
}

/// Creates a list with its entries, all or nothing. Returns it with its secret (shown
/// once, to the operator who made it).
pub async fn create(
    store: &Store,
    new: NewList,
    policy: &Policy,
) -> Result<(Watchlist, Option<String>), WatchError> {
    check_name(&new.name)?;
    if new.entries.is_empty() {
        return Err(WatchError::Invalid(
            "a watchlist needs at least one entry".into(),
        ));
    }
    if new.entries.len() > MAX_ENTRIES {
        return Err(WatchError::Invalid(format!(
            "{} entries; a watchlist holds at most {MAX_ENTRIES}",
            new.entries.len()
        )));
    }
    // Stored as parsed: what `watch list` shows is the host the client connects to.
    let webhook_url = match &new.webhook_url {
        Some(u) => {
            let url = target::check(u, policy)
                .await
                .map_err(WatchError::Invalid)?;
            let has_rc = new.entries.iter().any(|e| e.kind == Kind::Rc);
            policy
                .check_birth_numbers(&url, has_rc)
                .map_err(WatchError::Invalid)?;
            Some(url.to_string())
        }
        None => None,
    };
    if let Some(s) = &new.secret {
        check_secret(s)?;
    }
    let secret = match (&webhook_url, new.secret) {
        (Some(_), None) => Some(new_secret()),
        (_, s) => s,
    };
    let mut tx = Tx::begin(&store.clone()).await?;
    if tx
        .int(
            "SELECT COUNT(*) FROM watchlists WHERE name = $1",
            &[new.name.as_str().into()],
        )
        .await?
        .unwrap_or(0)
        > 0
    {
        return Err(WatchError::Exists(new.name));
    }
    let wm = watermark_now(&mut tx).await?;
    tx.exec(
        "INSERT INTO watchlists (name, roles, webhook_url, secret, created_at, created_watermark, entries, cursor) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $6)",
        &[
            new.name.as_str().into(),
            new.roles.as_str().into(),
            webhook_url.clone().into(),
            secret.clone().into(),
            now_ms().into(),
            wm.into(),
            (new.entries.len() as i64).into(),
        ],
    )
    .await?;
    let rows: Vec<Vec<Val>> = new
        .entries
        .iter()
        .map(|e| {
            vec![
                new.name.as_str().into(),
                e.kind.as_str().into(),
                e.key.as_str().into(),
            ]
        })
        .collect();
    tx.insert_with("watch_entries", &["list", "kind", "key"], &rows, "")
        .await?;
    tx.commit().await?;
    // A new list changes what the entries table holds at once; PostgreSQL's planner,
    // left to the next autovacuum, would take a 100 000-entry list for one row and drive
    // a page's lookups from it.
    if let Store::Postgres(p) = store {
        sqlx::query("ANALYZE watch_entries").execute(p).await?;
    }
    let list = get(store, &new.name).await?;
    Ok((list, secret))
}

macro_rules! on_pool {
    ($store:expr, |$p:ident| $body:expr) => {
        match $store {
            Store::Sqlite($p) => $body,
            Store::Postgres($p) => $body,
        }
    };
}

/// Every list, by name.
pub async fn list(store: &Store) -> Result<Vec<Watchlist>, WatchError> {
    let sql = format!("SELECT {LIST_COLUMNS} FROM watchlists ORDER BY name");
    Ok(on_pool!(store, |p| sqlx::query_as::<_, Watchlist>(&sql)
        .bind(now_ms())
        .fetch_all(p)
        .await?))
}

/// One list.
pub async fn get(store: &Store, name: &str) -> Result<Watchlist, WatchError> {
    let sql = format!("SELECT {LIST_COLUMNS} FROM watchlists WHERE name = $2");
    on_pool!(store, |p| sqlx::query_as::<_, Watchlist>(&sql)
        .bind(now_ms())
        .bind(name)
        .fetch_optional(p)
        .await?)
    .ok_or_else(|| WatchError::NotFound(name.to_string()))
}

/// A list's entries, by kind and key.
pub async fn entries(store: &Store, name: &str) -> Result<Vec<Entry>, WatchError> {
    let rows: Vec<(String, String)> = on_pool!(store, |p| sqlx::query_as(
        "SELECT kind, key FROM watch_entries WHERE list = $1 ORDER BY kind, key"
    )
    .bind(name)
    .fetch_all(p)
    .await?);
    Ok(rows
        .into_iter()
        .filter_map(|(k, key)| Kind::parse(&k).map(|kind| Entry { kind, key }))
        .collect())
}

/// Removes a list and its entries; whether it existed.
pub async fn remove(store: &Store, name: &str) -> Result<bool, WatchError> {
    let mut tx = Tx::begin(store).await?;
    tx.exec("DELETE FROM watch_entries WHERE list = $1", &[name.into()])
        .await?;
    let n = tx
        .exec("DELETE FROM watchlists WHERE name = $1", &[name.into()])
        .await?;
    tx.commit().await?;
    Ok(n > 0)
}

/// A change of a list's delivery: its webhook, its secret (the old one keeps signing
/// beside the new for `keep_previous_ms`), or its cursor (a replay from a position).
#[derive(Debug, Clone, Default)]
pub struct Change {
    /// `Some(None)` removes the webhook.
    pub webhook_url: Option<Option<String>>,
    pub secret: Option<String>,
    pub keep_previous_ms: i64,
    pub cursor: Option<i64>,
}

/// Applies `change`; returns the list and, when a secret was generated, that secret.
pub async fn change(
    store: &Store,
    name: &str,
    mut change: Change,
    policy: &Policy,
) -> Result<(Watchlist, Option<String>), WatchError> {
    let before = get(store, name).await?;
    if let Some(Some(u)) = &mut change.webhook_url {
        let url = target::check(u, policy)
            .await
            .map_err(WatchError::Invalid)?;
        policy
            .check_birth_numbers(&url, has_birth_numbers(store, name).await?)
            .map_err(WatchError::Invalid)?;
        *u = url.to_string();
    }
    if let Some(s) = &change.secret {
        check_secret(s)?;
    }
    if let Some(c) = change.cursor
        && c < -1
    {
        return Err(WatchError::Invalid(format!(
            "cursor {c} is no feed position"
        )));
    }
    let mut tx = Tx::begin(store).await?;
    if let Some(w) = &change.webhook_url {
        tx.exec(
            "UPDATE watchlists SET webhook_url = $2 WHERE name = $1",
            &[name.into(), w.clone().into()],
        )
        .await?;
    }
    let mut shown = None;
    let webhook_now = change
        .webhook_url
        .clone()
        .unwrap_or(before.webhook_url.clone());
    let secret = match change.secret {
        Some(s) => Some(s),
        // A webhook set where none was gets a secret.
        None if before.webhook_url.is_none() && webhook_now.is_some() => {
            let s = new_secret();
            shown = Some(s.clone());
            Some(s)
        }
        None => None,
    };
    if let Some(s) = secret {
        tx.exec(
            "UPDATE watchlists SET previous_secret = secret, previous_until = $2, secret = $3 WHERE name = $1",
            &[
                name.into(),
                (now_ms() + change.keep_previous_ms.max(0)).into(),
                s.into(),
            ],
        )
        .await?;
    }
    if let Some(c) = change.cursor {
        // A replay: the next delivery starts after `c`, and the failing state is reset.
        tx.exec(
            "UPDATE watchlists SET cursor = $2, failing = 0, failing_since = NULL, last_error = NULL WHERE name = $1",
            &[name.into(), c.into()],
        )
        .await?;
    }
    tx.commit().await?;
    Ok((get(store, name).await?, shown))
}

/// Whether a list holds birth-number entries (its webhook must then be `https`).
pub async fn has_birth_numbers(store: &Store, name: &str) -> Result<bool, sqlx::Error> {
    let mut tx = Tx::single(store).await?;
    Ok(tx
        .int(
            "SELECT COUNT(*) FROM (SELECT 1 FROM watch_entries WHERE list = $1 AND kind = 'rc' LIMIT 1) AS x",
            &[name.into()],
        )
        .await?
        .unwrap_or(0)
        > 0)
}

/// The secrets a list signs with now: the current one, and the previous one while a
/// rotation lasts.
pub async fn secrets(store: &Store, name: &str) -> Result<Vec<String>, WatchError> {
    let row: Option<(Option<String>, Option<String>, Option<i64>)> = on_pool!(store, |p| {
        sqlx::query_as(
            "SELECT secret, previous_secret, previous_until FROM watchlists WHERE name = $1",
        )
        .bind(name)
        .fetch_optional(p)
        .await?
    });
    let (cur, prev, until) = row.ok_or_else(|| WatchError::NotFound(name.to_string()))?;
    let mut out: Vec<String> = cur.into_iter().collect();
    if let (Some(p), Some(u)) = (prev, until)
        && u > now_ms()
    {
        out.push(p);
    }
    Ok(out)
}
