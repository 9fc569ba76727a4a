//! The pages behind the API's problem types: every problem detail's `type` is
//! `/problems/{kind}`, a reference resolved against the request's URL (RFC 9457 §3.1.1),
//! and this page says what the kind means and what to do about it.
//!
//! Static text only: reads nothing, answers in every phase.

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::Response;

use super::html::{error_page, escape, page};

/// Every kind the API answers with: (kind, status, what it means, what to do).
pub const KINDS: &[(&str, u16, &str, &str)] = &[
    (
        "bad-parameter",
        400,
        "A parameter, path segment or body was not what the operation takes. The detail names it.",
        "Correct the request; the operation's parameters are in /openapi.json.",
    ),
    (
        "not-found",
        404,
        "No such case in the replica, as of the watermark in the detail.",
        "Check the case number; a case filed moments ago appears once the replica and its projections reach it.",
    ),
    (
        "pii-scope",
        403,
        "The request searches or filters by a birth number, which is personal data.",
        "Use an API key with the `pii` scope, or search by IČO or name.",
    ),
    (
        "watchlist-scope",
        403,
        "A watchlist's change feed is read only with an API key scoped to that list (`watch:NAME`).",
        "Ask the operator for a key with the list's scope; `isir watch list` names the lists.",
    ),
    (
        "stream-scope",
        403,
        "A whole-result stream (`stream=all`) of more rows than this server gives without the `stream` scope (`api.stream_max_rows`).",
        "Read the result page by page (the `next` links), narrow it, or use an API key with the `stream` scope.",
    ),
    (
        "conflict",
        409,
        "The change conflicts with what exists (a watchlist of that name).",
        "Choose another name, or remove the existing one first.",
    ),
    (
        "unknown-key",
        401,
        "The API key (X-API-Key or Authorization: Bearer) is not configured here.",
        "Check the key, or send the request without one (anonymous, rate-limited per address).",
    ),
    (
        "rate-limited",
        429,
        "Too many requests from this key or address.",
        "Wait the seconds in Retry-After, then retry; ask the operator for a key with a higher limit.",
    ),
    (
        "admin-key",
        401,
        "The operator pages (status page, /metrics) need the admin key.",
        "Send X-Admin-Key.",
    ),
    (
        "read-only",
        409,
        "This process reads the replica read-only (`isir serve`): it cannot change watchlists.",
        "Use `isir watch add|set|remove` on the writer's database, or the admin listener of `isir run`.",
    ),
    (
        "unavailable",
        503,
        "The read API is not serving: the feed is in a phase before `serve`, or the projections are not built yet.",
        "Retry later; operators switch the phase with `isir phase set serve`.",
    ),
    (
        "internal",
        500,
        "The projections could not be read (the database failed).",
        "Retry; if it persists, the operator's logs say why.",
    ),
];

pub async fn problem(Path(kind): Path<String>) -> Response {
    match KINDS.iter().find(|k| k.0 == kind) {
        None => error_page(
            StatusCode::NOT_FOUND,
            &format!(
                "no problem type {kind}; see /problems/bad-parameter and the others the API names"
            ),
        ),
        Some((k, status, what, todo)) => page(
            StatusCode::OK,
            &format!("isir: problem {k}"),
            &format!(
                "<h1 id=\"kind\">{}</h1><p>HTTP status <span id=\"status\">{status}</span></p>\
                 <p id=\"what\">{}</p><p id=\"todo\">{}</p>",
                escape(k),
                escape(what),
                escape(todo)
            ),
        ),
    }
}
