//! The OpenAPI 3.1 description of the read API, generated from the code with utoipa:
//! the handlers' `#[utoipa::path]` annotations, the parameter structs of
//! [`super::params`] and the projection documents' `ToSchema` derives.
//!
//! Owns the answers' schemas and the error answers every `/v1` operation can give.
//! Never describes a route that is not served.

use serde::Serialize;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{IntoResponses, Modify, OpenApi, ToSchema};

use crate::projection::cases::CaseDoc;
use crate::projection::parties::PartyDoc;
use crate::read::{Problem, Watermark};

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
    /// How many actions of this case the replica holds back in its quarantine (records
    /// of the feed that did not parse); present only when there are some: the case is
    /// then incomplete.
    pub quarantined_actions: Option<i64>,
    pub watermark: Watermark,
}

#[derive(ToSchema, Serialize)]
#[allow(dead_code)]
pub struct CaseList {
    pub cases: Vec<CaseDoc>,
    /// The next page, absent on the last.
    pub next: Option<String>,
    /// The whole result's count, when `count` (or `Prefer: count=`) asked for it.
    pub count: Option<crate::read::lists::Count>,
    pub watermark: Watermark,
}

#[derive(ToSchema, Serialize)]
#[allow(dead_code)]
pub struct EventList {
    pub events: Vec<Event>,
    pub next: Option<String>,
    /// The whole result's count, when `count` (or `Prefer: count=`) asked for it.
    pub count: Option<crate::read::lists::Count>,
    pub watermark: Watermark,
}

/// A watched subject through which an event is in a watchlist's feed.
#[derive(ToSchema, Serialize)]
#[allow(dead_code)]
pub struct Watched {
    /// `ico`, `rc` or `case`.
    pub kind: String,
    /// The entry; `null` for a birth number without the `pii` scope.
    pub key: Option<String>,
}

/// An event of a watchlist's feed: a timeline event and where it stands in the feed.
#[derive(ToSchema, Serialize)]
#[allow(dead_code)]
pub struct WatchEvent {
    #[serde(flatten)]
    pub event: Event,
    /// Its place in the list's feed (the `after` of the next page): its action ID, or
    /// for the actions of a case before its watched debtor was named (the petition),
    /// the action that named the debtor.
    pub position: i64,
    /// The action that first makes a watched subject a party of the case (for a debtor:
    /// a new petition against a watched subject).
    pub new_party: bool,
    /// The list's entries that make this event part of the feed.
    pub watched: Vec<Watched>,
}

#[derive(ToSchema, Serialize)]
#[allow(dead_code)]
pub struct WatchEventList {
    pub events: Vec<WatchEvent>,
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
    /// The whole result's count, when `count` (or `Prefer: count=`) asked for it.
    pub count: Option<crate::read::lists::Count>,
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
    /// The replica's identifier (not a secret); null while the store cannot say.
    pub replica: Option<String>,
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
    /// A search or filter on a personal field (birth number, birth year) without the
    /// `pii` scope, or a whole-result stream over `api.stream_max_rows` without the
    /// `stream` scope
    #[response(status = 403, content_type = "application/problem+json")]
    Forbidden(Problem),
    /// Rate limited
    #[response(status = 429, content_type = "application/problem+json",
        headers(("Retry-After" = u64, description = "Seconds to wait")))]
    RateLimited(Problem),
    /// The read API is off (phase before `serve`), or a statement ran past the time
    /// limit, or every read connection was busy (these two with `Retry-After`)
    #[response(status = 503, content_type = "application/problem+json",
        headers(("Retry-After" = u64, description = "Seconds to wait, when the condition will pass")))]
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
        super::health::openapi_json,
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
