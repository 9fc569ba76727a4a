//! The query parameters of every `/v1` endpoint, described once for OpenAPI (utoipa's
//! `IntoParams`) and enforced from the same description: a handler accepts exactly the
//! parameters its struct names (`only::<P>()`), so the description cannot drift from
//! what the API takes. Also the parsers of the shared filters (court, dates).
//!
//! Pure: no I/O, no state.

use serde::Serialize;
use utoipa::{IntoParams, ToSchema};

use crate::read::Problem;

/// Most values a list parameter (`?ico=a&ico=b`) takes in one request; more go in the
/// body of `POST /v1/subjects/lookup`. Said in each parameter's description, not as
/// `maxItems`: a list long enough to break it makes a URL longer than HTTP servers take
/// (414 before any handler runs), which no client should be led to build.
pub const MAX_LIST: usize = 100;

/// The query parameters of a request as given: in order, a repeated one kept as many
/// times as it was given. `only` refuses unknown ones and repeats of single ones.
#[derive(Debug, Default, Clone)]
pub struct Params(Vec<(String, String)>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Params {
    type Rejection = Problem;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Problem> {
        axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&parts.uri)
            .map(|q| Params(q.0))
            .map_err(|e| Problem::bad(format!("the query string is malformed: {e}")))
    }
}

impl Params {
    /// Parameters given as pairs, in order.
    pub fn from_pairs(pairs: Vec<(String, String)>) -> Self {
        Params(pairs)
    }

    /// The value of a single parameter (`only` has refused a repeat).
    pub fn get(&self, k: &str) -> Option<&String> {
        self.0.iter().find(|(key, _)| key == k).map(|(_, v)| v)
    }

    pub fn contains_key(&self, k: &str) -> bool {
        self.0.iter().any(|(key, _)| key == k)
    }

    /// Every value of a list parameter, in the order given.
    pub fn all(&self, k: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

impl std::ops::Index<&str> for Params {
    type Output = String;
    fn index(&self, k: &str) -> &String {
        self.get(k).expect("a parameter checked present")
    }
}

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
    /// `all`: the whole timeline as one CSV or NDJSON answer, streamed from one
    /// snapshot (no `cursor`, no `limit`); over `api.stream_max_rows` rows only for a
    /// key with the `stream` scope (else a 403 before the first row).
    #[param(inline)]
    stream: Option<StreamAll>,
    #[param(inline)]
    format: Option<ListFormat>,
}

/// Search for persons: exactly one of `ico`, `rc` (each may be repeated) or `name`.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct SubjectParams {
    /// IČO, 6 to 12 digits (leading zeros may be left out); repeat it for several
    /// (`?ico=a&ico=b`, at most 100).
    #[param(value_type = Option<Vec<String>>, style = Form, explode)]
    ico: Option<Vec<String>>,
    /// Birth number, `NNNNNN/NNNN` or without the slash; an exact match; repeat it for
    /// several. Only for a key with the `pii` scope: without it the answer is a 403
    /// problem.
    #[param(value_type = Option<Vec<String>>, style = Form, explode)]
    rc: Option<Vec<String>>,
    /// A whole name (surname or company name); case and diacritics are ignored
    /// (`novak` finds `Novák`). To search as people type (word order, prefixes, legal
    /// forms ignored, ranked), use `/v1/search`.
    #[param(min_length = 1, max_length = 200)]
    name: Option<String>,
    #[param(minimum = 1)]
    limit: Option<i64>,
    cursor: Option<String>,
    /// Count the whole result: `exact`, or `estimated` (PostgreSQL's planner
    /// estimate; on SQLite exact up to 100 000, then that lower bound). In the
    /// `ISIR-Count` and `ISIR-Count-Kind` headers and, in JSON, as `count` in the body.
    /// `Prefer: count=...` works too.
    #[param(inline)]
    count: Option<CountParam>,
    #[param(inline)]
    format: Option<ListFormat>,
    /// `all`: every matching person as one CSV or NDJSON answer, streamed from one
    /// snapshot (no `cursor`, no `limit`); over `api.stream_max_rows` rows only for a
    /// key with the `stream` scope (else a 403 before the first row).
    #[param(inline)]
    stream: Option<StreamAll>,
}

