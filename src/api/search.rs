//! The name search (`/v1/search?q=`): persons by the words of their names as people type
//! them, ranked, with filters by role, court, kind and (for the `pii` scope) birth year.
//! A text that is an IČO or a birth number answers as `/v1/subjects`, and a case number
//! is a `303` to the case, as on the search page.
//!
//! The query is [`crate::read::search`]'s, which the search page shares; this file owns
//! the parameters, the cursor and the answer. Never writes.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};

use super::format::{count_of, format_of, respond_docs, with_count};
use super::pagination::{limit, query_except};
use super::params::{Code, Params, SearchParams, court_param, only};
use super::stream;
use crate::read::params::{SearchText, case_number, url_escape};
use crate::read::search::{After, Search};
use crate::read::{Caller, Problem, ReadState, search, watermark};
use crate::readmodel::columns;

/// The parties' `kind` values of a `kind=` filter.
pub fn kinds(k: &str) -> Result<Vec<String>, Problem> {
    match k {
        "person" => Ok(vec!["F".into(), "PODNIKATEL".into()]),
        "company" => Ok(vec!["P".into()]),
        other => Err(Problem::bad(format!(
            "kind {other:?}: one of person (F, PODNIKATEL), company (P)"
        ))),
    }
}

/// The search of a request's parameters (`q`, `role`, `court`, `kind`, `birth_year`).
pub fn parse(q: &Params, pii: bool) -> Result<Search, Problem> {
    let text = q
        .get("q")
        .ok_or_else(|| Problem::bad("q is required: the words of a name (`jan novak`, `alza`)"))?;
    let birth_year = match q.get("birth_year") {
        None => None,
        Some(_) if !pii => return Err(Problem::needs_pii("a filter by birth year")),
        Some(y) => Some(
            y.parse::<i64>()
                .ok()
                .filter(|y| (1800..=2200).contains(y))
                .ok_or_else(|| Problem::bad(format!("birth_year {y:?} is not a year")))?,
        ),
    };
    Ok(Search {
        words: Search::words(text)?,
        role: match q
            .get("role")
            .map(|r| (r, Code::of(r, crate::readmodel::KNOWN_ROLES)))
        {
            None => None,
            Some((_, Code::Known(r))) => Some(r.into()),
            Some((r, Code::Other(_))) => {
                return Err(Code::refuse("role", r, crate::readmodel::KNOWN_ROLES));
            }
        },
        court: court_param(q)?.map(|c| c.short.to_string()),
        kinds: q
            .get("kind")
            .map(|k| kinds(k))
            .transpose()?
            .unwrap_or_default(),
        birth_year,
    })
}

/// A `400` when a filter of the name search is given with a search text that is not a
/// name (`what`: an IČO, a birth number, a case number), rather than ignoring it.
fn no_name_filters(q: &Params, what: &str) -> Result<(), Problem> {
    let given: Vec<&str> = ["role", "court", "kind", "birth_year"]
        .into_iter()
        .filter(|k| q.contains_key(k))
        .collect();
    if given.is_empty() {
        return Ok(());
    }
    Err(Problem::bad(format!(
        "q is {what}, which finds its subjects or case whole: {} filter a search by name only",
        given.join(", ")
    )))
}

/// Persons whose names hold every word of `q` (whole or as a prefix, in any order);
/// the exact full name first, then the others, each by the person's latest action.
#[utoipa::path(get, path = "/v1/search", tag = "subjects",
    params(crate::api::params::SearchParams),
    responses(
        (status = 200, description = "A page of persons in rank order; CSV and NDJSON carry `next` in a `Link` header", headers(("ISIR-Watermark" = i64, description = "Last action ID applied by every projection builder"),
                ("ISIR-Lag-Seconds" = i64, description = "Seconds the projection is behind the replica")),
            content((crate::api::schema::SubjectList = "application/json"), (String = "text/csv"), (String = "application/x-ndjson"))),
        (status = 303, description = "`q` is a case number: the case (`Location: /v1/cases/{year}/{number}`)"),
        (status = 304, description = "Not modified (`If-None-Match`)"),
        crate::api::schema::V1Errors,
    ))]
