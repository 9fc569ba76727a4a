//! The OpenAPI 3.1 description of the read API, generated from the code with utoipa:
//! the handlers' `#[utoipa::path]` annotations, the parameter structs of
//! [`super::params`] and the projection documents' `ToSchema` derives.
//!
//! Assembles the document only: the answers' schemas are `api::schema`'s, the
//! operations the handlers'. Serves it at `/openapi.json`. Never describes a route that
//! is not served.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::schema::{
    CaseAnswer, CaseList, EventList, Health, Ready, Stats, SubjectList, WatchEvent, WatchEventList,
    Watched,
};
use crate::read::{Problem, Watermark};
use crate::readmodel::Event;

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let c = openapi.components.get_or_insert_with(Default::default);
        c.add_security_scheme(
            "api_key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "X-API-Key",
                "An API key from `api.keys`; keys with the `pii` scope see birth numbers and dates.",
            ))),
        );
        c.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "isir read API",
        description = "Insolvency cases of the Czech insolvency register (ISIR), served from the replica's projections. \
            Every answer carries the projection watermark (`ISIR-Watermark`, `ISIR-Lag-Seconds`). \
            Anonymous callers are rate-limited per address; an API key (`X-API-Key` or `Authorization: Bearer`) \
            is limited per key. Errors are problem details (RFC 9457); their `type` (`/problems/{kind}`) is a page that explains the kind."
    ),
    paths(
        super::cases::case,
        super::cases::case_events,
        super::cases::case_list,
        super::subjects::subjects,
        super::lookup::lookup,
        super::search::search,
        super::events::events,
        super::stats::stats,
        super::watchlists::watch_events,
        super::health::healthz,
        super::health::readyz,
        super::health::metrics_text,
        openapi_json,
    ),
    components(schemas(Problem, Watermark, Event, CaseAnswer, CaseList, EventList, Watched, WatchEvent, WatchEventList, SubjectList, Stats, Health, Ready,
        super::lookup::LookupRequest, super::lookup::LookupResult, super::lookup::LookupAnswer)),
    modifiers(&Security),
    security((), ("api_key" = []), ("bearer" = [])),
)]
pub struct ApiDoc;

/// The description as JSON text.
pub fn json() -> String {
    ApiDoc::openapi()
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// This description (OpenAPI 3.1).
#[utoipa::path(get, path = "/openapi.json", tag = "operations",
    responses((status = 200, description = "The OpenAPI description", body = Object)))]
pub(crate) async fn openapi_json() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], json()).into_response()
}
