//! Routes of the read API. Every `/v1` answer carries the projection watermark
//! (`ISIR-Watermark`, `ISIR-Lag-Seconds`, and `watermark` in the body) and answers 503
//! before the `serve` phase.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use serde_json::{Value, json};

use super::openapi::{CaseListParams, EventParams, NoParams, PageParams, SubjectParams};
use super::{ApiState, Problem, queries};
use crate::phase::Phase;
use crate::projection::columns;
use crate::projection::fold::{ico_key, name_key, rc_key};
use crate::projection::sql::{Tx, Val};

pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/openapi.json", get(openapi_json))
        .route("/v1/cases/{year}/{number}", get(case))
        .route("/v1/cases/{year}/{number}/events", get(case_events))
        .route("/v1/subjects", get(subjects))
        .route("/v1/cases", get(case_list))
        .route("/v1/events", get(events))
        .route("/v1/stats", get(stats))
        .with_state(state)
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Watermark {
    /// The last action ID applied by every projection builder.
    pub action_id: i64,
    /// Its publication time, when it is an action of a case.
    pub published: Option<String>,
    /// Actions the replica holds beyond the watermark, in IDs.
    pub lag_ids: i64,
    /// Seconds since the slowest builder last moved, when it is behind; 0 when caught up.
    pub lag_seconds: i64,
    pub phase: String,
}

/// The watermark, the phase and whether every builder has a cursor, in one query.
async fn meta(tx: &mut Tx) -> Result<(Watermark, bool), Problem> {
    let row = tx
        .texts(
            "SELECT COALESCE((SELECT value FROM settings WHERE key = 'phase'), 'off') || '|' || \
             (SELECT COUNT(*) FROM proj_meta WHERE name NOT LIKE '%#next') || '|' || \
             COALESCE((SELECT MIN(cursor) FROM proj_meta WHERE name NOT LIKE '%#next'), -1) || '|' || \
             COALESCE((SELECT MIN(updated_at) FROM proj_meta WHERE name NOT LIKE '%#next'), 0) || '|' || \
             COALESCE((SELECT checkpoint FROM writer_state WHERE singleton = 1), -1) || '|' || \
             COALESCE((SELECT published FROM timeline WHERE action_id = \
                 (SELECT MIN(cursor) FROM proj_meta WHERE name NOT LIKE '%#next')), '')",
            &[],
        )
        .await?
        .pop()
        .unwrap_or_default();
    let f: Vec<&str> = row.splitn(6, '|').collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<i64>().ok());
    let (cursor, updated, checkpoint) = (
        num(2).unwrap_or(-1),
        num(3).unwrap_or(0),
        num(4).unwrap_or(-1),
    );
    let built = num(1).unwrap_or(0) >= crate::projection::NAMES.len() as i64;
    let lag_ids = (checkpoint - cursor).max(0);
    let lag_seconds = if lag_ids == 0 {
        0
    } else {
        ((crate::store::now_ms() - updated) / 1000).max(0)
    };
    Ok((
        Watermark {
            action_id: cursor,
            published: f.get(5).filter(|p| !p.is_empty()).map(|p| p.to_string()),
            lag_ids,
            lag_seconds,
            phase: f.first().unwrap_or(&"off").to_string(),
        },
        built,
    ))
}

/// The meta, from the cache when it is younger than `api.meta_cache_ms`. Projections only
/// move forward, so a cached watermark still holds: every action up to it is applied.
async fn cached_meta(state: &ApiState, tx: &mut Tx) -> Result<(Watermark, bool), Problem> {
    let ttl = state.opts.meta_cache;
    if !ttl.is_zero() {
        if let Some((at, m)) = state.meta.lock().expect("meta cache").as_ref() {
            if at.elapsed() < ttl {
                return Ok(m.clone());
            }
        }
    }
    let m = meta(tx).await?;
    if !ttl.is_zero() {
        *state.meta.lock().expect("meta cache") = Some((std::time::Instant::now(), m.clone()));
    }
    Ok(m)
}

