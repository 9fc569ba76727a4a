//! The cases resource: one case (`/v1/cases/{year}/{number}`), its timeline
//! (`.../events`) and the filtered case list (`/v1/cases`).
//!
//! Reads the `cases` and `timeline` projections through the read side's snapshot;
//! never reads `actions`, never writes.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::Value;

use super::format::{format_of, respond_list, respond_text};
use super::pagination::{decode_cursor, docs, encode_cursor, limit, page, query_except, view};
use super::params::{CaseListParams, NoParams, PageParams, Params, court_param, date_param, only};
use crate::projection::columns;
use crate::projection::sql::Val;
use crate::read::params::{case_number, search_key, url_escape};
use crate::read::{Caller, Problem, ReadState, queries, watermark};

/// One case with court, state and its history, debtors, administrator, key dates and
/// erasure status.
#[utoipa::path(get, path = "/v1/cases/{year}/{number}", tag = "cases",
    params(crate::api::params::CasePath, crate::api::params::NoParams),
    responses(
        (status = 200, description = "The case", body = crate::api::openapi::CaseAnswer, headers(("ISIR-Watermark" = i64, description = "Last action ID applied by every projection builder"),
                ("ISIR-Lag-Seconds" = i64, description = "Seconds the projection is behind the replica"))),
        (status = 304, description = "Not modified (`If-None-Match`)"),
        (status = 404, description = "No such case", body = Problem, content_type = "application/problem+json"),
        crate::api::openapi::V1Errors,
    ))]
pub(crate) async fn case(
    State(state): State<ReadState>,
    Path((year, number)): Path<(String, String)>,
    q: Params,
    headers: HeaderMap,
    caller: Option<axum::Extension<Caller>>,
) -> Result<Response, Problem> {
    only::<NoParams>(&q, &[])?;
    let pii = caller.is_some_and(|c| c.pii);
    let cn = case_number(&year, &number)?;
    let (mut tx, wm) = watermark::open_single(&state).await?;
    let doc = queries::case_doc_text(&mut tx, &cn).await?;
    tx.commit().await?;
    let Some(case) = doc else {
        return Err(Problem::not_found(format!(
            "no case {cn} in the replica (as of action {})",
            wm.action_id
        )));
    };
    // The stored document is JSON already: for the `pii` scope it goes out as it is,
    // without a round trip through a parser (the keys in the order `serde_json` would
    // give them); for anyone else through the mask (person IDs become references).
    let case = if pii {
        case
    } else {
        state
            .privacy()
            .await?
            .mask_text(&case)
            .map_err(Problem::internal)?
    };
    let wm_json = serde_json::to_string(&wm).map_err(Problem::internal)?;
    Ok(respond_text(
        &wm,
        &headers,
        format!("{{\"case\":{case},\"watermark\":{wm_json}}}"),
    ))
}

/// A case's timeline in action-ID order, with document links.
#[utoipa::path(get, path = "/v1/cases/{year}/{number}/events", tag = "cases",
    params(crate::api::params::CasePath, crate::api::params::PageParams),
    responses(
        (status = 200, description = "A page of the timeline; CSV and NDJSON carry `next` in a `Link` header", headers(("ISIR-Watermark" = i64, description = "Last action ID applied by every projection builder"),
                ("ISIR-Lag-Seconds" = i64, description = "Seconds the projection is behind the replica")),
            content((crate::api::openapi::EventList = "application/json"), (String = "text/csv"), (String = "application/x-ndjson"))),
        (status = 304, description = "Not modified (`If-None-Match`)"),
        (status = 404, description = "No such case", body = Problem, content_type = "application/problem+json"),
        crate::api::openapi::V1Errors,
    ))]
pub(crate) async fn case_events(
    State(state): State<ReadState>,
    Path((year, number)): Path<(String, String)>,
    q: Params,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    only::<PageParams>(&q, &[])?;
    let format = format_of(&q, &headers)?;
    let cn = case_number(&year, &number)?;
    let limit = limit(&state, &q)?;
    let privacy = state.privacy().await?;
    let after: i64 = match q.get("cursor") {
        Some(c) => decode_cursor(privacy, c, 1)?[0]
            .parse()
            .map_err(|_| Problem::bad("cursor is malformed"))?,
        None => i64::MIN,
    };
    let (mut tx, wm) = watermark::open(&state).await?;
    let exists = tx
        .int(
            "SELECT COUNT(*) FROM cases WHERE case_number = $1",
            &[cn.as_str().into()],
        )
        .await?
        .unwrap_or(0)
        > 0;
    if !exists {
        return Err(Problem::not_found(format!(
            "no case {cn} in the replica (as of action {})",
            wm.action_id
        )));
    }
    let rows = queries::case_events(&mut tx, &cn, after, limit + 1).await?;
    tx.commit().await?;
    let (events, more) = page(rows, limit);
    let next = more.then(|| {
        let last = events
            .last()
            .and_then(|e| e["action_id"].as_i64())
            .unwrap_or_default();
        let f = q
            .get("format")
            .map(|f| format!("&format={f}"))
            .unwrap_or_default();
        format!(
            "/v1/cases/{year}/{number}/events?limit={limit}&cursor={}{f}",
            encode_cursor(privacy, &[last.to_string()])
        )
    });
    Ok(respond_list(
        &wm,
        &headers,
        format,
        "events",
        events,
        next,
        columns::EVENT_COLUMNS,
    ))
}

