//! A watchlist's change feed (`/v1/watchlists/{name}/events`): the actions of the cases
//! in which a watched subject is a party in a watched role, after the list's creation,
//! in feed order, for API keys scoped to the list (`watch:NAME`).
//!
//! Reads the list and the projections through [`crate::watchlist::feed`] in one
//! snapshot; never writes (lists are managed on the admin listener and by `isir watch`).

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::Value;

use super::format::{format_of, respond_list};
use super::pagination::limit;
use super::params::{Params, WatchEventParams, only};
use super::stream;
use crate::read::{Caller, Problem, ReadState, watermark};
use crate::readmodel::columns;
use crate::watchlist::{Roles, feed};

/// The columns of a watchlist event in CSV: the timeline's, then the feed's own.
static WATCH_COLUMNS: &[&str] = &{
    let mut c = [""; columns::EVENT_COLUMNS.len() + 3];
    let mut i = 0;
    while i < columns::EVENT_COLUMNS.len() {
        c[i] = columns::EVENT_COLUMNS[i];
        i += 1;
    }
    c[i] = "position";
    c[i + 1] = "new_party";
    c[i + 2] = "watched";
    c
};

/// A watchlist's feed page after page up to the watermark (a whole-result stream).
struct WatchPages {
    name: String,
    roles: Roles,
    created: i64,
    after: i64,
    until: i64,
    show_rc: bool,
    ended: bool,
}

#[async_trait::async_trait]
impl stream::Pages for WatchPages {
    async fn next(
        &mut self,
        tx: &mut crate::store::sql::Tx,
        n: i64,
    ) -> Result<Vec<String>, Problem> {
        if self.ended {
            return Ok(Vec::new());
        }
        let p = feed::page(
            tx,
            &self.name,
            self.roles,
            self.created,
            self.after,
            self.until,
            n,
            self.show_rc,
        )
        .await?;
        match p.next {
            Some(a) => self.after = a,
            None => self.ended = true,
        }
        Ok(p.events.iter().map(Value::to_string).collect())
    }
}

/// A watchlist's change feed, in feed order (position, then action ID).
#[utoipa::path(get, path = "/v1/watchlists/{name}/events", tag = "watchlists",
    params(("name" = String, Path, description = "The watchlist's name", example = "partners"), crate::api::params::WatchEventParams),
    responses(
        (status = 200, description = "A page of the list's feed; CSV and NDJSON carry `next` in a `Link` header", headers(("ISIR-Watermark" = i64, description = "Last action ID applied by every projection builder"),
                ("ISIR-Lag-Seconds" = i64, description = "Seconds the projection is behind the replica")),
            content((crate::api::schema::WatchEventList = "application/json"), (String = "text/csv"), (String = "application/x-ndjson"))),
        (status = 304, description = "Not modified (`If-None-Match`)"),
        (status = 404, description = "No such watchlist", body = Problem, content_type = "application/problem+json"),
        crate::api::schema::V1Errors,
    ))]
pub(crate) async fn watch_events(
    State(state): State<ReadState>,
    Path(name): Path<String>,
    q: Params,
    headers: HeaderMap,
    caller: Option<axum::Extension<Caller>>,
) -> Result<Response, Problem> {
    let caller = caller.map(|c| c.0).unwrap_or_default();
    if !caller.reads_list(&name) {
        return Err(Problem::new(
            StatusCode::FORBIDDEN,
            "watchlist-scope",
            "a watchlist's feed needs an API key with the scope `watch:<name>` of that list",
        ));
    }
    only::<WatchEventParams>(&q, &[])?;
    let format = format_of(&q, &headers)?;
    let limit = limit(&state, &q)?;
    let after: Option<i64> = match q.get("after") {
        None => None,
        Some(a) => Some(
            a.parse()
                .map_err(|_| Problem::bad(format!("after {a:?} is not a feed position")))?,
        ),
    };
    let (mut tx, wm) = watermark::open(&state).await?;
    let row = tx
        .texts(
            "SELECT roles || '|' || created_watermark FROM watchlists WHERE name = $1",
            &[name.as_str().into()],
        )
        .await?;
    let Some((roles, created)) = row.first().and_then(|r| {
        let (a, b) = r.split_once('|')?;
        Some((Roles::parse(a)?, b.parse::<i64>().ok()?))
    }) else {
        return Err(Problem::not_found(format!("no watchlist named {name:?}")));
    };
    let after = after.unwrap_or(created);
    if stream::asked(&q, format)? {
        let pages = WatchPages {
            name,
            roles,
            created,
            after,
            until: wm.action_id,
            show_rc: caller.pii,
            ended: false,
        };
        return stream::respond(&state, Some(&caller), format, &wm, tx, pages, WATCH_COLUMNS).await;
    }
    let page = feed::page(
        &mut tx,
        &name,
        roles,
        created,
        after,
        wm.action_id,
        limit,
        caller.pii,
    )
    .await?;
    tx.commit().await?;
    let next = page.next.map(|p| {
        let f = q
            .get("format")
            .map(|f| format!("&format={f}"))
            .unwrap_or_default();
        format!(
            "/v1/watchlists/{}/events?after={p}&limit={limit}{f}",
            crate::read::params::url_escape(&name)
        )
    });
    Ok(respond_list(
        &wm,
        &headers,
        format,
        "events",
        page.events,
        next,
        WATCH_COLUMNS,
    ))
}