/// Opens a read snapshot, checks the phase and reads the watermark.
pub(crate) async fn open(state: &ApiState) -> Result<(Tx, Watermark), Problem> {
    let tx = Tx::begin_read(&state.store).await?;
    gate(state, tx).await
}

/// Like [`open`] without a transaction, for an answer of one indexed, bounded statement
/// (on a SQLite file it runs on a direct connection, on this thread).
pub(crate) async fn open_single(state: &ApiState) -> Result<(Tx, Watermark), Problem> {
    let tx = match &state.direct {
        Some(pool) => Tx::Direct(pool.get().map_err(crate::store::direct::to_sqlx)?),
        None => Tx::single(&state.store).await?,
    };
    gate(state, tx).await
}

async fn gate(state: &ApiState, mut tx: Tx) -> Result<(Tx, Watermark), Problem> {
    let (wm, has_meta) = cached_meta(state, &mut tx).await?;
    if Phase::parse(&wm.phase).is_none_or(|p| p < Phase::Serve) {
        return Err(Problem::unavailable(format!(
            "the read API is off: the feed is in phase `{}`; it answers from phase `serve` (`isir phase set serve`)",
            wm.phase
        )));
    }
    if !has_meta {
        return Err(Problem::unavailable(
            "the projections are not built yet (`isir project catch-up`)",
        ));
    }
    Ok((tx, wm))
}

fn respond(wm: &Watermark, req: &HeaderMap, mut body: Value) -> Response {
    body["watermark"] = serde_json::to_value(wm).unwrap_or(Value::Null);
    respond_text(wm, req, body.to_string())
}

/// A JSON answer already rendered, with its ETag and the watermark headers.
fn respond_text(wm: &Watermark, req: &HeaderMap, text: String) -> Response {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    let etag = format!("\"{:016x}\"", h.finish());
    let mut resp =
        if req.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()) == Some(etag.as_str()) {
            StatusCode::NOT_MODIFIED.into_response()
        } else {
            ([(header::CONTENT_TYPE, "application/json")], text).into_response()
        };
    let hs = resp.headers_mut();
    hs.insert(header::ETAG, HeaderValue::from_str(&etag).expect("etag"));
    hs.insert(
        "ISIR-Watermark",
        HeaderValue::from_str(&wm.action_id.to_string()).expect("number"),
    );
    hs.insert(
        "ISIR-Lag-Seconds",
        HeaderValue::from_str(&wm.lag_seconds.to_string()).expect("number"),
    );
    resp
}

/// The representation a list is asked in: `?format=` wins over `Accept`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    Csv,
    Ndjson,
}

fn format_of(q: &HashMap<String, String>, req: &HeaderMap) -> Result<Format, Problem> {
    match q.get("format").map(String::as_str) {
        Some("json") => Ok(Format::Json),
        Some("csv") => Ok(Format::Csv),
        Some("ndjson") => Ok(Format::Ndjson),
        Some(other) => Err(Problem::bad(format!(
            "format {other:?}: one of json, csv, ndjson"
        ))),
        None => {
            let accept = req
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            Ok(if accept.contains("text/csv") {
                Format::Csv
            } else if accept.contains("application/x-ndjson") {
                Format::Ndjson
            } else {
                Format::Json
            })
        }
    }
}

