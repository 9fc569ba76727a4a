//! The cases resource: one case (`/v1/cases/{year}/{number}`), its timeline
//! (`.../events`) and the filtered case list (`/v1/cases`).
//!
//! Reads the `cases` and `timeline` projections through the read side's snapshot;
//! never reads `actions`, never writes.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;

use super::format::{count_of, format_of, respond_docs, respond_list, respond_text, with_count};
use super::pagination::{decode_cursor, encode_cursor, last_action_id, limit, page, query_except};
use super::params::{
    CaseListParams, Code, KNOWN_DEBTOR_KINDS, NoParams, PageParams, Params, court_param,
    date_param, only,
};
use super::stream;
use crate::read::lists::{self, CaseQuery, Sort};
use crate::read::params::{case_number, search_key, url_escape};
use crate::read::{Caller, Problem, ReadState, queries, watermark};
use crate::readmodel::columns;
use crate::store::sql::{Tx, Val};

/// One case with court, state and its history, debtors, administrator, key dates and
/// erasure status.
#[utoipa::path(get, path = "/v1/cases/{year}/{number}", tag = "cases",
    params(crate::api::params::CasePath, crate::api::params::NoParams),
    responses(
        (status = 200, description = "The case", body = crate::api::schema::CaseAnswer, headers(("ISIR-Watermark" = i64, description = "Last action ID applied by every projection builder"),
                ("ISIR-Lag-Seconds" = i64, description = "Seconds the projection is behind the replica"))),
        (status = 304, description = "Not modified (`If-None-Match`)"),
        (status = 404, description = "No such case", body = Problem, content_type = "application/problem+json"),
        crate::api::schema::V1Errors,
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
    let held = if doc.is_some() {
        queries::quarantined_actions(&mut tx, &cn).await?
    } else {
        0
    };
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
    // Present only when an action of the case is held back (the case is incomplete).
    let held = if held > 0 {
        format!(",\"quarantined_actions\":{held}")
    } else {
        String::new()
    };
    let etag = super::format::weak_etag(&[b"case", case.as_bytes(), held.as_bytes()]);
    Ok(respond_text(
        &wm,
        &headers,
        format!("{{\"case\":{case}{held},\"watermark\":{wm_json}}}"),
        etag,
    ))
}

/// A case's timeline in action-ID order, with document links.
#[utoipa::path(get, path = "/v1/cases/{year}/{number}/events", tag = "cases",
    params(crate::api::params::CasePath, crate::api::params::PageParams),
    responses(
        (status = 200, description = "A page of the timeline; CSV and NDJSON carry `next` in a `Link` header", headers(("ISIR-Watermark" = i64, description = "Last action ID applied by every projection builder"),
                ("ISIR-Lag-Seconds" = i64, description = "Seconds the projection is behind the replica")),
            content((crate::api::schema::EventList = "application/json"), (String = "text/csv"), (String = "application/x-ndjson"))),
        (status = 304, description = "Not modified (`If-None-Match`)"),
        (status = 404, description = "No such case", body = Problem, content_type = "application/problem+json"),
        crate::api::schema::V1Errors,
    ))]
pub(crate) async fn case_events(
    State(state): State<ReadState>,
    Path((year, number)): Path<(String, String)>,
    q: Params,
    headers: HeaderMap,
    caller: Option<axum::Extension<Caller>>,
) -> Result<Response, Problem> {
    only::<PageParams>(&q, &[])?;
    let format = format_of(&q, &headers)?;
    let streaming = stream::asked(&q, format)?;
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
    if streaming {
        let pages = TimelinePages {
            case: cn,
            after: i64::MIN,
        };
        let caller = caller.as_ref().map(|c| &c.0);
        return stream::respond(
            &state,
            caller,
            format,
            &wm,
            tx,
            pages,
            columns::EVENT_COLUMNS,
        )
        .await;
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

/// A case's timeline page after page (a whole-result stream).
struct TimelinePages {
    case: String,
    after: i64,
}

#[async_trait::async_trait]
impl stream::Pages for TimelinePages {
    async fn next(&mut self, tx: &mut Tx, n: i64) -> Result<Vec<String>, Problem> {
        let rows = queries::case_events_text(tx, &self.case, self.after, n).await?;
        if let Some(last) = last_action_id(&rows)? {
            self.after = last;
        }
        Ok(rows)
    }
}

/// The field of a case document a sort orders by (the cursor's first part).
fn sort_key(sort: Sort) -> &'static str {
    match sort {
        Sort::Opened => "opened",
        Sort::Latest => "latest_action_id",
        Sort::Updated => "latest_published",
    }
}

/// The case list page after page (a whole-result stream).
struct CasePages {
    q: CaseQuery,
    at: lists::Source,
    sort: Sort,
}

#[async_trait::async_trait]
impl stream::Pages for CasePages {
    async fn next(&mut self, tx: &mut Tx, n: i64) -> Result<Vec<String>, Problem> {
        self.q.limit = n;
        let (sql, binds) = lists::case_list(&self.q, &self.at)?;
        let rows = tx.texts(&sql, &binds).await?;
        if let Some(l) = rows.last() {
            let c = columns::cells(l, &[sort_key(self.sort), "case_number"])
                .map_err(Problem::internal)?;
            self.q.after = Some([c[0].as_str().to_string(), c[1].as_str().to_string()]);
        }
        Ok(rows)
    }
}

/// Cases matching every given filter, by date opened or by latest action.
#[utoipa::path(get, path = "/v1/cases", tag = "cases",
    params(crate::api::params::CaseListParams),
    responses(
        (status = 200, description = "A page of cases; CSV and NDJSON carry `next` in a `Link` header", headers(("ISIR-Watermark" = i64, description = "Last action ID applied by every projection builder"),
                ("ISIR-Lag-Seconds" = i64, description = "Seconds the projection is behind the replica")),
            content((crate::api::schema::CaseList = "application/json"), (String = "text/csv"), (String = "application/x-ndjson"))),
        (status = 304, description = "Not modified (`If-None-Match`)"),
        crate::api::schema::V1Errors,
    ))]
