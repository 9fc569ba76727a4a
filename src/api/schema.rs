//! The answers of the read API as their OpenAPI schemas: the JSON bodies each `/v1`
//! operation and each operations endpoint gives, and the error answers every `/v1`
//! operation can give, described once.
//!
//! Owns the answers' shapes as documented; the handlers name them in their
//! `#[utoipa::path]` annotations and [`super::openapi`] gathers them. Imports no handler.

use serde::Serialize;
use utoipa::{IntoResponses, ToSchema};

use crate::read::{Problem, Watermark};
use crate::readmodel::{CaseDoc, Event, PartyDoc};

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
