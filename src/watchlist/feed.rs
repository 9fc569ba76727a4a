//! A watchlist's change feed: the actions of the cases in which a watched subject is a
//! party in a watched role, after the list's creation watermark, in feed order, keyset-
//! paged by position. The API answers it (`/v1/watchlists/{name}/events`) and the
//! notifier delivers it.
//!
//! Which actions, and in what order:
//! - a case number entry: every action of that case;
//! - an IČO or birth number of a debtor (any list) or of any party (`roles = all`): the
//!   party's first action `f` (its person record) and every later action of the case;
//!   for a debtor also the case's actions before `f` (the petition that opened the case
//!   precedes the debtor's person record in the register);
//! - an event's *position* is its action ID, except for the actions of a case before the
//!   watched debtor's person record, which take the position `f`: they become part of the
//!   list's feed only when the register names the debtor, so they are delivered with that
//!   action. The feed is ordered by (position, action ID); `after` is a position, and a
//!   page never ends inside a position, so no cursor can skip an action.
//! - the action `f` itself is marked `new_party` (for a debtor: a new petition against a
//!   watched subject).
//!
//! A party's role is its latest one. A debtor erased under § 425 is gone from the parties
//! projection, and with it every match through that debtor.
//!
//! Owns the queries only; reads the `parties` and `timeline` views
//! through the caller's snapshot, and never writes.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::{Kind, Roles};
use crate::readmodel::columns;
use crate::store::sql::{Tx, Val};

/// What one action ID of a window costs against one entry of the list when matches are
/// found from the window (an action and its case's parties against one index probe).
const WINDOW_COST: i64 = 4;

/// A page of a list's feed.
#[derive(Debug, Clone)]
pub struct FeedPage {
    /// The events, each a timeline event with `position`, `new_party` and `watched`.
    pub events: Vec<Value>,
    /// The position after the last event (the `after` of the next page), when there are
    /// more events up to the bound.
    pub next: Option<i64>,
    /// The position of the last event, if any.
    pub last: Option<i64>,
}

/// The role condition of `roles` on the parties row `p`.
fn role_filter(roles: Roles) -> &'static str {
    match roles {
        Roles::Debtor => " AND p.role = 'DLUŽNÍK'",
        Roles::All => "",
    }
}

/// A party's first action: its first person record (party row `p`).
const FIRST: &str = "p.first_action_id";

/// Whether the party row `p` is a debtor, as 1 or 0.
const DEBTOR: &str = "CASE WHEN p.role = 'DLUŽNÍK' THEN 1 ELSE 0 END";

/// How the matches of a page are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drive {
    /// From the list: every entry looked up in the parties (costs the list's size).
    List,
    /// From the window: the parties of the cases with an action in the window looked up
    /// in the list (costs the window's actions). Complete for the window: an event at a
    /// position in it is an action in it, or an earlier action of a case whose debtor's
    /// first action is in it.
    Window,
}

/// The matches of a list: for every case, the watched subjects that are parties in a
/// watched role, with the first action of each (`f`) and whether it is a debtor. `$1` is
/// the list's name; with [`Drive::Window`], only cases with an action in [`$3`, `$5`].
fn matches_sql(roles: Roles, drive: Drive) -> String {
    let (role, first, debtor) = (role_filter(roles), FIRST, DEBTOR);
    match drive {
        Drive::List => format!(
            "w AS (SELECT kind, key FROM watch_entries WHERE list = $1), \
             m AS (\
               SELECT p.case_number AS cn, w.kind AS kind, w.key AS key, {debtor} AS debtor, {first} AS f \
                 FROM w CROSS JOIN parties p WHERE w.kind = 'ico' AND p.ico = w.key{role} \
               UNION ALL \
               SELECT p.case_number, w.kind, w.key, {debtor}, {first} \
                 FROM w CROSS JOIN parties p WHERE w.kind = 'rc' AND p.rc = w.key{role} \
               UNION ALL \
               SELECT w.key, w.kind, w.key, 1, -1 FROM w WHERE w.kind = 'case')"
        ),
        Drive::Window => format!(
            "k AS (SELECT DISTINCT case_number FROM timeline WHERE action_id >= $3 AND action_id <= $5), \
             m AS (\
               SELECT p.case_number AS cn, w.kind AS kind, w.key AS key, {debtor} AS debtor, {first} AS f \
                 FROM k CROSS JOIN parties p CROSS JOIN watch_entries w \
                WHERE p.case_number = k.case_number AND w.list = $1 AND w.kind = 'ico' AND w.key = p.ico{role} \
               UNION ALL \
               SELECT p.case_number, w.kind, w.key, {debtor}, {first} \
                 FROM k CROSS JOIN parties p CROSS JOIN watch_entries w \
                WHERE p.case_number = k.case_number AND w.list = $1 AND w.kind = 'rc' AND w.key = p.rc{role} \
               UNION ALL \
               SELECT w.key, w.kind, w.key, 1, -1 FROM k CROSS JOIN watch_entries w \
                WHERE w.list = $1 AND w.kind = 'case' AND w.key = k.case_number)"
        ),
    }
}