pub(crate) async fn search(
    State(state): State<ReadState>,
    q: Params,
    headers: HeaderMap,
    caller: Option<axum::Extension<Caller>>,
) -> Result<Response, Problem> {
    only::<SearchParams>(&q, &[])?;
    // An IČO, a birth number or a case number finds its subjects or its case, as on the
    // search page.
    if let Some(text) = q.get("q") {
        match SearchText::of(text) {
            SearchText::Key("name", _) => {}
            SearchText::Case { year, number } => {
                no_name_filters(&q, "a case number")?;
                case_number(&year, &number)?;
                let mut r = Redirect::to(&format!("/v1/cases/{year}/{number}")).into_response();
                r.headers_mut().insert(
                    axum::http::header::CACHE_CONTROL,
                    axum::http::HeaderValue::from_static("no-store"),
                );
                return Ok(r);
            }
            SearchText::Key(key, what) => {
                no_name_filters(&q, what)?;
                // Checked here, so a refusal names the parameter given.
                crate::read::params::search_key("q", key, text.trim())?;
                let mut pairs = vec![(key.to_string(), text.trim().to_string())];
                pairs.extend(
                    q.pairs()
                        .filter(|(k, _)| {
                            ["limit", "cursor", "count", "stream", "format"].contains(k)
                        })
                        .map(|(k, v)| (k.to_string(), v.to_string())),
                );
                return super::subjects::subjects(
                    State(state),
                    Params::from_pairs(pairs),
                    headers,
                    caller,
                )
                .await;
            }
        }
    }
    let pii = caller.as_ref().is_some_and(|c| c.pii);
    let s = parse(&q, pii)?;
    let format = format_of(&q, &headers)?;
    let limit = limit(&state, &q)?;
    let privacy = state.privacy().await?;
    let after = q
        .get("cursor")
        .map(|c| After::unseal(privacy, c))
        .transpose()?;
    if stream::asked(&q, format)? {
        let (mut tx, wm) = watermark::open(&state).await?;
        let at = search::Tables::of(&mut tx).await?;
        let pages = SearchPages { s, at, after: None };
        let caller = caller.as_ref().map(|c| &c.0);
        return stream::respond(
            &state,
            caller,
            format,
            &wm,
            tx,
            pages,
            columns::SUBJECT_COLUMNS,
        )
        .await;
    }
    let counting = count_of(&q, &headers)?;
    // (Kept plans: every shape of a search is a walk of an index in rank order whatever
    // its words, and a plan for the values cost PostgreSQL ten times the walk.)
    let (mut tx, wm) =
        watermark::open_list(&state, counting.is_some(), crate::read::limit::Plans::Kept).await?;
    let at = search::Tables::of(&mut tx).await?;
    let mut hits = search::search(&mut tx, at, &s, after.as_ref(), limit + 1).await?;
    let counted = match counting {
        Some(kind) => {
            let (sql, binds) = search::count_sql(&s, at);
            Some(crate::read::lists::count(&mut tx, &sql, &binds, kind).await?)
        }
        None => None,
    };
    tx.commit().await?;
    let more = hits.len() as i64 > limit;
    hits.truncate(limit as usize);
    let next = match hits.last().filter(|_| more) {
        None => None,
        Some(l) => {
            let mut qs = query_except(&q, &["cursor", "limit"]);
            qs.push(format!("limit={limit}"));
            qs.push(format!("cursor={}", url_escape(&After::seal(privacy, l))));
            Some(format!("/v1/search?{}", qs.join("&")))
        }
    };
    let rows: Vec<String> = hits.into_iter().map(|h| h.doc).collect();
    Ok(with_count(
        respond_docs(
            &wm,
            &headers,
            format,
            "subjects",
            rows,
            (!pii).then_some(privacy),
            next,
            columns::SUBJECT_COLUMNS,
            counted.as_ref(),
        )?,
        counted,
    ))
}

/// A search page after page (a whole-result stream).
struct SearchPages {
    s: Search,
    at: search::Tables,
    after: Option<After>,
}

#[async_trait::async_trait]
impl stream::Pages for SearchPages {
    async fn next(
        &mut self,
        tx: &mut crate::store::sql::Tx,
        n: i64,
    ) -> Result<Vec<String>, Problem> {
        let hits = search::search(tx, self.at, &self.s, self.after.as_ref(), n).await?;
        if let Some(l) = hits.last() {
            self.after = Some(After::of(l));
        }
        Ok(hits.into_iter().map(|h| h.doc).collect())
    }
}
