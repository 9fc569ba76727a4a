//! Routes of the read API. Every `/v1` answer carries the projection watermark
//! (`ISIR-Watermark`, `ISIR-Lag-Seconds`, and `watermark` in the body) and answers 503
//! before the `serve` phase.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use base64::Engine;
use serde::Serialize;
use serde_json::{json, Value};

use super::{ApiState, Problem};
use crate::phase::Phase;
use crate::projection::fold::{ico_key, name_key, rc_key};
use crate::projection::sql::{Tx, Val};

pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/v1/cases/{year}/{number}", get(case))
        .route("/v1/cases/{year}/{number}/events", get(case_events))
        .route("/v1/subjects", get(subjects))
        .with_state(state)
}

#[derive(Debug, Clone, Serialize)]
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

async fn watermark(tx: &mut Tx) -> Result<Watermark, Problem> {
    let phase = tx.texts("SELECT value FROM settings WHERE key = 'phase'", &[]).await?.pop().unwrap_or_else(|| "off".into());
    let cursor = tx.int("SELECT MIN(cursor) FROM proj_meta WHERE name NOT LIKE '%#next'", &[]).await?.unwrap_or(-1);
    let updated = tx.int("SELECT MIN(updated_at) FROM proj_meta WHERE name NOT LIKE '%#next'", &[]).await?.unwrap_or(0);
    let checkpoint = tx.int("SELECT checkpoint FROM writer_state WHERE singleton = 1", &[]).await?.unwrap_or(-1);
    let published = tx.texts("SELECT published FROM timeline WHERE action_id = $1", &[cursor.into()]).await.ok().and_then(|mut v| v.pop());
    let lag_ids = (checkpoint - cursor).max(0);
    let lag_seconds = if lag_ids == 0 { 0 } else { ((crate::store::now_ms() - updated) / 1000).max(0) };
    Ok(Watermark { action_id: cursor, published, lag_ids, lag_seconds, phase })
}

/// Opens a read snapshot, checks the phase and reads the watermark.
async fn open(state: &ApiState) -> Result<(Tx, Watermark), Problem> {
    let mut tx = Tx::begin_read(&state.store).await?;
    let has_meta = tx.int("SELECT COUNT(*) FROM proj_meta", &[]).await?.unwrap_or(0) >= 3;
    let wm = watermark(&mut tx).await?;
    if Phase::parse(&wm.phase).is_none_or(|p| p < Phase::Serve) || !has_meta {
        return Err(Problem::unavailable(format!(
            "the read API is off: the feed is in phase `{}`; it answers from phase `serve` (`isir phase set serve`)",
            wm.phase
        )));
    }
    Ok((tx, wm))
}

fn respond(wm: &Watermark, req: &HeaderMap, mut body: Value) -> Response {
    body["watermark"] = serde_json::to_value(wm).unwrap_or(Value::Null);
    let text = body.to_string();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    let etag = format!("\"{:016x}\"", h.finish());
    let mut resp = if req.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()) == Some(etag.as_str()) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, "application/json")], text).into_response()
    };
    let hs = resp.headers_mut();
    hs.insert(header::ETAG, HeaderValue::from_str(&etag).expect("etag"));
    hs.insert("ISIR-Watermark", HeaderValue::from_str(&wm.action_id.to_string()).expect("number"));
    hs.insert("ISIR-Lag-Seconds", HeaderValue::from_str(&wm.lag_seconds.to_string()).expect("number"));
    resp
}

async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn readyz(State(state): State<ApiState>) -> Response {
    let r: Result<Watermark, Problem> = async {
        let mut tx = Tx::begin_read(&state.store).await?;
        let wm = watermark(&mut tx).await?;
        tx.commit().await?;
        Ok(wm)
    }
    .await;
    match r {
        Ok(wm) if wm.phase == "serve" && wm.lag_ids <= state.opts.max_lag_ids => {
            Json(json!({"ready": true, "watermark": wm})).into_response()
        }
        Ok(wm) => Problem::unavailable(format!(
            "not ready: phase `{}`, projections {} IDs behind the replica (at most {})",
            wm.phase, wm.lag_ids, state.opts.max_lag_ids
        ))
        .into_response(),
        Err(p) => p.into_response(),
    }
}

