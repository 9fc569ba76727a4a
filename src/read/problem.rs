//! Problem details (RFC 9457): every error of the API as `application/problem+json`,
//! with a message that says what was wrong. Bad input is a 400, never a 500. The `type`
//! is `/problems/{kind}`, a reference resolved against the request's URL, where the
//! HTML pages explain the kind (`web::problems`, which lists every kind).

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Problem {
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    /// Seconds for a `Retry-After` header (a 503 that will pass).
    #[serde(skip)]
    pub retry_after: Option<u64>,
}

impl Problem {
    pub fn new(status: StatusCode, kind: &str, detail: impl Into<String>) -> Self {
        Problem {
            kind: format!("/problems/{kind}"),
            title: status.canonical_reason().unwrap_or("error").to_string(),
            status: status.as_u16(),
            detail: detail.into(),
            retry_after: None,
        }
    }
    /// The same problem with a `Retry-After` of `secs`.
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }
    pub fn bad(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad-parameter", detail)
    }
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not-found", detail)
    }
    /// A search or filter on a personal field without the `pii` scope.
    pub fn needs_pii(what: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "pii-scope",
            format!("{what} is personal data: it needs an API key with the `pii` scope"),
        )
    }
    pub fn unavailable(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", detail)
    }
    pub fn internal(e: impl std::fmt::Display) -> Self {
        tracing::error!(error = %e, "API request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the projection could not be read; try again",
        )
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let retry = self.retry_after;
        let mut resp = (
            status,
            [(header::CONTENT_TYPE, "application/problem+json")],
            axum::Json(self),
        )
            .into_response();
        if let Some(s) = retry {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(s));
        }
        resp
    }
}

/// A failed read: a timeout or a full pool is a 503 ([`super::limit::problem`]).
impl From<sqlx::Error> for Problem {
    fn from(e: sqlx::Error) -> Self {
        super::limit::problem(e)
    }
}
