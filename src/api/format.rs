//! Representations of an answer: JSON, CSV and NDJSON (`?format=` wins over `Accept`),
//! with the watermark headers and the ETag every `/v1` answer carries.
//!
//! Owns rendering only; the rows come from the resource handlers. Every CSV cell goes
//! through the formula guard; JSON and NDJSON stay exact.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::read::{Problem, Watermark};
use crate::readmodel::columns;

pub(crate) fn respond(wm: &Watermark, req: &HeaderMap, mut body: Value) -> Response {
    // The ETag is of what the answer says, not of how far the projections are.
    let etag = weak_etag(&[body.to_string().as_bytes()]);
    body["watermark"] = serde_json::to_value(wm).unwrap_or(Value::Null);
    respond_text(wm, req, body.to_string(), etag)
}

/// A weak ETag (`W/"..."`) of the parts an answer depends on: equal across processes
/// and releases for the same content (XXH3-128, a specified hash: a cache validator
/// needs no cryptographic one, and hashing every page's body with SHA-256 took a tenth
/// of a list's CPU), so replicas behind a proxy agree. The watermark is never a part, so
/// an answer whose content did not change keeps its tag as the projections move on.
pub(crate) fn weak_etag(parts: &[&[u8]]) -> String {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for p in parts {
        h.update(&(p.len() as u64).to_le_bytes());
        h.update(p);
    }
    format!("W/\"{:032x}\"", h.digest128())
}

/// Whether `If-None-Match` names `etag` (a list of tags, weak or strong, or `*`;
/// compared weakly, as RFC 9110 says for `If-None-Match`).
pub(crate) fn not_modified(req: &HeaderMap, etag: &str) -> bool {
    let opaque = |t: &str| t.trim().trim_start_matches("W/").to_string();
    let mine = opaque(etag);
    req.get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim() == "*" || opaque(t) == mine)
}

/// A JSON answer already rendered, with its ETag (see [`weak_etag`]) and the watermark
/// headers; a 304 when `If-None-Match` names the tag.
pub(crate) fn respond_text(
    wm: &Watermark,
    req: &HeaderMap,
    text: String,
    etag: String,
) -> Response {
    let mut resp = if not_modified(req, &etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, "application/json")], text).into_response()
    };
    let hs = resp.headers_mut();
    hs.insert(header::ETAG, HeaderValue::from_str(&etag).expect("etag"));
    watermark_headers(hs, wm);
    resp
}

/// The representation a list is asked in: `?format=` wins over `Accept`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Json,
    Csv,
    Ndjson,
}

pub(crate) fn format_of(q: &super::params::Params, req: &HeaderMap) -> Result<Format, Problem> {
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
pub(crate) fn respond_list(
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
    respond_paged(wm, req, ctype, body, next)
}

/// A CSV or NDJSON page: its ETag (of the type and the body), `next` in a `Link`
/// header, the watermark headers; a 304 when `If-None-Match` names the tag.
fn respond_paged(
    wm: &Watermark,
    req: &HeaderMap,
    ctype: &'static str,
    body: String,
    next: Option<String>,
) -> Response {
    let etag = weak_etag(&[ctype.as_bytes(), body.as_bytes()]);
    let mut resp = if not_modified(req, &etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, ctype)], body).into_response()
    };
    let hs = resp.headers_mut();
    hs.insert(header::ETAG, HeaderValue::from_str(&etag).expect("etag"));
    if let Some(n) = next.and_then(|n| HeaderValue::from_str(&format!("<{n}>; rel=\"next\"")).ok())
    {
        hs.insert(header::LINK, n);
    }
    watermark_headers(hs, wm);
    resp
}