/// Cases matching every given filter, by date opened or by latest action.
#[utoipa::path(get, path = "/v1/cases", tag = "cases",
    params(crate::api::params::CaseListParams),
    responses(
        (status = 200, description = "A page of cases; CSV and NDJSON carry `next` in a `Link` header", headers(("ISIR-Watermark" = i64, description = "Last action ID applied by every projection builder"),
                ("ISIR-Lag-Seconds" = i64, description = "Seconds the projection is behind the replica")),
            content((crate::api::openapi::CaseList = "application/json"), (String = "text/csv"), (String = "application/x-ndjson"))),
        (status = 304, description = "Not modified (`If-None-Match`)"),
        crate::api::openapi::V1Errors,
    ))]
pub(crate) async fn case_list(
    State(state): State<ReadState>,
    q: Params,
    headers: HeaderMap,
    caller: Option<axum::Extension<Caller>>,
) -> Result<Response, Problem> {
    only::<CaseListParams>(&q, &["debtor_ico"])?;
    let pii = caller.is_some_and(|c| c.pii);
    if q.contains_key("debtor_rc") && !pii {
        return Err(Problem::needs_pii("a filter by birth number (debtor_rc)"));
    }
    let privacy = state.privacy().await?;
    let format = format_of(&q, &headers)?;
    let limit = limit(&state, &q)?;
    let sort = q.get("sort").map(String::as_str).unwrap_or("opened");
    if sort != "opened" && sort != "latest" {
        return Err(Problem::bad(format!(
            "sort {sort:?}: one of opened, latest"
        )));
    }
    let mut conds: Vec<String> = Vec::new();
    let mut binds: Vec<Val> = Vec::new();
    let mut add = |cond: &str, v: Val, binds: &mut Vec<Val>| {
        binds.push(v);
        conds.push(cond.replace('?', &format!("${}", binds.len())));
    };
    if let Some(c) = court_param(&q)? {
        add("court_short = ?", c.short.into(), &mut binds);
    }
    if let Some(s) = q.get("state") {
        add("state = ?", s.as_str().into(), &mut binds);
    }
    if let Some(d) = date_param(&q, "opened_from")? {
        add("opened >= ?", d.into(), &mut binds);
    }
    if let Some(d) = date_param(&q, "opened_to")? {
        add("opened <= ?", d.into(), &mut binds);
    }
    if let Some(d) = date_param(&q, "updated_since")? {
        add("substr(latest_published, 1, 10) >= ?", d.into(), &mut binds);
    }
    if let Some(k) = q.get("debtor_kind") {
        add("debtor_kind = ?", k.as_str().into(), &mut binds);
    }
    let sub = |col: &str| {
        format!(
            "case_number IN (SELECT case_number FROM parties WHERE role = 'DLUŽNÍK' AND {col} = ?)"
        )
    };
    for (param, kind) in [("debtor_rc", "rc"), ("debtor_name", "name")] {
        if let Some(v) = q.get(param) {
            let (col, key) = search_key(param, kind, v)?;
            add(&sub(col), key.into(), &mut binds);
        }
    }
    // Several debtor IČOs: cases of any of them.
    let icos = q.all("debtor_ico");
    if !icos.is_empty() {
        let mut marks = Vec::new();
        for v in icos {
            let (_, key) = search_key("debtor_ico", "ico", v)?;
            binds.push(key.into());
            marks.push(format!("${}", binds.len()));
        }
        conds.push(format!(
            "case_number IN (SELECT case_number FROM parties WHERE role = 'DLUŽNÍK' AND ico IN ({}))",
            marks.join(", ")
        ));
    }
    let (order, key_cols) = if sort == "opened" {
        ("opened, case_number", ["opened", "case_number"])
    } else {
        (
            "latest_action_id DESC, case_number",
            ["latest_action_id", "case_number"],
        )
    };
    if let Some(c) = q.get("cursor") {
        let v = decode_cursor(privacy, c, 2)?;
        if sort == "opened" {
            binds.push(v[0].as_str().into());
            binds.push(v[1].as_str().into());
            conds.push(format!(
                "(opened > ${} OR (opened = ${} AND case_number > ${}))",
                binds.len() - 1,
                binds.len() - 1,
                binds.len()
            ));
        } else {
            let id: i64 = v[0]
                .parse()
                .map_err(|_| Problem::bad("cursor is malformed; use the `next` link"))?;
            binds.push(id.into());
            binds.push(v[1].as_str().into());
            conds.push(format!(
                "(latest_action_id < ${} OR (latest_action_id = ${} AND case_number > ${}))",
                binds.len() - 1,
                binds.len() - 1,
                binds.len()
            ));
        }
    }
    binds.push((limit + 1).into());
    let sql = format!(
        "SELECT doc FROM cases {} ORDER BY {order} LIMIT ${}",
        if conds.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", conds.join(" AND "))
        },
        binds.len()
    );
    let (mut tx, wm) = watermark::open(&state).await?;
    let rows = tx.texts(&sql, &binds).await?;
    tx.commit().await?;
    let (docs, more) = page(docs(&rows)?, limit);
    let next = more.then(|| {
        let l = docs.last().cloned().unwrap_or_default();
        let k0 = match &l[if key_cols[0] == "opened" {
            "opened"
        } else {
            "latest_action_id"
        }] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let mut qs = query_except(&q, &["cursor", "limit"]);
        qs.push(format!("limit={limit}"));
        qs.push(format!(
            "cursor={}",
            url_escape(&encode_cursor(
                privacy,
                &[
                    k0,
                    l["case_number"].as_str().unwrap_or_default().to_string()
                ]
            ))
        ));
        format!("/v1/cases?{}", qs.join("&"))
    });
    Ok(respond_list(
        &wm,
        &headers,
        format,
        "cases",
        view((!pii).then_some(privacy), docs),
        next,
        columns::CASE_COLUMNS,
    ))
}
