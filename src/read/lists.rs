//! The list queries whose cost is bounded: `/v1/cases` and `/v1/events` compose their
//! statements here, and only in shapes an index answers in keyset order (the page's
//! rows are read in order and the scan stops at the page's end). A combination no index
//! serves is refused with a 400 that names it and says what is supported, instead of a
//! sort of every matching row or a walk of the table.
//!
//! Owns the statements; the indexes they need are the builders'
//! ([`crate::readmodel::keys::LIST_SHAPES`], the timeline's court indexes), and
//! the plan tests check the two agree. Runs nothing itself.

use super::Problem;
use crate::store::sql::Val;

/// What a list reads: the views (PostgreSQL, whose planner has statistics), or on
/// SQLite the live version's tables with the shape's index named (`INDEXED BY`, which
/// a view does not take), `v` from `proj_meta` in the same snapshot ([`source`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Views,
    Sqlite(i64),
}

impl Source {
    /// The cases table or view this source reads.
    pub fn cases(&self) -> String {
        match self {
            Source::Sqlite(v) => format!("cases_v{v}"),
            Source::Views => "cases".into(),
        }
    }

    /// Whether it reads a version's tables themselves (SQLite), not their views.
    pub fn is_table(&self) -> bool {
        matches!(self, Source::Sqlite(_))
    }

    /// The timeline table or view this source reads.
    pub fn timeline(&self) -> String {
        match self {
            Source::Sqlite(v) => format!("timeline_v{v}"),
            Source::Views => "timeline".into(),
        }
    }
}

/// Whether the timeline that `at` reads holds short cells to put back
/// ([`crate::readmodel::TimelineCells`]): a version's table on SQLite once it has
/// `document_id` (a version an earlier release made lacks it until the projector opens
/// the projections, and holds its cells whole until then); never a view, which serves
/// them whole.
pub async fn short_cells(tx: &mut crate::store::sql::Tx, at: &Source) -> Result<bool, Problem> {
    let Source::Sqlite(v) = at else {
        return Ok(false);
    };
    let n = tx
        .int(
            "SELECT COUNT(*) FROM pragma_table_info($1) WHERE name = 'document_id'",
            &[format!("timeline_v{v}").into()],
        )
        .await?;
    Ok(n.unwrap_or(0) > 0)
}

/// The [`Source`] of a list over `projection`'s tables in `tx`'s snapshot.
pub async fn source(tx: &mut crate::store::sql::Tx, projection: &str) -> Result<Source, Problem> {
    if tx.is_postgres() {
        return Ok(Source::Views);
    }
    let v = tx
        .int(
            "SELECT version FROM proj_meta WHERE name = $1",
            &[projection.into()],
        )
        .await?
        .ok_or_else(|| Problem::unavailable(format!("the {projection} projection is not built")))?;
    Ok(Source::Sqlite(v))
}

/// The order of a case list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sort {
    /// By the date opened, oldest first (`opened`, `case_number`).
    Opened,
    /// By the latest action, newest first (`latest_action_id`, unique per case).
    Latest,
    /// By the latest action's publication time, newest first (`latest_published`,
    /// `case_number`); `updated_since` is a range on it.
    Updated,
}

impl Sort {
    pub fn parse(s: &str) -> Result<Sort, Problem> {
        match s {
            "opened" => Ok(Sort::Opened),
            "latest" => Ok(Sort::Latest),
            "updated" => Ok(Sort::Updated),
            other => Err(Problem::bad(format!(
                "sort {other:?}: one of opened, latest, updated"
            ))),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Sort::Opened => "opened",
            Sort::Latest => "latest",
            Sort::Updated => "updated",
        }
    }
}

/// The shapes the cases projection indexes (its `LIST_SHAPES`), by sort.
fn case_sets() -> impl Iterator<Item = (Sort, &'static [&'static str])> {
    crate::readmodel::keys::LIST_SHAPES
        .iter()
        .map(|(sort, set)| {
            (
                match *sort {
                    "opened" => Sort::Opened,
                    "latest" => Sort::Latest,
                    _ => Sort::Updated,
                },
                *set,
            )
        })
}

/// The API's name of a filter column.
fn param(col: &str) -> &str {
    match col {
        "court_short" => "court",
        other => other,
    }
}