/// Reads the list's events with a position in (`after`, `until`] (and, at position
/// `after` itself, those with an action ID above `after_id`), at most `limit` of them
/// and never ending inside a position, excluding actions up to `created`.
/// `show_rc`: birth numbers appear in `watched` (the `pii` scope), else only their kind.
#[allow(clippy::too_many_arguments)]
pub async fn page(
    tx: &mut Tx,
    list: &str,
    roles: Roles,
    created: i64,
    after: i64,
    until: i64,
    limit: i64,
    show_rc: bool,
) -> Result<FeedPage, sqlx::Error> {
    page_driven(tx, list, roles, created, after, until, limit, show_rc, None).await
}

/// [`page`] with the way matches are found fixed (`Some`), for the tests that hold both
/// ways to the same truth; `None` chooses per statement.
#[allow(clippy::too_many_arguments)]
pub async fn page_driven(
    tx: &mut Tx,
    list: &str,
    roles: Roles,
    created: i64,
    after: i64,
    until: i64,
    limit: i64,
    show_rc: bool,
    fixed: Option<Drive>,
) -> Result<FeedPage, sqlx::Error> {
    // A window of positions after `after`, widened until it holds a page or reaches
    // `until`: each statement reads only the matched cases' actions inside it (an
    // action's position is at least its ID), so a page costs what it returns, not the
    // whole feed after it.
    // Each statement finds the window's matches the cheaper way: from the window's cases
    // while the window is small against the list (an action has a few parties), else
    // from the list.
    let entries = tx
        .int(
            "SELECT entries FROM watchlists WHERE name = $1",
            &[list.into()],
        )
        .await?
        .unwrap_or(0);
    let drive_for = |after: i64, bound: i64| {
        if let Some(d) = fixed {
            d
        } else if bound.saturating_sub(after).saturating_mul(WINDOW_COST) <= entries {
            Drive::Window
        } else {
            Drive::List
        }
    };
    // No position is at or below the creation watermark (every action in the feed is
    // above it, and a position is at least its action's ID).
    let after = after.max(created);
    let mut width = (limit * 10).max(1000);
    let mut rows = loop {
        let bound = if width >= until.saturating_sub(after) {
            until
        } else {
            after + width
        };
        let drive = drive_for(after, bound);
        let rows = positions(
            tx,
            drive,
            list,
            roles,
            created,
            after,
            i64::MAX,
            bound,
            limit + 1,
        )
        .await?;
        if rows.len() as i64 > limit || bound >= until {
            break rows;
        }
        width = width.saturating_mul(4);
    };
    let more = rows.len() as i64 > limit;
    if more {
        rows.truncate(limit as usize);
        // Never end inside a position: the rest of the last one comes on this page.
        let (p, id, _) = rows.last().cloned().expect("a page with more has rows");
        let rest = positions(tx, Drive::Window, list, roles, created, p, id, p, i64::MAX).await?;
        rows.extend(rest);
    }
    let last = rows.last().map(|r| r.0);
    // The matches of the page's cases, for `watched` and `new_party`.
    let mut cases: Vec<String> = rows
        .iter()
        .filter_map(|r| r.2["case_number"].as_str().map(String::from))
        .collect();
    cases.sort();
    cases.dedup();
    let matched = matches_of(tx, list, roles, &cases).await?;
    let events = rows
        .into_iter()
        .map(|(pos, id, mut ev)| {
            let cn = ev["case_number"].as_str().unwrap_or_default().to_string();
            let mut watched = Vec::new();
            let mut new_party = false;
            for m in matched.get(&cn).map(Vec::as_slice).unwrap_or(&[]) {
                if m.debtor || id >= m.first {
                    let key = if m.kind == Kind::Rc && !show_rc {
                        Value::Null
                    } else {
                        Value::String(m.key.clone())
                    };
                    let w = json!({"kind": m.kind.as_str(), "key": key});
                    if !watched.contains(&w) {
                        watched.push(w);
                    }
                    new_party |= m.kind != Kind::Case && m.first == id;
                }
            }
            ev["position"] = pos.into();
            ev["new_party"] = new_party.into();
            ev["watched"] = Value::Array(watched);
            ev
        })
        .collect();
    Ok(FeedPage {
        events,
        next: if more { last } else { None },
        last,
    })
}