fn case_number(year: &str, number: &str) -> Result<String, Problem> {
    let y: i64 = year.parse().map_err(|_| Problem::bad(format!("year {year:?} is not a number")))?;
    if !(2008..=2100).contains(&y) {
        return Err(Problem::bad(format!("year {y} is outside 2008-2100 (the register starts in 2008)")));
    }
    let n: i64 = number.parse().map_err(|_| Problem::bad(format!("case number {number:?} is not a number")))?;
    if n < 1 {
        return Err(Problem::bad(format!("case number {n} must be positive")));
    }
    Ok(format!("INS {n}/{y}"))
}

fn only(q: &HashMap<String, String>, allowed: &[&str]) -> Result<(), Problem> {
    match q.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(Problem::bad(format!("unknown parameter {k:?}; this endpoint takes {}", allowed.join(", ")))),
        None => Ok(()),
    }
}

fn limit(state: &ApiState, q: &HashMap<String, String>) -> Result<i64, Problem> {
    match q.get("limit") {
        None => Ok(state.opts.default_limit),
        Some(l) => {
            let n: i64 = l.parse().map_err(|_| Problem::bad(format!("limit {l:?} is not a number")))?;
            if n < 1 || n > state.opts.max_limit {
                return Err(Problem::bad(format!("limit {n} is outside 1-{}", state.opts.max_limit)));
            }
            Ok(n)
        }
    }
}

fn encode_cursor(parts: &[String]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(parts).unwrap_or_default())
}

fn decode_cursor(c: &str, n: usize) -> Result<Vec<String>, Problem> {
    let bad = || Problem::bad(format!("cursor {c:?} is malformed; use the `next` link of the previous page"));
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(c).map_err(|_| bad())?;
    let v: Vec<String> = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    if v.len() != n {
        return Err(bad());
    }
    Ok(v)
}

