//! The change feed (`/v1/events`): every action after an ID, in ID order, filtered by
//! type, court or case.
//!
//! Reads the `timeline` projection; never reads `actions`, never writes.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;

use super::format::{count_of, format_of, respond_docs, with_count};
use super::pagination::{last_action_id, limit, page, query_except};
use super::params::{EventParams, Params, court_param, date_param, only};
use super::stream;
use crate::read::lists::{self, EventQuery, MAX_FEED_CASES};
use crate::read::params::search_key;
use crate::read::{Problem, ReadState, queries, watermark};
use crate::readmodel::columns;
use crate::store::sql::Val;

/// The change feed: every action after an ID, in ID order.
#[utoipa::path(get, path = "/v1/events", tag = "events",
    params(crate::api::params::EventParams),
    responses(
        (status = 200, description = "A page of the feed; CSV and NDJSON carry `next` in a `Link` header", headers(("ISIR-Watermark" = i64, description = "Last action ID applied by every projection builder"),
                ("ISIR-Lag-Seconds" = i64, description = "Seconds the projection is behind the replica")),
            content((crate::api::schema::EventList = "application/json"), (String = "text/csv"), (String = "application/x-ndjson"))),
        (status = 304, description = "Not modified (`If-None-Match`)"),
        crate::api::schema::V1Errors,
    ))]
pub(crate) async fn events(
    State(state): State<ReadState>,
    q: Params,
    headers: HeaderMap,
    caller: Option<axum::Extension<crate::read::Caller>>,
) -> Result<Response, Problem> {
    only::<EventParams>(&q, &["type", "ico"])?;
    let format = format_of(&q, &headers)?;
    let limit = limit(&state, &q)?;
    let after: i64 = match q.get("after") {
        None => -1,
        Some(a) => a
            .parse()
            .map_err(|_| Problem::bad(format!("after {a:?} is not an action ID")))?,
    };
    let mut eq = EventQuery {
        after,
        limit: limit + 1,
        ..EventQuery::default()
    };
    // Action-type codes: those of the code list (data/event-types.csv); another only if
    // the timeline holds it (the register's new codes are kept verbatim), looked up
    // once the snapshot is open.
    let mut unlisted: Vec<String> = Vec::new();
    for t in q.all("type") {
        if t.is_empty() || t.len() > 6 || !t.chars().all(|c| c.is_ascii_digit()) {
            return Err(Problem::bad(format!(
                "type {t:?} is not an action-type code (digits, such as 1 or 363: \
                 data/event-types.csv lists them)"
            )));
        }
        if !crate::codes::event_types().contains_key(t) {
            unlisted.push(t.to_string());
        }
        if !eq.types.iter().any(|x| x == t) {
            eq.types.push(t.to_string());
        }
    }
    let mut icos = Vec::new();
    for v in q.all("ico") {
        icos.push(search_key("ico", "ico", v)?.1);
    }
    eq.published_from = date_param(&q, "published_from")?;
    eq.published_to = date_param(&q, "published_to")?;
    eq.court = court_param(&q)?.map(|c| c.code.to_string());
    if let Some(c) = q.get("case") {
        let ok = c
            .strip_prefix("INS ")
            .and_then(|r| r.split_once('/'))
            .is_some_and(|(n, y)| n.parse::<u32>().is_ok() && y.parse::<u32>().is_ok());
        if !ok {
            return Err(Problem::bad(format!(
                "case {c:?} is not a case number such as `INS 4711/2026`"
            )));
        }
        eq.case = Some(c.clone());
    }
    let streaming = stream::asked(&q, format)?;
    let counting = count_of(&q, &headers)?;
    let (mut tx, wm) = watermark::open_list(
        &state,
        streaming || counting.is_some(),
        crate::read::limit::Plans::Kept,
    )
    .await?;
    if !icos.is_empty() {
        // The IČOs' cases first (an index lookup each), then their timelines.
        let sql = format!(
            "SELECT DISTINCT case_number FROM parties WHERE ico IN ({}) LIMIT {}",
            tx.list(icos.len()),
            MAX_FEED_CASES + 1
        );
        let binds: Vec<Val> = icos.iter().map(|i| i.as_str().into()).collect();
        let cases = tx.texts(&sql, &binds).await?;
        if cases.len() as i64 > MAX_FEED_CASES {
            return Err(Problem::bad(format!(
                "these IČOs are parties to more than {MAX_FEED_CASES} cases; narrow the feed with case= \
                 or follow them with a watchlist (/v1/watchlists/NAME/events)"
            )));
        }
        eq.cases = Some(cases);
    }
    let at = lists::source(&mut tx, "timeline").await?;
    for t in &unlisted {
        let sql = format!(
            "SELECT '1' FROM {} WHERE type_code = $1 LIMIT 1",
            at.timeline()
        );
        if tx.texts(&sql, &[t.as_str().into()]).await?.is_empty() {
            return Err(Problem::bad(format!(
                "type {t:?} is neither in the register's code list (data/event-types.csv) \
                 nor in the data"
            )));
        }
    }
    let cols = queries::event_json_sql(tx.is_postgres(), lists::short_cells(&mut tx, &at).await?);
    if streaming {
        lists::events(&eq, &cols, &at)?; // refuses what it refuses before any row
        let pages = EventPages { q: eq, at, cols };
        let caller = caller.as_ref().map(|c| &c.0);
        return stream::respond(
            &state,
            caller,
            format,
            &wm,
            tx,
            pages,
            columns::EVENT_COLUMNS,
        )
        .await;
    }
    let (sql, binds) = lists::events(&eq, &cols, &at)?;
    let rows = tx.texts(&sql, &binds).await?;
    let counted = match counting {
        Some(kind) => Some(lists::count(&mut tx, &sql, &binds, kind).await?),
        None => None,
    };
    tx.commit().await?;
    let (rows, more) = page(rows, limit);
    let next = match last_action_id(&rows)?.filter(|_| more) {
        None => None,
        Some(last) => {
            let qs = query_except(&q, &["after", "limit"]);
            Some(format!(
                "/v1/events?after={last}&limit={limit}{}{}",
                if qs.is_empty() { "" } else { "&" },
                qs.join("&")
            ))
        }
    };
    // The rows are JSON objects the database made (its own key order and spacing):
    // each is written again by `serde_json`, so that an answer is the same text on
    // either back end.
    let rows = rows
        .iter()
        .map(|r| columns::event_text(r))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Problem::internal)?;
    Ok(with_count(
        respond_docs(
            &wm,
            &headers,
            format,
            "events",
            rows,
            None,
            next,
            columns::EVENT_COLUMNS,
            counted.as_ref(),
        )?,
        counted,
    ))
}

/// The feed page after page (a whole-result stream).
struct EventPages {
    q: EventQuery,
    at: lists::Source,
    cols: String,
}

#[async_trait::async_trait]
impl stream::Pages for EventPages {
    async fn next(
        &mut self,
        tx: &mut crate::store::sql::Tx,
        n: i64,
    ) -> Result<Vec<String>, Problem> {
        self.q.limit = n;
        let (sql, binds) = lists::events(&self.q, &self.cols, &self.at)?;
        let rows = tx.texts(&sql, &binds).await?;
        if let Some(last) = last_action_id(&rows)? {
            self.q.after = last;
        }
        Ok(rows)
    }
}