/// A name search: the words of a name as people type them, with optional filters.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct SearchParams {
    /// The words of a name, in any order; case, diacritics, legal forms (`s.r.o.`,
    /// `a.s.`) and academic titles (`Ing.`, `JUDr.`) are ignored and every word may be a
    /// prefix (`nov jan` finds Jan Novák). An IČO (digits) answers as
    /// `/v1/subjects?ico=`, a birth number (`pii` scope) as `/v1/subjects?rc=`, and a
    /// case number (`INS 1476/2008` or `1476/2008`) is a `303` to the case
    /// (`/v1/cases/2008/1476`); the name filters do not apply to them (a `400`).
    #[param(min_length = 1, max_length = 200)]
    q: String,
    /// Only persons in this role.
    #[param(inline)]
    role: Option<SearchRole>,
    /// Only cases of this court: its short name (`KSPHA`) or its code.
    court: Option<String>,
    /// Only natural persons (`druhOsoby` F or PODNIKATEL) or only companies (P).
    #[param(inline)]
    kind: Option<SearchKind>,
    /// Only persons born in this year. Only for a key with the `pii` scope: without it
    /// the answer is a 403 problem.
    #[param(minimum = 1800, maximum = 2200)]
    birth_year: Option<i64>,
    #[param(minimum = 1)]
    limit: Option<i64>,
    cursor: Option<String>,
    /// Count the whole result: `exact`, or `estimated` (PostgreSQL's planner
    /// estimate; on SQLite exact up to 100 000, then that lower bound). In the
    /// `ISIR-Count` and `ISIR-Count-Kind` headers and, in JSON, as `count` in the
    /// body. `Prefer: count=...` works too.
    #[param(inline)]
    count: Option<CountParam>,
    /// `all`: the whole result as one CSV or NDJSON answer, streamed from one
    /// snapshot (no `cursor`, no `limit`); over `api.stream_max_rows` rows only for a
    /// key with the `stream` scope (else a 403 before the first row).
    #[param(inline)]
    stream: Option<StreamAll>,
    #[param(inline)]
    format: Option<ListFormat>,
}

/// A role of a person in a case.
#[derive(ToSchema, Serialize)]
#[allow(dead_code)]
pub enum SearchRole {
    #[serde(rename = "DLUŽNÍK")]
    Debtor,
    #[serde(rename = "VĚŘITEL")]
    Creditor,
    #[serde(rename = "VĚŘIT-NAVR")]
    Petitioner,
    #[serde(rename = "SPRÁVCE")]
    Administrator,
}

/// Natural person or company.
#[derive(ToSchema, Serialize)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum SearchKind {
    Person,
    Company,
}

/// A count of the whole result.
#[derive(ToSchema, Serialize)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum CountParam {
    Exact,
    Estimated,
}

/// The whole result at once.
#[derive(ToSchema, Serialize)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum StreamAll {
    All,
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
    /// By the latest action's publication time, newest first (`updated_since` is a
    /// range of this order).
    Updated,
}