/// A list in the asked representation. JSON carries `next` in the body; CSV and NDJSON
/// in a `Link: <...>; rel="next"` header. All carry the watermark headers.
fn respond_list(
    wm: &Watermark,
    req: &HeaderMap,
    format: Format,
    key: &str,
    items: Vec<Value>,
    next: Option<String>,
    columns: &[&str],
) -> Response {
    let (ctype, body) = match format {
        Format::Json => return respond(wm, req, json!({ key: items, "next": next })),
        Format::Ndjson => {
            let mut out = String::new();
            for i in &items {
                out.push_str(&i.to_string());
                out.push('\n');
            }
            ("application/x-ndjson", out)
        }
        Format::Csv => {
            let mut w = csv::Writer::from_writer(Vec::new());
            let _ = w.write_record(columns);
            for i in &items {
                // Every cell through the formula guard (JSON and NDJSON stay exact).
                let _ = w.write_record(
                    columns
                        .iter()
                        .map(|c| crate::privacy::csv_cell(&columns::cell(i, c)).into_owned()),
                );
            }
            (
                "text/csv; charset=utf-8",
                String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default(),
            )
        }
    };
    let mut resp = ([(header::CONTENT_TYPE, ctype)], body).into_response();
    let hs = resp.headers_mut();
    if let Some(n) = next.and_then(|n| HeaderValue::from_str(&format!("<{n}>; rel=\"next\"")).ok())
    {
        hs.insert(header::LINK, n);
    }
    hs.insert(
        "ISIR-Watermark",
        HeaderValue::from_str(&wm.action_id.to_string()).expect("number"),
    );
    hs.insert(
        "ISIR-Lag-Seconds",
        HeaderValue::from_str(&wm.lag_seconds.to_string()).expect("number"),
    );
    resp
}

/// Prometheus metrics.
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "Metrics in the Prometheus text format", body = String, content_type = "text/plain")))]
pub(crate) async fn metrics_text(State(state): State<ApiState>) -> Response {
    // Gauges read from the store at scrape time, so that every instance (also a read
    // replica without a poller) reports the shared state: checkpoint, projection cursors
    // and lag, today's budget.
    if let Some(src) = &state.status {
        let cp = src.store.checkpoint().await.ok().flatten();
        if let Some(cp) = cp {
            metrics::gauge!("isir_checkpoint").set(cp as f64);
        }
        if let Ok(metas) = crate::projection::metas(&src.store).await {
            for m in metas.iter().filter(|m| !m.name.contains('#')) {
                metrics::gauge!("isir_projection_cursor", "builder" => m.name.clone())
                    .set(m.cursor as f64);
                if let Some(cp) = cp {
                    metrics::gauge!("isir_projection_lag_ids", "builder" => m.name.clone())
                        .set((cp - m.cursor).max(0) as f64);
                }
            }
        }
        if let Ok(b) = src.budget.usage().await {
            metrics::gauge!("isir_budget_used").set(b.used as f64);
            metrics::gauge!("isir_budget_left").set(b.left as f64);
        }
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        crate::telemetry::handle().render(),
    )
        .into_response()
}

/// This description (OpenAPI 3.1).
#[utoipa::path(get, path = "/openapi.json", tag = "operations",
    responses((status = 200, description = "The OpenAPI description", body = Object)))]
pub(crate) async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        super::openapi::json(),
    )
        .into_response()
}

/// The process is up (whatever the phase).
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, description = "Up", body = crate::api::openapi::Health)))]
pub(crate) async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// Ready to serve: phase `serve` and the projections within `api.max_lag_ids` of the replica.
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses(
        (status = 200, description = "Ready", body = crate::api::openapi::Ready),
        (status = 503, description = "Not ready, with the reason", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "The projection could not be read", body = Problem, content_type = "application/problem+json"),
    ))]
pub(crate) async fn readyz(State(state): State<ApiState>) -> Response {
    let r: Result<(Watermark, bool), Problem> = async {
        let mut tx = Tx::begin_read(&state.store).await?;
        let m = meta(&mut tx).await?;
        tx.commit().await?;
        Ok(m)
    }
    .await;
    match r {
        Ok((wm, true)) if wm.phase == "serve" && wm.lag_ids <= state.opts.max_lag_ids => {
            Json(json!({"ready": true, "watermark": wm})).into_response()
        }
        Ok((_, false)) => {
            Problem::unavailable("not ready: the projections are not built yet").into_response()
        }
        Ok((wm, true)) => Problem::unavailable(format!(
            "not ready: phase `{}`, projections {} IDs behind the replica (at most {})",
            wm.phase, wm.lag_ids, state.opts.max_lag_ids
        ))
        .into_response(),
        Err(p) => p.into_response(),
    }
}

