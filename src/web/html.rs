//! HTML helpers: escaping and the page frame.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Escapes text for HTML element content and quoted attribute values.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:70em;padding:0 1em;color:#222}\
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em}table{border-collapse:collapse;width:100%}\
td,th{border-bottom:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top}\
th{background:#f4f4f4}table.kv{width:auto;min-width:30em}.num{text-align:right;font-variant-numeric:tabular-nums}\
.bar{background:#eee;height:1em;width:100%;max-width:30em;border-radius:3px}\
.bar>div{background:#3a7;height:100%;border-radius:3px}.bad{color:#b00}.ok{color:#070}\
.muted{color:#777}form input[type=search]{width:30em;max-width:80%;padding:.3em}nav a{margin-right:1em}";

/// A complete page: `title` is text, `body` is HTML.
pub fn page(status: StatusCode, title: &str, body: &str) -> Response {
    let html = format!(
        "<!DOCTYPE html>\n<html lang=\"cs\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{t}</title><style>{STYLE}</style></head><body>\
         <nav><a href=\"/search\">Hledat / Search</a></nav>{body}</body></html>",
        t = escape(title)
    );
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        html,
    )
        .into_response()
}

/// A page saying what went wrong.
pub fn error_page(status: StatusCode, detail: &str) -> Response {
    page(
        status,
        "isir: error",
        &format!(
            "<h1>{}</h1><p id=\"error\">{}</p>",
            status.as_u16(),
            escape(detail)
        ),
    )
}