/// Filters of the case list; all given filters must hold. Each page is an index range
/// read in order, so the filters combine as the indexes allow: with `sort=opened` or
/// `sort=latest` none, `court`, `state`, `court` + `state` or `debtor_kind`; with
/// `sort=updated` none or `court`; `opened_from`/`opened_to` go with `sort=opened`,
/// `updated_since` with `sort=updated`. A debtor filter (`debtor_ico`, `debtor_rc`,
/// `debtor_name`) goes with any of them. Other combinations are a 400 that says so.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct CaseListParams {
    /// Court: its short name (`KSPHA`) or its code.
    court: Option<String>,
    /// The case's state as the register names it (`KONKURS`, `ODDLUŽENÍ`, ...).
    state: Option<String>,
    /// Opened on or after this date (with `sort=opened`).
    #[param(value_type = Option<String>, format = Date)]
    opened_from: Option<String>,
    /// Opened on or before this date.
    #[param(value_type = Option<String>, format = Date)]
    opened_to: Option<String>,
    /// Whose latest action was published on or after this date; with `sort=updated`
    /// (or a debtor filter).
    #[param(value_type = Option<String>, format = Date)]
    updated_since: Option<String>,
    /// A debtor's IČO; repeat it for cases of any of several debtors (at most 100).
    #[param(value_type = Option<Vec<String>>, style = Form, explode)]
    debtor_ico: Option<Vec<String>>,
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
    /// Count the whole result: `exact`, or `estimated` (PostgreSQL's planner
    /// estimate; on SQLite exact up to 100 000, then that lower bound). In the
    /// `ISIR-Count` and `ISIR-Count-Kind` headers and, in JSON, as `count` in the
    /// body. `Prefer: count=...` works too.
    #[param(inline)]
    count: Option<CountParam>,
    /// `all`: the whole result as one CSV or NDJSON answer, streamed from one
    /// snapshot (no `cursor`, no `limit`); over `api.stream_max_rows` rows only for a
    /// key with the `stream` scope (else a 403 before the first row).
    #[param(inline)]
    stream: Option<StreamAll>,
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
    /// Action-type code (`typUdalosti`); repeat it for any of several (at most 100).
    #[param(rename = "type", value_type = Option<Vec<String>>, style = Form, explode)]
    r#type: Option<Vec<String>>,
    /// Only actions in cases where a person with this IČO is a party (any role); repeat
    /// it for several (at most 100).
    #[param(value_type = Option<Vec<String>>, style = Form, explode)]
    ico: Option<Vec<String>>,
    /// Published on or after this date (Prague time, as the register publishes); with
    /// `case` or `ico` only (the feed is in ID order, publication dates are not).
    #[param(value_type = Option<String>, format = Date)]
    published_from: Option<String>,
    /// Published on or before this date.
    #[param(value_type = Option<String>, format = Date)]
    published_to: Option<String>,
    /// Court: short name or code.
    court: Option<String>,
    /// One case, `INS 4711/2026`.
    #[param(pattern = r"^INS [0-9]+/[0-9]+$")]
    case: Option<String>,
    #[param(minimum = 1)]
    limit: Option<i64>,
    /// Count the feed after `after` (`exact`, or `estimated`: PostgreSQL's planner
    /// estimate; on SQLite exact up to 100 000, then a lower bound) into the
    /// `ISIR-Count` and `ISIR-Count-Kind` headers and, in JSON, as `count` in the
    /// body. `Prefer: count=...` works too.
    #[param(inline)]
    count: Option<CountParam>,
    /// `all`: the whole result as one CSV or NDJSON answer, streamed from one
    /// snapshot (no `cursor`, no `limit`); over `api.stream_max_rows` rows only for a
    /// key with the `stream` scope (else a 403 before the first row).
    #[param(inline)]
    stream: Option<StreamAll>,
    #[param(inline)]
    format: Option<ListFormat>,
}

/// Refuses a parameter the endpoint's description (`P`) does not name, a repeat of one
/// that is not in `lists`, and a list longer than [`MAX_LIST`].
pub(crate) fn only<P: utoipa::IntoParams + 'static>(
    q: &Params,
    lists: &[&str],
) -> Result<(), Problem> {
    let allowed = allowed::<P>();
    if let Some((k, _)) = q.pairs().find(|(k, _)| !allowed.iter().any(|a| a == k)) {
        return Err(Problem::bad(if allowed.is_empty() {
            format!("unknown parameter {k:?}; this endpoint takes no parameters")
        } else {
            format!(
                "unknown parameter {k:?}; this endpoint takes {}",
                allowed.join(", ")
            )
        }));
    }
    for a in allowed {
        let n = q.all(a).len();
        if n > 1 && !lists.contains(&a.as_str()) {
            return Err(Problem::bad(format!(
                "parameter {a:?} is given {n} times; it takes one value{}",
                if lists.is_empty() {
                    String::new()
                } else {
                    format!(" (lists: {})", lists.join(", "))
                }
            )));
        }
        if n > MAX_LIST {
            return Err(Problem::bad(format!(
                "parameter {a:?} is given {n} times, at most {MAX_LIST}; use POST /v1/subjects/lookup for up to 1000 IČOs"
            )));
        }
    }
    Ok(())
}