pub(crate) fn case_number(year: &str, number: &str) -> Result<String, Problem> {
    let y: i64 = year
        .parse()
        .map_err(|_| Problem::bad(format!("year {year:?} is not a number")))?;
    if !(2008..=2100).contains(&y) {
        return Err(Problem::bad(format!(
            "year {y} is outside 2008-2100 (the register starts in 2008)"
        )));
    }
    let n: i64 = number
        .parse()
        .map_err(|_| Problem::bad(format!("case number {number:?} is not a number")))?;
    if n < 1 {
        return Err(Problem::bad(format!("case number {n} must be positive")));
    }
    Ok(format!("INS {n}/{y}"))
}

/// Validates a search value and gives the `parties` column and key to look it up by:
/// `kind` is `ico`, `rc` or `name`; `param` names the parameter in messages.
pub(crate) fn search_key(
    param: &str,
    kind: &str,
    v: &str,
) -> Result<(&'static str, String), Problem> {
    match kind {
        "ico" => {
            if !(v.len() >= 6 && v.len() <= 12 && v.chars().all(|c| c.is_ascii_digit())) {
                return Err(Problem::bad(format!(
                    "{param} {v:?} is not an IČO (6 to 12 digits)"
                )));
            }
            Ok(("ico", ico_key(v)))
        }
        "rc" => {
            let digits: String = v.chars().filter(|c| *c != '/').collect();
            if !(digits.len() == 9 || digits.len() == 10)
                || !digits.chars().all(|c| c.is_ascii_digit())
                || v.matches('/').count() > 1
            {
                return Err(Problem::bad(format!(
                    "{param} {v:?} is not a birth number (NNNNNN/NNNN or NNNNNN/NNN)"
                )));
            }
            Ok(("rc", rc_key(v)))
        }
        _ => {
            let k = name_key(v);
            if k.is_empty() || v.chars().count() > 200 {
                return Err(Problem::bad(format!(
                    "{param} must have 1 to 200 characters"
                )));
            }
            Ok(("name_key", k))
        }
    }
}

/// Refuses a parameter the endpoint's description (`P`) does not name.
fn only<P: utoipa::IntoParams + 'static>(q: &HashMap<String, String>) -> Result<(), Problem> {
    let allowed = super::openapi::allowed::<P>();
    match q.keys().find(|k| !allowed.contains(k)) {
        Some(k) => Err(Problem::bad(format!(
            "unknown parameter {k:?}; this endpoint takes {}",
            allowed.join(", ")
        ))),
        None => Ok(()),
    }
}

fn limit(state: &ApiState, q: &HashMap<String, String>) -> Result<i64, Problem> {
    match q.get("limit") {
        None => Ok(state.opts.default_limit),
        Some(l) => {
            let n: i64 = l
                .parse()
                .map_err(|_| Problem::bad(format!("limit {l:?} is not a number")))?;
            if n < 1 || n > state.opts.max_limit {
                return Err(Problem::bad(format!(
                    "limit {n} is outside 1-{}",
                    state.opts.max_limit
                )));
            }
            Ok(n)
        }
    }
}

/// Cuts the rows of a list query (which asked for `limit + 1`) to the page, and tells
/// whether there is a next page.
fn page(mut items: Vec<Value>, limit: i64) -> (Vec<Value>, bool) {
    let more = items.len() as i64 > limit;
    items.truncate(limit as usize);
    (items, more)
}

/// Parses JSON documents read from a projection.
fn docs(rows: &[String]) -> Result<Vec<Value>, Problem> {
    rows.iter()
        .map(|r| serde_json::from_str(r))
        .collect::<Result<_, _>>()
        .map_err(Problem::internal)
}

/// A cursor: the keyset position sealed with the replica's key (a person ID never
/// leaves in a page link).
fn encode_cursor(p: &crate::privacy::Privacy, parts: &[String]) -> String {
    p.seal(parts)
}

