//! The OpenAPI 3.1 description of the read API, generated from the code with utoipa:
//! the handlers' `#[utoipa::path]` annotations, the parameter structs below and the
//! projection documents' `ToSchema` derives.
//!
//! Owns the parameter lists of every endpoint: the handlers accept exactly the
//! parameters named here (`allowed::<P>()`), so the description cannot drift from what
//! the API takes. Never describes a route that is not served.

use serde::Serialize;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{IntoParams, IntoResponses, Modify, OpenApi, ToSchema};

use super::Problem;
use super::routes::Watermark;
use crate::projection::cases::CaseDoc;
use crate::projection::parties::PartyDoc;

/// The names of the query parameters `P` describes (computed once a type).
pub fn allowed<P: IntoParams + 'static>() -> &'static [String] {
    use std::any::TypeId;
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<TypeId, &'static [String]>>> = OnceLock::new();
    let mut m = CACHE
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .expect("parameter cache");
    m.entry(TypeId::of::<P>()).or_insert_with(|| {
        let names: Vec<String> = P::into_params(|| Some(utoipa::openapi::path::ParameterIn::Query))
            .into_iter()
            .map(|p| p.name)
            .collect();
        Box::leak(names.into_boxed_slice())
    })
}

/// The representation of a list; `?format=` wins over `Accept`.
#[derive(ToSchema, Serialize)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum ListFormat {
    Json,
    Csv,
    Ndjson,
}

/// Path of one case: `INS {number}/{year}`.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct CasePath {
    /// Year of the case number (2008-2100).
    #[param(minimum = 2008, maximum = 2100)]
    year: i64,
    /// Number within the year (from 1).
    #[param(minimum = 1)]
    number: i64,
}

/// No query parameters.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub struct NoParams {}

/// Paging of a case's timeline.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct PageParams {
    /// Page size, 1 to `api.max_limit` (default `api.default_limit`, 50).
    #[param(minimum = 1)]
    limit: Option<i64>,
    /// The opaque cursor of the previous page's `next` link.
    cursor: Option<String>,
    #[param(inline)]
    format: Option<ListFormat>,
}

/// Search for persons: exactly one of `ico`, `rc`, `name`.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct SubjectParams {
    /// IČO, 6 to 12 digits (leading zeros may be left out).
    #[param(pattern = r"^[0-9]{6,12}$")]
    ico: Option<String>,
    /// Birth number, `NNNNNN/NNNN` or without the slash; an exact match. Only for a key
    /// with the `pii` scope: without it the answer is a 403 problem.
    #[param(pattern = r"^[0-9]{6}/?[0-9]{3,4}$")]
    rc: Option<String>,
    /// A name; case and diacritics are ignored (`novak` finds `Novák`).
    #[param(min_length = 1, max_length = 200)]
    name: Option<String>,
    #[param(minimum = 1)]
    limit: Option<i64>,
    cursor: Option<String>,
    #[param(inline)]
    format: Option<ListFormat>,
}

/// Order of a case list.
#[derive(ToSchema, Serialize)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum CaseSort {
    /// By the date opened, oldest first.
    Opened,
    /// By the latest action, newest first.
    Latest,
}

/// Filters of the case list; all given filters must hold.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct CaseListParams {
    /// Court: its short name (`KSPHA`) or its code.
    court: Option<String>,
    /// The case's state as the register names it (`KONKURS`, `ODDLUŽENÍ`, ...).
    state: Option<String>,
    /// Opened on or after this date.
    #[param(value_type = Option<String>, format = Date)]
    opened_from: Option<String>,
    /// Opened on or before this date.
    #[param(value_type = Option<String>, format = Date)]
    opened_to: Option<String>,
    /// With an action published on or after this date.
    #[param(value_type = Option<String>, format = Date)]
    updated_since: Option<String>,
    /// A debtor's IČO.
    #[param(pattern = r"^[0-9]{6,12}$")]
    debtor_ico: Option<String>,
    /// A debtor's birth number (exact). Only for a key with the `pii` scope: without it
    /// the answer is a 403 problem.
    #[param(pattern = r"^[0-9]{6}/?[0-9]{3,4}$")]
    debtor_rc: Option<String>,
    /// A debtor's name, ignoring case and diacritics.
    #[param(min_length = 1, max_length = 200)]
    debtor_name: Option<String>,
    /// Kind of debtor (`F` natural person, `P` legal person, `PODNIKATEL` ...).
    debtor_kind: Option<String>,
    #[param(inline)]
    sort: Option<CaseSort>,
    #[param(minimum = 1)]
    limit: Option<i64>,
    cursor: Option<String>,
    #[param(inline)]
    format: Option<ListFormat>,
}

