//! The subjects resource (`/v1/subjects`): persons by IČO, birth number (`pii` scope) or
//! name, once per case and role.
//!
//! Reads the `parties` projection; the stored documents go out as they are for the
//! `pii` scope and through the privacy mask for everyone else. Never writes.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::Value;

use super::format::{Format, count_of, format_of, respond_list, respond_text, with_count};
use super::pagination::{decode_cursor, docs, encode_cursor, limit, view};
use super::params::{Params, SubjectParams, only};
use crate::read::params::{search_key, url_escape};
use crate::read::{Caller, Problem, ReadState, queries, watermark};
use crate::readmodel::columns;
use crate::store::sql::Tx;

/// Persons matching an IČO, a birth number or a name, once per case and role.
#[utoipa::path(get, path = "/v1/subjects", tag = "subjects",
    params(crate::api::params::SubjectParams),
    responses(
        (status = 200, description = "A page of persons; CSV and NDJSON carry `next` in a `Link` header", headers(("ISIR-Watermark" = i64, description = "Last action ID applied by every projection builder"),
                ("ISIR-Lag-Seconds" = i64, description = "Seconds the projection is behind the replica")),
            content((crate::api::schema::SubjectList = "application/json"), (String = "text/csv"), (String = "application/x-ndjson"))),
        (status = 304, description = "Not modified (`If-None-Match`)"),
        crate::api::schema::V1Errors,
    ))]
pub(crate) async fn subjects(
    State(state): State<ReadState>,
    q: Params,
    headers: HeaderMap,
    caller: Option<axum::Extension<Caller>>,
) -> Result<Response, Problem> {
    let pii = caller.as_ref().is_some_and(|c| c.pii);
    only::<SubjectParams>(&q, &["ico", "rc"])?;
    let format = format_of(&q, &headers)?;
    let limit = limit(&state, &q)?;
    let given: Vec<&str> = ["ico", "rc", "name"]
        .into_iter()
        .filter(|k| q.contains_key(k))
        .collect();
    if given.len() != 1 {
        return Err(Problem::bad("give exactly one of ico, rc or name"));
    }
    let qk = given[0];
    let mut keys = Vec::new();
    let mut col = "";
    for v in q.all(qk) {
        let (c, k) = search_key(qk, qk, v)?;
        col = c;
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    if col == "rc" && !pii {
        return Err(Problem::needs_pii("a search by birth number"));
    }
    let privacy = state.privacy().await?;
    let after = match q.get("cursor") {
        Some(c) => decode_cursor(privacy, c, 3)?,
        None => vec![String::new(), String::new(), String::new()],
    };
    let streaming = super::stream::asked(&q, format)?;
    if streaming {
        // Every person of the keys, page after page in one snapshot.
        let (tx, wm) = watermark::open(&state).await?;
        let caller = caller.as_ref().map(|c| &c.0);
        let pages = SubjectPages {
            col,
            keys,
            after: vec![String::new(), String::new(), String::new()],
        };
        return super::stream::respond(
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
    let (mut tx, wm) = if counting.is_some() {
        watermark::open(&state).await?
    } else {
        watermark::open_single(&state).await?
    };
    let mut rows = queries::subjects_text(&mut tx, col, &keys, &after, limit + 1).await?;
    // The whole result's count: the same statement from the start, without its limit.
    let counted = match counting {
        Some(kind) => {
            let (sql, binds) = queries::subjects_statement(col, &keys, &["", "", ""], 0);
            Some(crate::read::lists::count(&mut tx, &sql, &binds, kind).await?)
        }
        None => None,
    };
    tx.commit().await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next = match rows.last().filter(|_| more) {
        None => None,
        Some(l) => {
            let parts = keyset(l)?;
            let f = q
                .get("format")
                .map(|f| format!("&format={f}"))
                .unwrap_or_default();
            let values: Vec<String> = q
                .all(qk)
                .iter()
                .map(|v| format!("{qk}={}", url_escape(v)))
                .collect();
            Some(format!(
                "/v1/subjects?{}&limit={limit}&cursor={}{f}",
                values.join("&"),
                url_escape(&encode_cursor(privacy, &parts))
            ))
        }
    };
    if format == Format::Json {
        // The stored documents go out as they are, but those that hold PII to mask.
        let mut body = String::with_capacity(rows.iter().map(|r| r.len() + 1).sum::<usize>() + 256);
        body.push_str("{\"next\":");
        body.push_str(&serde_json::to_string(&next).map_err(Problem::internal)?);
        body.push_str(",\"subjects\":[");
        for (i, r) in rows.iter().enumerate() {
            if i > 0 {
                body.push(',');
            }
            if pii {
                body.push_str(r);
            } else {
                let v: Value = serde_json::from_str(r).map_err(Problem::internal)?;
                body.push_str(&privacy.mask(v).to_string());
            }
        }
        body.push(']');
        super::format::push_count(&mut body, counted.as_ref())?;
        let etag = super::format::weak_etag(&[body.as_bytes()]);
        body.push_str(",\"watermark\":");
        body.push_str(&serde_json::to_string(&wm).map_err(Problem::internal)?);
        body.push('}');
        return Ok(with_count(respond_text(&wm, &headers, body, etag), counted));
    }
    let persons = view((!pii).then_some(privacy), docs(&rows)?);
    Ok(with_count(
        respond_list(
            &wm,
            &headers,
            format,
            "subjects",
            persons,
            next,
            columns::SUBJECT_COLUMNS,
        ),
        counted,
    ))
}

/// The persons of a subjects query page after page (a whole-result stream), in the
/// keyset order of its pages (case number, court, person ID).
struct SubjectPages {
    col: &'static str,
    keys: Vec<String>,
    after: Vec<String>,
}

#[async_trait::async_trait]
impl super::stream::Pages for SubjectPages {
    async fn next(&mut self, tx: &mut Tx, n: i64) -> Result<Vec<String>, Problem> {
        let rows = queries::subjects_text(tx, self.col, &self.keys, &self.after, n).await?;
        if let Some(l) = rows.last() {
            self.after = keyset(l)?;
        }
        Ok(rows)
    }
}

/// A person row's keyset position (case number, court, person ID): a page's cursor and
/// where a stream's next statement starts.
fn keyset(row: &str) -> Result<Vec<String>, Problem> {
    Ok(columns::cells(row, &["case_number", "court", "person_id"])
        .map_err(Problem::internal)?
        .iter()
        .map(|c| c.as_str().to_string())
        .collect())
}