pub(crate) fn date_param(q: &Params, k: &str) -> Result<Option<String>, Problem> {
    match q.get(k) {
        None => Ok(None),
        Some(v) => chrono::NaiveDate::parse_from_str(v, "%Y-%m-%d")
            .map(|d| Some(d.format("%Y-%m-%d").to_string()))
            .map_err(|_| Problem::bad(format!("{k} {v:?} is not a date (YYYY-MM-DD)"))),
    }
}

/// A code filter's value (`state`, `debtor_kind`, `role`, `type`) matched to the codes
/// the protocol documents, ignoring case and diacritics (`konkurs`, `ODDLUZENI` are
/// `KONKURS`, `ODDLUŽENÍ`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Code {
    /// One of the documented codes, as the feed spells it.
    Known(&'static str),
    /// None of them: valid only if the data holds it verbatim (the register's codes are
    /// kept as sent, PROTOCOL.md), which the caller looks up, else [`Code::refuse`].
    Other(String),
}

impl Code {
    pub(crate) fn of(value: &str, known: &[&'static str]) -> Code {
        let key = crate::readmodel::fold::name_key(value);
        known
            .iter()
            .find(|k| crate::readmodel::fold::name_key(k) == key)
            .map(|k| Code::Known(k))
            .unwrap_or_else(|| Code::Other(value.to_string()))
    }

    /// The 400 for a value that is neither documented nor in the data.
    pub(crate) fn refuse(param: &str, value: &str, known: &[&str]) -> Problem {
        Problem::bad(format!(
            "{param} {value:?} is not a code of the register; one of {} (case and diacritics \
             do not matter)",
            known.join(", ")
        ))
    }

    pub(crate) fn value(&self) -> &str {
        match self {
            Code::Known(k) => k,
            Code::Other(v) => v,
        }
    }
}

/// The debtor kinds the protocol documents (`druhOsoby`).
pub(crate) const KNOWN_DEBTOR_KINDS: &[&str] = &["F", "P", "PODNIKATEL", "SPRÁV_INS"];

pub(crate) fn court_param(q: &Params) -> Result<Option<&'static crate::codes::Court>, Problem> {
    match q.get("court") {
        None => Ok(None),
        Some(c) => crate::codes::COURTS
            .iter()
            .find(|x| x.short.eq_ignore_ascii_case(c) || x.code.eq_ignore_ascii_case(c))
            .map(Some)
            .ok_or_else(|| {
                let known: Vec<&str> = crate::codes::COURTS.iter().map(|x| x.short).collect();
                Problem::bad(format!("unknown court {c:?}; one of {}", known.join(", ")))
            }),
    }
}

/// The parameters of a watchlist's change feed.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct WatchEventParams {
    /// Only events at a greater feed position (the `position` of the last event read;
    /// default: the list's creation watermark).
    after: Option<i64>,
    #[param(minimum = 1)]
    limit: Option<i64>,
    /// `all`: the whole feed up to the watermark as one CSV or NDJSON answer, streamed
    /// from one snapshot (no `limit`; `after` may start it); over
    /// `api.stream_max_rows` rows only for a key that also has the `stream` scope (else
    /// a 403 before the first row).
    #[param(inline)]
    stream: Option<StreamAll>,
    #[param(inline)]
    format: Option<ListFormat>,
}