/// The change feed's filters.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct EventParams {
    /// Only actions with a greater ID (default: from the start).
    after: Option<i64>,
    /// Action-type code (`typUdalosti`).
    #[param(rename = "type", pattern = r"^[0-9]+$")]
    r#type: Option<String>,
    /// Court: short name or code.
    court: Option<String>,
    /// One case, `INS 4711/2026`.
    #[param(pattern = r"^INS [0-9]+/[0-9]+$")]
    case: Option<String>,
    #[param(minimum = 1)]
    limit: Option<i64>,
    #[param(inline)]
    format: Option<ListFormat>,
}

/// One action of a case's timeline.
#[derive(ToSchema, Serialize)]
#[allow(dead_code)]
pub struct Event {
    pub action_id: i64,
    pub case_number: String,
    pub court: Option<String>,
    pub type_code: String,
    /// The type's name from the code list (or the source's when unknown).
    pub type_name: String,
    pub source_type_name: String,
    pub section: Option<String>,
    pub number_in_section: Option<i64>,
    /// Link to the document in the register, when the action has one.
    pub document_url: Option<String>,
    pub published: String,
    pub created: String,
    /// The action that first filled this document slot, when this one replaces it.
    pub slot_action_id: Option<i64>,
    pub secondary_action: bool,
    pub secondary_document: bool,
    pub legal_force_date: Option<String>,
    pub corrected_published: Option<String>,
    pub annulled: Option<String>,
}

#[derive(ToSchema, Serialize)]
#[allow(dead_code)]
pub struct CaseAnswer {
    pub case: CaseDoc,
    pub watermark: Watermark,
}

#[derive(ToSchema, Serialize)]
#[allow(dead_code)]
pub struct CaseList {
    pub cases: Vec<CaseDoc>,
    /// The next page, absent on the last.
    pub next: Option<String>,
    pub watermark: Watermark,
}

#[derive(ToSchema, Serialize)]
#[allow(dead_code)]
pub struct EventList {
    pub events: Vec<Event>,
    pub next: Option<String>,
    pub watermark: Watermark,
}

#[derive(ToSchema, Serialize)]
#[allow(dead_code)]
pub struct SubjectList {
    /// Each person once per case and role; birth number and date masked (`***`)
    /// without the `pii` scope.
    pub subjects: Vec<PartyDoc>,
    pub next: Option<String>,
    pub watermark: Watermark,
}

#[derive(ToSchema, Serialize)]
#[allow(dead_code)]
pub struct Stats {
    /// Cases by state.
    pub by_state: std::collections::BTreeMap<String, i64>,
    /// Cases by court (short name).
    pub by_court: std::collections::BTreeMap<String, i64>,
    /// Cases by month opened (`YYYY-MM`).
    pub by_month: std::collections::BTreeMap<String, i64>,
    pub watermark: Watermark,
}

#[derive(ToSchema, Serialize)]
#[allow(dead_code)]
pub struct Health {
    pub status: String,
}

#[derive(ToSchema, Serialize)]
#[allow(dead_code)]
pub struct Ready {
    pub ready: bool,
    pub watermark: Watermark,
}

/// The error answers every `/v1` operation can give, described once.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub enum V1Errors {
    /// A bad parameter, named in `detail`
    #[response(status = 400, content_type = "application/problem+json")]
    Bad(Problem),
    /// An unknown API key
    #[response(status = 401, content_type = "application/problem+json")]
    UnknownKey(Problem),
    /// A search or filter on a personal field (birth number) without the `pii` scope
    #[response(status = 403, content_type = "application/problem+json")]
    Forbidden(Problem),
    /// Rate limited
    #[response(status = 429, content_type = "application/problem+json",
        headers(("Retry-After" = u64, description = "Seconds to wait")))]
    RateLimited(Problem),
    /// The read API is off (phase before `serve`)
    #[response(status = 503, content_type = "application/problem+json")]
    Off(Problem),
    /// The projection could not be read
    #[response(status = 500, content_type = "application/problem+json")]
    Internal(Problem),
}

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
            is limited per key. Errors are problem details (RFC 9457)."
    ),
    paths(
        super::routes::case,
        super::routes::case_events,
        super::routes::case_list,
        super::routes::subjects,
        super::routes::events,
        super::routes::stats,
        super::routes::healthz,
        super::routes::readyz,
        super::routes::metrics_text,
        super::routes::openapi_json,
    ),
    components(schemas(Problem, Watermark, Event, CaseAnswer, CaseList, EventList, SubjectList, Stats, Health, Ready)),
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