fn decode_cursor(p: &crate::privacy::Privacy, c: &str, n: usize) -> Result<Vec<String>, Problem> {
    p.unseal(c, n).ok_or_else(|| {
        Problem::bad("the cursor is malformed or not this replica's; use the `next` link of the previous page")
    })
}

/// The caller's view of projection documents: as stored for the `pii` scope, through
/// the privacy mask otherwise.
fn view(p: Option<&crate::privacy::Privacy>, docs: Vec<Value>) -> Vec<Value> {
    match p {
        None => docs,
        Some(p) => docs.into_iter().map(|d| p.mask(d)).collect(),
    }
}

/// One case with court, state and its history, debtors, administrator, key dates and
/// erasure status.
#[utoipa::path(get, path = "/v1/cases/{year}/{number}", tag = "cases",
    params(crate::api::openapi::CasePath, crate::api::openapi::NoParams),
    responses(
        (status = 200, description = "The case", body = crate::api::openapi::CaseAnswer, headers(("ISIR-Watermark" = i64, description = "Last action ID applied by every projection builder"),
                ("ISIR-Lag-Seconds" = i64, description = "Seconds the projection is behind the replica"))),
        (status = 304, description = "Not modified (`If-None-Match`)"),
        (status = 404, description = "No such case", body = Problem, content_type = "application/problem+json"),
        crate::api::openapi::V1Errors,
    ))]
pub(crate) async fn case(
    State(state): State<ApiState>,
    Path((year, number)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    caller: Option<axum::Extension<super::guard::Caller>>,
) -> Result<Response, Problem> {
    only::<NoParams>(&q)?;
    let pii = caller.is_some_and(|c| c.pii);
    let cn = case_number(&year, &number)?;
    let (mut tx, wm) = open_single(&state).await?;
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
    params(crate::api::openapi::CasePath, crate::api::openapi::PageParams),
    responses(
        (status = 200, description = "A page of the timeline; CSV and NDJSON carry `next` in a `Link` header", headers(("ISIR-Watermark" = i64, description = "Last action ID applied by every projection builder"),
                ("ISIR-Lag-Seconds" = i64, description = "Seconds the projection is behind the replica")),
            content((crate::api::openapi::EventList = "application/json"), (String = "text/csv"), (String = "application/x-ndjson"))),
        (status = 304, description = "Not modified (`If-None-Match`)"),
        (status = 404, description = "No such case", body = Problem, content_type = "application/problem+json"),
        crate::api::openapi::V1Errors,
    ))]
pub(crate) async fn case_events(
    State(state): State<ApiState>,
    Path((year, number)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    only::<PageParams>(&q)?;
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
    let (mut tx, wm) = open(&state).await?;
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

/// Persons matching an IČO, a birth number or a name, once per case and role.
#[utoipa::path(get, path = "/v1/subjects", tag = "subjects",
    params(crate::api::openapi::SubjectParams),
    responses(
        (status = 200, description = "A page of persons; CSV and NDJSON carry `next` in a `Link` header", headers(("ISIR-Watermark" = i64, description = "Last action ID applied by every projection builder"),
                ("ISIR-Lag-Seconds" = i64, description = "Seconds the projection is behind the replica")),
            content((crate::api::openapi::SubjectList = "application/json"), (String = "text/csv"), (String = "application/x-ndjson"))),
        (status = 304, description = "Not modified (`If-None-Match`)"),
        crate::api::openapi::V1Errors,
    ))]
