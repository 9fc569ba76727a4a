//! The change feed (`/v1/events`): every action after an ID, in ID order, filtered by
//! type, court or case.
//!
//! Reads the `timeline` projection; never reads `actions`, never writes.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;

use super::format::{format_of, respond_list};
use super::pagination::{docs, limit, page, query_except};
use super::params::{EventParams, Params, court_param, date_param, only};
use crate::projection::columns;
use crate::projection::sql::Val;
use crate::read::params::search_key;
use crate::read::{Problem, ReadState, queries, watermark};

/// The change feed: every action after an ID, in ID order.
#[utoipa::path(get, path = "/v1/events", tag = "events",
    params(crate::api::params::EventParams),
    responses(
        (status = 200, description = "A page of the feed; CSV and NDJSON carry `next` in a `Link` header", headers(("ISIR-Watermark" = i64, description = "Last action ID applied by every projection builder"),
                ("ISIR-Lag-Seconds" = i64, description = "Seconds the projection is behind the replica")),
            content((crate::api::openapi::EventList = "application/json"), (String = "text/csv"), (String = "application/x-ndjson"))),
        (status = 304, description = "Not modified (`If-None-Match`)"),
        crate::api::openapi::V1Errors,
    ))]
pub(crate) async fn events(
    State(state): State<ReadState>,
    q: Params,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    only::<EventParams>(&q, &["type", "ico"])?;
    let format = format_of(&q, &headers)?;
    let limit = limit(&state, &q)?;
    let after: i64 = match q.get("after") {
        None => -1,
        Some(a) => a
            .parse()
            .map_err(|_| Problem::bad(format!("after {a:?} is not an action ID")))?,
    };
    let mut conds = vec!["action_id > $1".to_string()];
    let mut binds: Vec<Val> = vec![after.into()];
    // Every list filter: any of its values (`col IN (...)` or a subquery over parties).
    let types = q.all("type");
    if !types.is_empty() {
        let mut marks = Vec::new();
        for t in types {
            if t.is_empty() || t.len() > 6 || !t.chars().all(|c| c.is_ascii_digit()) {
                return Err(Problem::bad(format!(
                    "type {t:?} is not an action-type code"
                )));
            }
            binds.push(t.into());
            marks.push(format!("${}", binds.len()));
        }
        conds.push(format!("type_code IN ({})", marks.join(", ")));
    }
    let icos = q.all("ico");
    if !icos.is_empty() {
        let mut marks = Vec::new();
        for v in icos {
            let (_, key) = search_key("ico", "ico", v)?;
            binds.push(key.into());
            marks.push(format!("${}", binds.len()));
        }
        conds.push(format!(
            "case_number IN (SELECT case_number FROM parties WHERE ico IN ({}))",
            marks.join(", ")
        ));
    }
    // Dates as the register writes them (Prague time): the first ten characters.
    if let Some(d) = date_param(&q, "published_from")? {
        binds.push(d.into());
        conds.push(format!("substr(published, 1, 10) >= ${}", binds.len()));
    }
    if let Some(d) = date_param(&q, "published_to")? {
        binds.push(d.into());
        conds.push(format!("substr(published, 1, 10) <= ${}", binds.len()));
    }
    if let Some(c) = court_param(&q)? {
        binds.push(c.code.into());
        conds.push(format!("court = ${}", binds.len()));
    }
    if let Some(c) = q.get("case") {
        let ok = c
            .strip_prefix("INS ")
            .and_then(|r| r.split_once('/'))
            .is_some_and(|(n, y)| n.parse::<u32>().is_ok() && y.parse::<u32>().is_ok());
        if !ok {
            return Err(Problem::bad(format!(
                "case {c:?} is not a case number such as `INS 4711/2026`"
            )));
        }
        binds.push(c.as_str().into());
        conds.push(format!("case_number = ${}", binds.len()));
    }
    binds.push((limit + 1).into());
    let (mut tx, wm) = watermark::open(&state).await?;
    let sql = format!(
        "SELECT {} FROM timeline WHERE {} ORDER BY action_id LIMIT ${}",
        queries::event_json_sql(tx.is_postgres()),
        conds.join(" AND "),
        binds.len()
    );
    let rows = tx.texts(&sql, &binds).await?;
    tx.commit().await?;
    let (evs, more) = page(docs(&rows)?, limit);
    let next = more.then(|| {
        let last = evs
            .last()
            .and_then(|e| e["action_id"].as_i64())
            .unwrap_or(after);
        let qs = query_except(&q, &["after", "limit"]);
        format!(
            "/v1/events?after={last}&limit={limit}{}{}",
            if qs.is_empty() { "" } else { "&" },
            qs.join("&")
        )
    });
    Ok(respond_list(
        &wm,
        &headers,
        format,
        "events",
        evs,
        next,
        columns::EVENT_COLUMNS,
    ))
}