pub(crate) async fn case_list(
    State(state): State<ReadState>,
    q: Params,
    headers: HeaderMap,
    caller: Option<axum::Extension<Caller>>,
) -> Result<Response, Problem> {
    only::<CaseListParams>(&q, &["debtor_ico"])?;
    let pii = caller.as_ref().is_some_and(|c| c.pii);
    if q.contains_key("debtor_rc") && !pii {
        return Err(Problem::needs_pii("a filter by birth number (debtor_rc)"));
    }
    let privacy = state.privacy().await?;
    let format = format_of(&q, &headers)?;
    let limit = limit(&state, &q)?;
    let sort = Sort::parse(q.get("sort").map(String::as_str).unwrap_or("opened"))?;
    let mut cq = CaseQuery {
        sort: Some(sort),
        limit: limit + 1,
        ..CaseQuery::default()
    };
    if let Some(c) = court_param(&q)? {
        cq.equal.push(("court_short", c.short.to_string()));
    }
    // Codes: the documented ones whatever their case and diacritics; another value only
    // if the projection holds it (looked up below, once the snapshot is open).
    let mut codes: Vec<(&'static str, &'static [&'static str], Code)> = Vec::new();
    for (param, known) in [
        ("state", crate::readmodel::KNOWN_STATES),
        ("debtor_kind", KNOWN_DEBTOR_KINDS),
    ] {
        if let Some(v) = q.get(param) {
            let c = Code::of(v, known);
            cq.equal.push((param, c.value().to_string()));
            codes.push((param, known, c));
        }
    }
    cq.opened_from = date_param(&q, "opened_from")?;
    cq.opened_to = date_param(&q, "opened_to")?;
    cq.updated_since = date_param(&q, "updated_since")?;
    // A debtor filter: one of birth number, name, or IČOs (cases of any of them).
    let mut debtor: Vec<(&'static str, String)> = Vec::new();
    for (param, kind) in [("debtor_rc", "rc"), ("debtor_name", "name")] {
        if let Some(v) = q.get(param) {
            debtor.push(search_key(param, kind, v)?);
        }
    }
    for v in q.all("debtor_ico") {
        debtor.push(search_key("debtor_ico", "ico", v)?);
    }
    if let Some((col, _)) = debtor.first() {
        if debtor.iter().any(|(c, _)| c != col) {
            return Err(Problem::bad(
                "give one kind of debtor filter: debtor_ico (repeatable), debtor_rc or debtor_name",
            ));
        }
        cq.debtor = Some((col, debtor.iter().map(|(_, k)| k.clone()).collect()));
    }
    if let Some(c) = q.get("cursor") {
        let v = decode_cursor(privacy, c, 2)?;
        cq.after = Some([v[0].clone(), v[1].clone()]);
    }
    let streaming = stream::asked(&q, format)?;
    let counting = count_of(&q, &headers)?;
    let (mut tx, wm) = watermark::open_list(
        &state,
        streaming || counting.is_some(),
        crate::read::limit::Plans::Kept,
    )
    .await?;
    let at = lists::source(&mut tx, "cases").await?;
    for (param, known, c) in &codes {
        if let Code::Other(v) = c {
            let held = tx
                .texts(
                    &format!("SELECT '1' FROM {} WHERE {param} = $1 LIMIT 1", at.cases()),
                    &[Val::from(v.as_str())],
                )
                .await?;
            if held.is_empty() {
                return Err(Code::refuse(param, v, known));
            }
        }
    }
    if streaming {
        let pages = CasePages { q: cq, at, sort };
        let caller = caller.as_ref().map(|c| &c.0);
        return stream::respond(
            &state,
            caller,
            format,
            &wm,
            tx,
            pages,
            columns::CASE_COLUMNS,
        )
        .await;
    }
    let (sql, binds) = lists::case_list(&cq, &at)?;
    let rows = tx.texts(&sql, &binds).await?;
    let counted = match counting {
        Some(kind) => {
            let whole = CaseQuery {
                after: None,
                ..cq.clone()
            };
            let (sql, binds) = lists::case_list(&whole, &at)?;
            Some(lists::count(&mut tx, &sql, &binds, kind).await?)
        }
        None => None,
    };
    tx.commit().await?;
    let (rows, more) = page(rows, limit);
    let next = match rows.last().filter(|_| more) {
        None => None,
        Some(l) => {
            let c =
                columns::cells(l, &[sort_key(sort), "case_number"]).map_err(Problem::internal)?;
            let mut qs = query_except(&q, &["cursor", "limit"]);
            qs.push(format!("limit={limit}"));
            qs.push(format!(
                "cursor={}",
                url_escape(&encode_cursor(
                    privacy,
                    &[c[0].as_str().to_string(), c[1].as_str().to_string()]
                ))
            ));
            Some(format!("/v1/cases?{}", qs.join("&")))
        }
    };
    Ok(with_count(
        respond_docs(
            &wm,
            &headers,
            format,
            "cases",
            rows,
            (!pii).then_some(privacy),
            next,
            columns::CASE_COLUMNS,
            counted.as_ref(),
        )?,
        counted,
    ))
}