pub(crate) async fn subjects(
    State(state): State<ApiState>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    caller: Option<axum::Extension<super::guard::Caller>>,
) -> Result<Response, Problem> {
    let pii = caller.is_some_and(|c| c.pii);
    only::<SubjectParams>(&q)?;
    let format = format_of(&q, &headers)?;
    let limit = limit(&state, &q)?;
    let given: Vec<&str> = ["ico", "rc", "name"]
        .into_iter()
        .filter(|k| q.contains_key(*k))
        .collect();
    if given.len() != 1 {
        return Err(Problem::bad("give exactly one of ico, rc or name"));
    }
    let (col, key) = search_key(given[0], given[0], &q[given[0]])?;
    if col == "rc" && !pii {
        return Err(Problem::needs_pii("a search by birth number"));
    }
    let privacy = state.privacy().await?;
    let after = match q.get("cursor") {
        Some(c) => decode_cursor(privacy, c, 3)?,
        None => vec![String::new(), String::new(), String::new()],
    };
    let (mut tx, wm) = open_single(&state).await?;
    let mut rows = queries::subjects_text(&mut tx, col, &key, &after, limit + 1).await?;
    tx.commit().await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next = match rows.last().filter(|_| more) {
        None => None,
        Some(l) => {
            let parts: Vec<String> = columns::cells(l, &["case_number", "court", "person_id"])
                .map_err(Problem::internal)?
                .iter()
                .map(|c| c.as_str().to_string())
                .collect();
            let qk = given[0];
            let f = q
                .get("format")
                .map(|f| format!("&format={f}"))
                .unwrap_or_default();
            Some(format!(
                "/v1/subjects?{qk}={}&limit={limit}&cursor={}{f}",
                url_escape(&q[qk]),
                url_escape(&encode_cursor(privacy, &parts))
            ))
        }
    };
    if format == Format::Json {
        // The stored documents go out as they are, but those that hold PII to mask.
        let mut body = String::with_capacity(rows.iter().map(|r| r.len() + 1).sum::<usize>() + 256);
        body.push_str("{\"next\":");
        body.push_str(&serde_json::to_string(&next).map_err(Problem::internal)?);
        body.push_str(",\"subjects\":[");
        for (i, r) in rows.iter().enumerate() {
            if i > 0 {
                body.push(',');
            }
            if pii {
                body.push_str(r);
            } else {
                let v: Value = serde_json::from_str(r).map_err(Problem::internal)?;
                body.push_str(&privacy.mask(v).to_string());
            }
        }
        body.push_str("],\"watermark\":");
        body.push_str(&serde_json::to_string(&wm).map_err(Problem::internal)?);
        body.push('}');
        return Ok(respond_text(&wm, &headers, body));
    }
    let persons = view((!pii).then_some(privacy), docs(&rows)?);
    Ok(respond_list(
        &wm,
        &headers,
        format,
        "subjects",
        persons,
        next,
        columns::SUBJECT_COLUMNS,
    ))
}

/// The request's parameters but `drop`, escaped, in a stable order (for `next` links).
fn query_except(q: &HashMap<String, String>, drop: &[&str]) -> Vec<String> {
    let mut qs: Vec<String> = q
        .iter()
        .filter(|(k, _)| !drop.contains(&k.as_str()))
        .map(|(k, v)| format!("{k}={}", url_escape(v)))
        .collect();
    qs.sort();
    qs
}

pub(crate) fn url_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn date_param(q: &HashMap<String, String>, k: &str) -> Result<Option<String>, Problem> {
    match q.get(k) {
        None => Ok(None),
        Some(v) => chrono::NaiveDate::parse_from_str(v, "%Y-%m-%d")
            .map(|d| Some(d.format("%Y-%m-%d").to_string()))
            .map_err(|_| Problem::bad(format!("{k} {v:?} is not a date (YYYY-MM-DD)"))),
    }
}

fn court_param(
    q: &HashMap<String, String>,
) -> Result<Option<&'static crate::codes::Court>, Problem> {
    match q.get("court") {
        None => Ok(None),
        Some(c) => crate::codes::COURTS
            .iter()
            .find(|x| x.short.eq_ignore_ascii_case(c) || x.code.eq_ignore_ascii_case(c))
            .map(Some)
            .ok_or_else(|| {
                let known: Vec<&str> = crate::codes::COURTS.iter().map(|x| x.short).collect();
                Problem::bad(format!("unknown court {c:?}; one of {}", known.join(", ")))
            }),
    }
}