/// What a case list asks for, parsed.
#[derive(Debug, Clone, Default)]
pub struct CaseQuery {
    pub sort: Option<Sort>,
    /// Equality filters: (column, value).
    pub equal: Vec<(&'static str, String)>,
    pub opened_from: Option<String>,
    pub opened_to: Option<String>,
    pub updated_since: Option<String>,
    /// Debtor keys (`ico`, `rc` or `name_key`, values): the cases of these debtors, a
    /// set bounded by the keys; every other filter then narrows it.
    pub debtor: Option<(&'static str, Vec<String>)>,
    /// The keyset position after which the page starts (the sort's keys).
    pub after: Option<[String; 2]>,
    pub limit: i64,
}

/// The supported equality sets of `sort`, for an error message.
fn supported(sort: Sort) -> String {
    case_sets()
        .filter(|(s, _)| *s == sort)
        .map(|(_, set)| {
            if set.is_empty() {
                "none".to_string()
            } else {
                set.iter().map(|c| param(c)).collect::<Vec<_>>().join(" + ")
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The statement of a case list (rows: `doc`) and its binds, or a 400 for a
/// combination no index serves in order.
pub fn case_list(q: &CaseQuery, at: &Source) -> Result<(String, Vec<Val>), Problem> {
    let sort = q.sort.unwrap_or(Sort::Opened);
    let mut conds: Vec<String> = Vec::new();
    let mut binds: Vec<Val> = Vec::new();
    let mut add = |cond: &str, v: Val, conds: &mut Vec<String>| {
        binds.push(v);
        conds.push(cond.replace('?', &format!("${}", binds.len())));
        binds.len()
    };
    let mut equal = q.equal.clone();
    equal.sort_by_key(|(c, _)| CASE_ORDER.iter().position(|o| o == c));
    let cols: Vec<&str> = equal.iter().map(|(c, _)| *c).collect();
    if q.debtor.is_none() {
        // Without a debtor key the list walks an index: only the indexed shapes.
        if !case_sets().any(|(s, set)| s == sort && set == cols.as_slice()) {
            return Err(Problem::bad(format!(
                "filters {} with sort={} are not supported together (no index serves them in order); \
                 with sort={} the filters may be: {}; a debtor filter (debtor_ico, debtor_rc, debtor_name) goes with any",
                cols.iter()
                    .map(|c| param(c))
                    .collect::<Vec<_>>()
                    .join(" + "),
                sort.name(),
                sort.name(),
                supported(sort)
            )));
        }
        if (q.opened_from.is_some() || q.opened_to.is_some()) && sort != Sort::Opened {
            return Err(Problem::bad(format!(
                "opened_from/opened_to are a range of sort=opened, not of sort={} (or add a debtor filter)",
                sort.name()
            )));
        }
        if q.updated_since.is_some() && sort != Sort::Updated {
            return Err(Problem::bad(format!(
                "updated_since is a range of sort=updated, not of sort={} (or add a debtor filter)",
                sort.name()
            )));
        }
    }
    for (c, v) in &equal {
        add(&format!("{c} = ?"), v.as_str().into(), &mut conds);
    }
    if let Some(d) = &q.opened_from {
        add("opened >= ?", d.as_str().into(), &mut conds);
    }
    if let Some(d) = &q.opened_to {
        add("opened <= ?", d.as_str().into(), &mut conds);
    }
    if let Some(d) = &q.updated_since {
        // `latest_published` starts with its date: the comparison is the date's, and
        // a range of the index.
        add("latest_published >= ?", d.as_str().into(), &mut conds);
    }
    if let Some((col, keys)) = &q.debtor {
        let mut marks = Vec::new();
        for k in keys {
            marks.push(format!("${}", add("?", k.as_str().into(), &mut Vec::new())));
        }
        conds.push(format!(
            "case_number IN (SELECT case_number FROM parties WHERE role = 'DLUŽNÍK' AND {col} IN ({}))",
            marks.join(", ")
        ));
    }
    if let Some([k0, k1]) = &q.after {
        match sort {
            Sort::Opened => {
                let a = add("?", k0.as_str().into(), &mut Vec::new());
                let b = add("?", k1.as_str().into(), &mut Vec::new());
                conds.push(format!("(opened, case_number) > (${a}, ${b})"));
            }
            Sort::Latest => {
                let id: i64 = k0
                    .parse()
                    .map_err(|_| Problem::bad("cursor is malformed; use the `next` link"))?;
                add("latest_action_id < ?", id.into(), &mut conds);
            }
            Sort::Updated => {
                let a = add("?", k0.as_str().into(), &mut Vec::new());
                let b = add("?", k1.as_str().into(), &mut Vec::new());
                conds.push(format!("(latest_published, case_number) < (${a}, ${b})"));
            }
        }
    }
    let order = match sort {
        Sort::Opened => "opened, case_number",
        Sort::Latest => "latest_action_id DESC",
        Sort::Updated => "latest_published DESC, case_number DESC",
    };
    binds.push(q.limit.into());
    // On SQLite the shape's own index, named: its planner has no statistics to choose
    // by on a young table, and a wrong choice walks an index filtering a column.
    let from = match (at, &q.debtor) {
        (Source::Sqlite(v), None) => {
            let index = match (sort, cols.is_empty()) {
                (Sort::Opened, true) => format!("cases_v{v}_opened"),
                (Sort::Latest, true) => format!("cases_v{v}_latest"),
                (_, true) => format!("cases_v{v}_{}_all", sort.name()),
                (_, false) => format!("cases_v{v}_{}_{}", sort.name(), cols.join("_")),
            };
            format!("cases_v{v} INDEXED BY {index}")
        }
        (Source::Sqlite(v), Some(_)) => format!("cases_v{v}"),
        (Source::Views, _) => "cases".to_string(),
    };
    let sql = format!(
        "SELECT doc FROM {from} {} ORDER BY {order} LIMIT ${}",
        if conds.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", conds.join(" AND "))
        },
        binds.len()
    );
    Ok((sql, binds))
}

/// The order of equality columns in the indexes.
const CASE_ORDER: &[&str] = crate::readmodel::keys::LIST_COLUMNS;

/// Every supported shape of a case list without a debtor key (for the plan tests).
pub fn case_shapes() -> Vec<(Sort, Vec<&'static str>)> {
    case_sets().map(|(s, set)| (s, set.to_vec())).collect()
}

/// Cases an `ico=` feed may span: its rows are read case by case.
pub const MAX_FEED_CASES: i64 = 1_000;

/// What a change feed asks for, parsed.
#[derive(Debug, Clone, Default)]
pub struct EventQuery {
    pub after: i64,
    pub types: Vec<String>,
    pub court: Option<String>,
    pub case: Option<String>,
    /// The cases of the `ico=` filter, already looked up (at most [`MAX_FEED_CASES`]).
    pub cases: Option<Vec<String>>,
    pub published_from: Option<String>,
    pub published_to: Option<String>,
    pub limit: i64,
}

/// The statement of a change feed page (rows: the event JSON of `columns`), or a 400.
/// A case, or the cases of an IČO, bound the rows read; otherwise the feed walks the
/// timeline in ID order by its key, by `(court, action_id)`, or one ordered walk per
/// type (merged, at most `limit` rows each).
pub fn events(q: &EventQuery, columns: &str, at: &Source) -> Result<(String, Vec<Val>), Problem> {
    let bounded = q.case.is_some() || q.cases.is_some();
    if !bounded && (q.published_from.is_some() || q.published_to.is_some()) {
        return Err(Problem::bad(
            "published_from/published_to narrow the feed of a case (case=) or of an IČO's cases (ico=): \
             the feed is in action-ID order and publication dates are not, so on the whole feed \
             use after= with the IDs instead",
        ));
    }
    let mut binds: Vec<Val> = vec![q.after.into()];
    let mut common = vec!["action_id > $1".to_string()];
    let push = |binds: &mut Vec<Val>, v: Val| {
        binds.push(v);
        format!("${}", binds.len())
    };
    if let Some(c) = &q.case {
        let m = push(&mut binds, c.as_str().into());
        common.push(format!("case_number = {m}"));
    }
    if let Some(cs) = &q.cases {
        if cs.is_empty() {
            common.push("1 = 0".into());
        } else {
            let marks: Vec<String> = cs
                .iter()
                .map(|c| push(&mut binds, c.as_str().into()))
                .collect();
            common.push(format!("case_number IN ({})", marks.join(", ")));
        }
    }
    if let Some(c) = &q.court {
        let m = push(&mut binds, c.as_str().into());
        common.push(format!("court = {m}"));
    }
    if let Some(d) = &q.published_from {
        let m = push(&mut binds, d.as_str().into());
        common.push(format!("substr(published, 1, 10) >= {m}"));
    }
    if let Some(d) = &q.published_to {
        let m = push(&mut binds, d.as_str().into());
        common.push(format!("substr(published, 1, 10) <= {m}"));
    }
    // The table, with the walk's index named on SQLite (see `case_list`).
    let from = |index: Option<&str>| match (at, index) {
        (Source::Views, _) => "timeline".to_string(),
        (Source::Sqlite(v), Some(i)) => format!("timeline_v{v} INDEXED BY timeline_v{v}_{i}"),
        (Source::Sqlite(v), None) => format!("timeline_v{v}"),
    };
    if q.types.len() <= 1 || bounded {
        let index = match (&q.case, &q.cases, &q.court, q.types.len()) {
            (Some(_), _, _, _) | (_, Some(_), _, _) => Some("case"),
            (None, None, Some(_), 1) => Some("court_type"),
            (None, None, Some(_), _) => Some("court"),
            (None, None, None, 1) => Some("type"),
            (None, None, None, _) => None,
        };
        if !q.types.is_empty() {
            let marks: Vec<String> = q
                .types
                .iter()
                .map(|t| push(&mut binds, t.as_str().into()))
                .collect();
            common.push(format!("type_code IN ({})", marks.join(", ")));
        }
        let l = push(&mut binds, q.limit.into());
        return Ok((
            format!(
                "SELECT {columns} FROM {} WHERE {} ORDER BY action_id LIMIT {l}",
                from(index),
                common.join(" AND ")
            ),
            binds,
        ));
    }
    // Several types: one ordered, limited walk per type, merged.
    let l = push(&mut binds, q.limit.into());
    let parts: Vec<String> = q
        .types
        .iter()
        .map(|t| {
            let m = push(&mut binds, t.as_str().into());
            format!(
                "SELECT * FROM (SELECT action_id AS k, {columns} AS row FROM {} WHERE {} AND type_code = {m} \
                 ORDER BY action_id LIMIT {l}) AS t{}",
                from(Some(if q.court.is_some() { "court_type" } else { "type" })),
                common.join(" AND "),
                binds.len()
            )
        })
        .collect();
    Ok((
        format!(
            "SELECT row FROM ({}) AS u ORDER BY k LIMIT {l}",
            parts.join(" UNION ALL ")
        ),
        binds,
    ))
}

/// How a count is asked for: `?count=` or PostgREST's `Prefer: count=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CountKind {
    Exact,
    Estimated,
}

/// Rows an estimated count on SQLite counts before it settles for a lower bound
/// (SQLite keeps no row estimates for a filtered statement).
pub const ESTIMATE_CAP: i64 = 100_000;

/// A count of a list's whole result (in JSON answers: `count`, beside the headers).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Count {
    pub value: i64,
    /// `exact`, `estimated` (PostgreSQL's planner) or `lower-bound` (SQLite, past
    /// [`ESTIMATE_CAP`]).
    pub kind: &'static str,
}

/// Counts the rows of `sql` (a list statement whose last bind is its `LIMIT`, as the
/// builders here make them), in `tx`'s snapshot and time limit.
pub async fn count(
    tx: &mut crate::store::sql::Tx,
    sql: &str,
    binds: &[Val],
    kind: CountKind,
) -> Result<Count, Problem> {
    let mut binds = binds.to_vec();
    let pg = tx.is_postgres();
    if kind == CountKind::Estimated && pg {
        if let Some(l) = binds.last_mut() {
            *l = Val::from(i64::MAX);
        }
        // The top node's estimate: `Limit  (cost=... rows=N width=...)`.
        let plan = tx.texts(&format!("EXPLAIN {sql}"), &binds).await?;
        let rows = plan
            .first()
            .and_then(|l| l.split("rows=").nth(1))
            .and_then(|r| r.split_whitespace().next())
            .and_then(|r| r.parse::<i64>().ok())
            .ok_or_else(|| Problem::internal("a plan without a row estimate"))?;
        return Ok(Count {
            value: rows,
            kind: "estimated",
        });
    }
    let cap = (kind == CountKind::Estimated).then_some(ESTIMATE_CAP);
    if let Some(l) = binds.last_mut() {
        *l = Val::from(cap.map_or(i64::MAX, |c| c + 1));
    }
    let n = tx
        .int(&format!("SELECT COUNT(*) FROM ({sql}) AS counted"), &binds)
        .await?
        .unwrap_or(0);
    Ok(match cap {
        Some(c) if n > c => Count {
            value: c,
            kind: "lower-bound",
        },
        _ => Count {
            value: n,
            kind: "exact",
        },
    })
}