/// Events in (position, action ID) order after (`after`, `after_id`) up to position
/// `until`: (position, action ID, event).
#[allow(clippy::too_many_arguments)]
async fn positions(
    tx: &mut Tx,
    drive: Drive,
    list: &str,
    roles: Roles,
    created: i64,
    after: i64,
    after_id: i64,
    until: i64,
    limit: i64,
) -> Result<Vec<(i64, i64, Value)>, sqlx::Error> {
    // For every matched case: `fd`, the first action of a watched debtor (or -1 for a
    // watched case number), and `fo`, the first action of another watched party. An
    // action qualifies through `fo` from it on (position: its ID) and through `fd`
    // always (position: the later of its ID and `fd`). Scanned from `after` on, or from
    // the creation watermark for a case whose debtor came at or after `after`.
    let sql = positions_sql(roles, drive, tx.is_postgres());
    let binds: Vec<Val> = vec![
        list.into(),
        created.into(),
        after.into(),
        after_id.into(),
        until.into(),
        limit.into(),
    ];
    let mut out = Vec::new();
    for r in tx.texts(&sql, &binds).await? {
        let (pos, doc) = r.split_once('|').unwrap_or(("0", "{}"));
        let ev: Value = serde_json::from_str(doc).map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
        let id = ev["action_id"].as_i64().unwrap_or_default();
        out.push((pos.parse().unwrap_or_default(), id, ev));
    }
    Ok(out)
}

/// The statement that reads a window of positions (public for the benchmark's query plan): `$1` list,
/// `$2` creation watermark, `$3`/`$4` the position and action ID to start after, `$5`
/// the bound, `$6` the limit.
pub fn positions_sql(roles: Roles, drive: Drive, pg: bool) -> String {
    format!(
        "WITH {m}, \
         c AS (SELECT cn, MIN(CASE WHEN debtor = 1 THEN f END) AS fd, \
                      MIN(CASE WHEN debtor = 1 THEN NULL ELSE f END) AS fo FROM m GROUP BY cn), \
         e AS (SELECT t.action_id AS aid, \
                 CASE WHEN c.fo IS NOT NULL AND t.action_id >= c.fo THEN t.action_id \
                      WHEN c.fd IS NOT NULL THEN CASE WHEN t.action_id > c.fd THEN t.action_id ELSE c.fd END \
                 END AS pos \
               FROM c CROSS JOIN timeline t WHERE t.case_number = c.cn \
                AND t.action_id > $2 AND t.action_id <= $5 \
                AND t.action_id > CASE WHEN c.fd IS NOT NULL AND c.fd >= $3 THEN $2 ELSE $3 END) \
         SELECT CAST(e.pos AS TEXT) || '|' || {json} FROM e CROSS JOIN timeline \
         WHERE timeline.action_id = e.aid AND e.pos IS NOT NULL AND e.pos <= $5 AND (e.pos > $3 OR (e.pos = $3 AND e.aid > $4)) \
         ORDER BY e.pos, e.aid LIMIT $6",
        m = matches_sql(roles, drive),
        json = columns::event_json_sql(pg, false),
    )
}

struct Match {
    kind: Kind,
    key: String,
    debtor: bool,
    first: i64,
}

/// The matches of `cases` (a page's), by case: the page's parties looked up in the
/// list's entries (not the list's entries in the parties, which costs the list's size).
async fn matches_of(
    tx: &mut Tx,
    list: &str,
    roles: Roles,
    cases: &[String],
) -> Result<HashMap<String, Vec<Match>>, sqlx::Error> {
    let role = role_filter(roles);
    let mut out: HashMap<String, Vec<Match>> = HashMap::new();
    for chunk in cases.chunks(200) {
        let marks: Vec<String> = (0..chunk.len()).map(|i| format!("${}", i + 2)).collect();
        let marks = marks.join(", ");
        // The page's parties drive (the parties' key), each probing the list's key.
        let one = |kind: &str, col: &str| {
            format!(
                "SELECT p.case_number || '|' || w.kind || '|' || {DEBTOR} || '|' || \
                        COALESCE({FIRST}, -1) || '|' || w.key \
                 FROM parties p CROSS JOIN watch_entries w \
                 WHERE p.case_number IN ({marks}) AND w.list = $1 AND w.kind = '{kind}' AND w.key = p.{col}{role}"
            )
        };
        let sql = format!(
            "{} UNION ALL {} UNION ALL \
             SELECT w.key || '|case|1|-1|' || w.key FROM watch_entries w \
             WHERE w.list = $1 AND w.kind = 'case' AND w.key IN ({marks})",
            one("ico", "ico"),
            one("rc", "rc"),
        );
        let mut binds: Vec<Val> = vec![list.into()];
        binds.extend(chunk.iter().map(|c| Val::from(c.as_str())));
        for r in tx.texts(&sql, &binds).await? {
            let f: Vec<&str> = r.splitn(5, '|').collect();
            if f.len() < 5 {
                continue;
            }
            let Some(kind) = Kind::parse(f[1]) else {
                continue;
            };
            out.entry(f[0].to_string()).or_default().push(Match {
                kind,
                key: f[4].to_string(),
                debtor: f[2] == "1",
                first: f[3].parse().unwrap_or(-1),
            });
        }
    }
    Ok(out)
}
