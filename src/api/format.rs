//! Representations of an answer: JSON, CSV and NDJSON (`?format=` wins over `Accept`),
//! with the watermark headers and the ETag every `/v1` answer carries.
//!
//! Owns rendering only; the rows come from the resource handlers. Every CSV cell goes
//! through the formula guard; JSON and NDJSON stay exact.

use std::hash::{Hash, Hasher};

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::projection::columns;
use crate::read::{Problem, Watermark};

pub(crate) fn respond(wm: &Watermark, req: &HeaderMap, mut body: Value) -> Response {
    body["watermark"] = serde_json::to_value(wm).unwrap_or(Value::Null);
    respond_text(wm, req, body.to_string())
}

/// A JSON answer already rendered, with its ETag and the watermark headers.
pub(crate) fn respond_text(wm: &Watermark, req: &HeaderMap, text: String) -> Response {
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
    let mut resp = ([(header::CONTENT_TYPE, ctype)], body).into_response();
    let hs = resp.headers_mut();
    if let Some(n) = next.and_then(|n| HeaderValue::from_str(&format!("<{n}>; rel=\"next\"")).ok())
    {
        hs.insert(header::LINK, n);
    }
    watermark_headers(hs, wm);
    resp
}

/// `ISIR-Watermark` and `ISIR-Lag-Seconds`, on every `/v1` answer.
fn watermark_headers(hs: &mut axum::http::HeaderMap, wm: &Watermark) {
    hs.insert("ISIR-Watermark", HeaderValue::from(wm.action_id));
    hs.insert("ISIR-Lag-Seconds", HeaderValue::from(wm.lag_seconds));
}

/// A JSON answer to a request that is not cached (a `POST`): the watermark headers, no
/// ETag.
pub(crate) fn respond_uncached(wm: &Watermark, text: String) -> Response {
    let mut resp = ([(header::CONTENT_TYPE, "application/json")], text).into_response();
    watermark_headers(resp.headers_mut(), wm);
    resp
}