/// Cases matching every given filter, by date opened or by latest action.
#[utoipa::path(get, path = "/v1/cases", tag = "cases",
    params(crate::api::openapi::CaseListParams),
    responses(
        (status = 200, description = "A page of cases; CSV and NDJSON carry `next` in a `Link` header", headers(("ISIR-Watermark" = i64, description = "Last action ID applied by every projection builder"),
                ("ISIR-Lag-Seconds" = i64, description = "Seconds the projection is behind the replica")),
            content((crate::api::openapi::CaseList = "application/json"), (String = "text/csv"), (String = "application/x-ndjson"))),
        (status = 304, description = "Not modified (`If-None-Match`)"),
        crate::api::openapi::V1Errors,
    ))]
pub(crate) async fn case_list(
    State(state): State<ApiState>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    caller: Option<axum::Extension<super::guard::Caller>>,
) -> Result<Response, Problem> {
    only::<CaseListParams>(&q)?;
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
    for (param, kind) in [
        ("debtor_ico", "ico"),
        ("debtor_rc", "rc"),
        ("debtor_name", "name"),
    ] {
        if let Some(v) = q.get(param) {
            let (col, key) = search_key(param, kind, v)?;
            add(&sub(col), key.into(), &mut binds);
        }
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
    let (mut tx, wm) = open(&state).await?;
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

/// The change feed: every action after an ID, in ID order.
#[utoipa::path(get, path = "/v1/events", tag = "events",
    params(crate::api::openapi::EventParams),
    responses(
        (status = 200, description = "A page of the feed; CSV and NDJSON carry `next` in a `Link` header", headers(("ISIR-Watermark" = i64, description = "Last action ID applied by every projection builder"),
                ("ISIR-Lag-Seconds" = i64, description = "Seconds the projection is behind the replica")),
            content((crate::api::openapi::EventList = "application/json"), (String = "text/csv"), (String = "application/x-ndjson"))),
        (status = 304, description = "Not modified (`If-None-Match`)"),
        crate::api::openapi::V1Errors,
    ))]
pub(crate) async fn events(
    State(state): State<ApiState>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    only::<EventParams>(&q)?;
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
    if let Some(t) = q.get("type") {
        if t.is_empty() || !t.chars().all(|c| c.is_ascii_digit()) {
            return Err(Problem::bad(format!(
                "type {t:?} is not an action-type code"
            )));
        }
        binds.push(t.as_str().into());
        conds.push(format!("type_code = ${}", binds.len()));
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
    let (mut tx, wm) = open(&state).await?;
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

/// Cases by state, court and month opened.
#[utoipa::path(get, path = "/v1/stats", tag = "cases",
    params(crate::api::openapi::NoParams),
    responses(
        (status = 200, description = "Counts", body = crate::api::openapi::Stats, headers(("ISIR-Watermark" = i64, description = "Last action ID applied by every projection builder"),
                ("ISIR-Lag-Seconds" = i64, description = "Seconds the projection is behind the replica"))),
        (status = 304, description = "Not modified (`If-None-Match`)"),
        crate::api::openapi::V1Errors,
    ))]
pub(crate) async fn stats(
    State(state): State<ApiState>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    only::<NoParams>(&q)?;
    let (mut tx, wm) = open(&state).await?;
    let rows = tx.texts("SELECT dim || '|' || key || '|' || CAST(count AS TEXT) FROM stats WHERE count <> 0 ORDER BY dim, key", &[]).await?;
    tx.commit().await?;
    let mut out = json!({"by_state": {}, "by_court": {}, "by_month": {}});
    for r in rows {
        let mut f = r.splitn(3, '|');
        let (Some(dim), Some(key), Some(n)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let n: i64 = n.parse().unwrap_or(0);
        out[format!("by_{dim}")][key] = json!(n);
    }
    Ok(respond(&wm, &headers, out))
}