/// A list of stored JSON documents (a row's text each), as [`respond_list`] answers
/// it, without parsing them for JSON and NDJSON: without the `pii` scope (`mask`) each
/// document goes through the mask as text ([`crate::privacy::Privacy::mask_text`]),
/// and the page is put together around the documents' own text (the keys in the
/// order a map of `serde_json` gives them: the list, `next`, `watermark`). CSV cells
/// need the fields, so a CSV page parses them.
///
/// With the whole result's count when one was asked for, which a JSON answer also
/// carries in its body (`count`: `value`, `kind`); CSV and NDJSON have it in the headers
/// only ([`with_count`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn respond_docs(
    wm: &Watermark,
    req: &HeaderMap,
    format: Format,
    key: &str,
    rows: Vec<String>,
    mask: Option<&crate::privacy::Privacy>,
    next: Option<String>,
    columns: &[&str],
    count: Option<&crate::read::lists::Count>,
) -> Result<Response, Problem> {
    let rows = match mask {
        None => rows,
        Some(p) => rows
            .iter()
            .map(|r| p.mask_text(r))
            .collect::<Result<Vec<_>, _>>()
            .map_err(Problem::internal)?,
    };
    match format {
        Format::Csv => {
            let items = super::pagination::docs(&rows)?;
            Ok(respond_list(wm, req, format, key, items, next, columns))
        }
        Format::Ndjson => {
            let mut out = String::with_capacity(rows.iter().map(|r| r.len() + 1).sum());
            for r in &rows {
                out.push_str(r);
                out.push('\n');
            }
            Ok(respond_paged(wm, req, "application/x-ndjson", out, next))
        }
        Format::Json => {
            let next = serde_json::to_string(&next).map_err(Problem::internal)?;
            let key = serde_json::to_string(key).map_err(Problem::internal)?;
            let mut body =
                String::with_capacity(rows.iter().map(|r| r.len() + 1).sum::<usize>() + 256);
            let list = |body: &mut String| {
                body.push_str(&key);
                body.push_str(":[");
                for (i, r) in rows.iter().enumerate() {
                    if i > 0 {
                        body.push(',');
                    }
                    body.push_str(r);
                }
                body.push(']');
            };
            body.push('{');
            if key.as_str() < "\"next\"" {
                list(&mut body);
                body.push_str(",\"next\":");
                body.push_str(&next);
            } else {
                body.push_str("\"next\":");
                body.push_str(&next);
                body.push(',');
                list(&mut body);
            }
            push_count(&mut body, count)?;
            // The ETag is of what the answer says, not of how far the projections are.
            body.push('}');
            let etag = weak_etag(&[body.as_bytes()]);
            body.pop();
            body.push_str(",\"watermark\":");
            body.push_str(&serde_json::to_string(wm).map_err(Problem::internal)?);
            body.push('}');
            Ok(respond_text(wm, req, body, etag))
        }
    }
}

/// `,"count":{...}` after a JSON answer's members, when a count was asked for.
pub(crate) fn push_count(
    body: &mut String,
    count: Option<&crate::read::lists::Count>,
) -> Result<(), Problem> {
    if let Some(c) = count {
        body.push_str(",\"count\":");
        body.push_str(&serde_json::to_string(c).map_err(Problem::internal)?);
    }
    Ok(())
}

/// `ISIR-Watermark` and `ISIR-Lag-Seconds`, on every `/v1` answer.
pub(crate) fn watermark_headers(hs: &mut axum::http::HeaderMap, wm: &Watermark) {
    hs.insert("ISIR-Watermark", HeaderValue::from(wm.action_id));
    hs.insert("ISIR-Lag-Seconds", HeaderValue::from(wm.lag_seconds));
    if let Some(s) = wm.standby_lag_seconds {
        hs.insert("ISIR-Standby-Lag-Seconds", HeaderValue::from(s));
    }
}

/// A JSON answer to a request that is not cached (a `POST`): the watermark headers, no
/// ETag.
pub(crate) fn respond_uncached(wm: &Watermark, text: String) -> Response {
    let mut resp = ([(header::CONTENT_TYPE, "application/json")], text).into_response();
    watermark_headers(resp.headers_mut(), wm);
    resp
}

/// The count a request asks for: `?count=exact|estimated`, or PostgREST's
/// `Prefer: count=exact|estimated`.
pub(crate) fn count_of(
    q: &super::params::Params,
    req: &HeaderMap,
) -> Result<Option<crate::read::lists::CountKind>, Problem> {
    use crate::read::lists::CountKind;
    let prefer = req
        .get_all("prefer")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split([',', ';']))
        .find_map(|p| p.trim().strip_prefix("count=").map(str::to_string));
    match q.get("count").cloned().or(prefer).as_deref() {
        None => Ok(None),
        Some("exact") => Ok(Some(CountKind::Exact)),
        Some("estimated") => Ok(Some(CountKind::Estimated)),
        Some(other) => Err(Problem::bad(format!(
            "count {other:?}: one of exact, estimated"
        ))),
    }
}

/// Adds a count to an answer: `ISIR-Count`, `ISIR-Count-Kind` (`exact`, `estimated`
/// or `lower-bound`) and `Preference-Applied`.
pub(crate) fn with_count(mut resp: Response, c: Option<crate::read::lists::Count>) -> Response {
    if let Some(c) = c {
        let hs = resp.headers_mut();
        hs.insert("ISIR-Count", HeaderValue::from(c.value));
        hs.insert("ISIR-Count-Kind", HeaderValue::from_static(c.kind));
        let applied = if c.kind == "exact" {
            "count=exact"
        } else {
            "count=estimated"
        };
        hs.insert("Preference-Applied", HeaderValue::from_static(applied));
    }
    resp
}