async fn case(
    State(state): State<ApiState>,
    Path((year, number)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    only(&q, &[])?;
    let cn = case_number(&year, &number)?;
    let (mut tx, wm) = open(&state).await?;
    let doc = tx.texts("SELECT doc FROM cases WHERE case_number = $1", &[cn.as_str().into()]).await?.pop();
    tx.commit().await?;
    let Some(doc) = doc else {
        return Err(Problem::not_found(format!("no case {cn} in the replica (as of action {})", wm.action_id)));
    };
    let case: Value = serde_json::from_str(&doc).map_err(Problem::internal)?;
    Ok(respond(&wm, &headers, json!({ "case": case })))
}

fn event_json_sql(pg: bool) -> String {
    let b = |c: &str| if pg { c.to_string() } else { format!("json(CASE WHEN {c} THEN 'true' ELSE 'false' END)") };
    let f = if pg { "json_build_object" } else { "json_object" };
    let cols = [
        "action_id", "case_number", "court", "type_code", "type_name", "source_type_name", "section", "number_in_section",
        "document_url", "published", "created", "slot_action_id",
    ];
    let mut parts: Vec<String> = cols.iter().map(|c| format!("'{c}', {c}")).collect();
    parts.push(format!("'secondary_action', {}", b("secondary_action")));
    parts.push(format!("'secondary_document', {}", b("secondary_document")));
    for c in ["legal_force_date", "corrected_published", "annulled"] {
        parts.push(format!("'{c}', {c}"));
    }
    let cast = if pg { "::text" } else { "" };
    format!("{f}({}){cast}", parts.join(", "))
}

async fn case_events(
    State(state): State<ApiState>,
    Path((year, number)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    only(&q, &["limit", "cursor"])?;
    let cn = case_number(&year, &number)?;
    let limit = limit(&state, &q)?;
    let after: i64 = match q.get("cursor") {
        Some(c) => decode_cursor(c, 1)?[0].parse().map_err(|_| Problem::bad("cursor is malformed"))?,
        None => i64::MIN,
    };
    let (mut tx, wm) = open(&state).await?;
    let exists = tx.int("SELECT COUNT(*) FROM cases WHERE case_number = $1", &[cn.as_str().into()]).await?.unwrap_or(0) > 0;
    if !exists {
        return Err(Problem::not_found(format!("no case {cn} in the replica (as of action {})", wm.action_id)));
    }
    let sql = format!(
        "SELECT {} FROM timeline WHERE case_number = $1 AND action_id > $2 ORDER BY action_id LIMIT $3",
        event_json_sql(tx.is_postgres())
    );
    let rows = tx.texts(&sql, &[cn.as_str().into(), after.into(), Val::from(limit + 1)]).await?;
    tx.commit().await?;
    let mut events: Vec<Value> = rows.iter().map(|r| serde_json::from_str(r)).collect::<Result<_, _>>().map_err(Problem::internal)?;
    let more = events.len() as i64 > limit;
    events.truncate(limit as usize);
    let next = more.then(|| {
        let last = events.last().and_then(|e| e["action_id"].as_i64()).unwrap_or_default();
        format!("/v1/cases/{year}/{number}/events?limit={limit}&cursor={}", encode_cursor(&[last.to_string()]))
    });
    Ok(respond(&wm, &headers, json!({ "case_number": cn, "events": events, "next": next })))
}

/// Birth numbers and birth dates are masked for callers without the `pii` scope (API
/// keys come with the API-key issue; until then everyone is masked).
fn mask(mut p: Value) -> Value {
    for k in ["birth_number", "birth_date"] {
        if p[k].is_string() {
            p[k] = Value::String("***".into());
        }
    }
    p
}

async fn subjects(
    State(state): State<ApiState>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    only(&q, &["ico", "rc", "name", "limit", "cursor"])?;
    let limit = limit(&state, &q)?;
    let given: Vec<&str> = ["ico", "rc", "name"].into_iter().filter(|k| q.contains_key(*k)).collect();
    if given.len() != 1 {
        return Err(Problem::bad("give exactly one of ico, rc or name"));
    }
    let (col, key) = match given[0] {
        "ico" => {
            let v = &q["ico"];
            if !(v.len() >= 6 && v.len() <= 12 && v.chars().all(|c| c.is_ascii_digit())) {
                return Err(Problem::bad(format!("ico {v:?} is not an IČO (6 to 12 digits)")));
            }
            ("ico", ico_key(v))
        }
        "rc" => {
            let v = &q["rc"];
            let digits: String = v.chars().filter(|c| *c != '/').collect();
            if !(digits.len() == 9 || digits.len() == 10) || !digits.chars().all(|c| c.is_ascii_digit()) || v.matches('/').count() > 1 {
                return Err(Problem::bad(format!("rc {v:?} is not a birth number (NNNNNN/NNNN or NNNNNN/NNN)")));
            }
            ("rc", rc_key(v))
        }
        _ => {
            let v = &q["name"];
            let k = name_key(v);
            if k.is_empty() || v.chars().count() > 200 {
                return Err(Problem::bad("name must have 1 to 200 characters"));
            }
            ("name_key", k)
        }
    };
    let after = match q.get("cursor") {
        Some(c) => decode_cursor(c, 3)?,
        None => vec![String::new(), String::new(), String::new()],
    };
    let (mut tx, wm) = open(&state).await?;
    let sql = format!(
        "SELECT doc FROM parties WHERE {col} = $1 AND (case_number, court, person_id) > ($2, $3, $4) \
         ORDER BY case_number, court, person_id LIMIT $5"
    );
    let binds = [key.as_str().into(), after[0].as_str().into(), after[1].as_str().into(), after[2].as_str().into(), Val::from(limit + 1)];
    let rows = tx.texts(&sql, &binds).await?;
    tx.commit().await?;
    let mut persons: Vec<Value> = rows.iter().map(|r| serde_json::from_str(r)).collect::<Result<_, _>>().map_err(Problem::internal)?;
    let more = persons.len() as i64 > limit;
    persons.truncate(limit as usize);
    let next = more.then(|| {
        let l = persons.last().cloned().unwrap_or_default();
        let parts = ["case_number", "court", "person_id"].map(|k| l[k].as_str().unwrap_or_default().to_string());
        let qk = given[0];
        format!(
            "/v1/subjects?{qk}={}&limit={limit}&cursor={}",
            url_escape(&q[qk]),
            encode_cursor(&parts)
        )
    });
    let persons: Vec<Value> = persons.into_iter().map(mask).collect();
    Ok(respond(&wm, &headers, json!({ "subjects": persons, "next": next })))
}

fn url_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
