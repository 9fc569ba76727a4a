//! Bulk lookups (`POST /v1/subjects/lookup`): up to 1 000 IČOs (and birth numbers with
//! the `pii` scope) answered in one read snapshot, each with its persons, cases and
//! roles, or as not found. A creditor checks its whole book of business partners in one
//! request instead of a thousand.
//!
//! Reads the `parties` projection, one indexed lookup a key inside one snapshot; the
//! documents go through the privacy mask without the `pii` scope. It takes a body but
//! writes nothing: the route is `POST` only because a thousand keys do not fit a URL.

use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::format::respond_uncached;
use super::params::{NoParams, Params, only};
use crate::read::params::{search_key, url_escape};
use crate::read::{Caller, Problem, ReadState, Watermark, queries, watermark};
use crate::readmodel::PartyDoc;

/// Most keys one lookup takes (IČOs and birth numbers together).
pub const MAX_KEYS: usize = 1000;

/// Most persons one key answers; `next` pages the rest through `/v1/subjects`.
pub const ROWS_PER_KEY: i64 = 100;

/// What to look up: IČOs, and birth numbers for a key with the `pii` scope.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LookupRequest {
    /// IČOs, 6 to 12 digits each.
    #[serde(default)]
    #[schema(max_items = 1000, inline)]
    pub ico: Vec<Ico>,
    /// Birth numbers (`NNNNNN/NNNN` or without the slash). Only for a key with the
    /// `pii` scope: without it the answer is a 403 problem.
    #[serde(default)]
    #[schema(max_items = 1000, inline)]
    pub rc: Vec<BirthNumber>,
}

/// An IČO as the lookup takes it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(transparent)]
#[schema(value_type = String, pattern = r"^[0-9]{6,12}$")]
pub struct Ico(pub String);

/// A birth number as the lookup takes it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(transparent)]
#[schema(value_type = String, pattern = r"^[0-9]{6}/?[0-9]{3,4}$")]
pub struct BirthNumber(pub String);

/// The answer for one key.
#[derive(Serialize, ToSchema)]
pub struct LookupResult {
    /// `ico` or `rc`.
    pub kind: String,
    /// The key as it was given.
    pub value: String,
    /// Whether any person has it.
    pub found: bool,
    /// Its persons, each once per case and role, at most 100 (birth data and person IDs
    /// masked without the `pii` scope).
    pub subjects: Vec<PartyDoc>,
    /// The rest of its persons, when there are more than 100.
    pub next: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct LookupAnswer {
    /// One result a key given, in the order given (a repeated key answers once).
    pub results: Vec<LookupResult>,
    pub watermark: Watermark,
}

/// Persons of many IČOs (or birth numbers) at once, in one snapshot.
#[utoipa::path(post, path = "/v1/subjects/lookup", tag = "subjects",
    params(crate::api::params::NoParams),
    request_body(content = LookupRequest, description = "Up to 1 000 keys", content_type = "application/json"),
    responses(
        (status = 200, description = "A result a key", body = LookupAnswer, headers(("ISIR-Watermark" = i64, description = "Last action ID applied by every projection builder"),
                ("ISIR-Lag-Seconds" = i64, description = "Seconds the projection is behind the replica"))),
        (status = 413, description = "The body is larger than 1 MiB (`http::MAX_BODY`), far above the largest lookup", body = String, content_type = "text/plain"),
        crate::api::schema::V1Errors,
    ))]
pub(crate) async fn lookup(
    State(state): State<ReadState>,
    q: Params,
    caller: Option<axum::Extension<Caller>>,
    body: Bytes,
) -> Result<Response, Problem> {
    only::<NoParams>(&q, &[])?;
    let pii = caller.is_some_and(|c| c.pii);
    let req: LookupRequest = serde_json::from_slice(&body).map_err(|e| {
        Problem::bad(format!(
            "the body is not a lookup ({e}); send {{\"ico\": [...], \"rc\": [...]}}"
        ))
    })?;
    let total = req.ico.len() + req.rc.len();
    if total == 0 {
        return Err(Problem::bad("give at least one key in `ico` or `rc`"));
    }
    if total > MAX_KEYS {
        return Err(Problem::bad(format!(
            "{total} keys; a lookup takes at most {MAX_KEYS}"
        )));
    }
    if !req.rc.is_empty() && !pii {
        return Err(Problem::needs_pii("a lookup by birth number"));
    }
    // Every key validated before anything is read: one bad key is named, none answered.
    let mut keys: Vec<Key> = Vec::with_capacity(total);
    let icos: Vec<&String> = req.ico.iter().map(|v| &v.0).collect();
    let rcs: Vec<&String> = req.rc.iter().map(|v| &v.0).collect();
    for (kind, values) in [("ico", &icos), ("rc", &rcs)] {
        for (i, v) in values.iter().enumerate() {
            let (col, key) = search_key(&format!("{kind}[{i}]"), kind, v)?;
            if !keys.iter().any(|k| k.kind == kind && k.key == key) {
                keys.push(Key {
                    kind,
                    value: v.to_string(),
                    col,
                    key,
                });
            }
        }
    }
    let (mut tx, wm) = watermark::open_many(&state).await?;
    let results = if tx.is_direct() {
        // A thousand statements on a direct connection run on the calling thread: on
        // the blocking pool, not on the async workers.
        let st = state.clone();
        let rt = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            rt.block_on(async move {
                let privacy = st.privacy().await?;
                let r = answer(&mut tx, &keys, privacy, pii).await?;
                tx.commit().await?;
                Ok::<_, Problem>(r)
            })
        })
        .await
        .map_err(Problem::internal)??
    } else {
        let privacy = state.privacy().await?;
        let r = answer(&mut tx, &keys, privacy, pii).await?;
        tx.commit().await?;
        r
    };
    let body = serde_json::json!({ "results": results, "watermark": wm });
    Ok(respond_uncached(&wm, body.to_string()))
}

/// A key to look up: as given (`value`) and as the `parties` column `col` holds it.
struct Key {
    kind: &'static str,
    value: String,
    col: &'static str,
    key: String,
}

/// The result of each key, read in `tx`.
async fn answer(
    tx: &mut crate::store::sql::Tx,
    keys: &[Key],
    privacy: &crate::privacy::Privacy,
    pii: bool,
) -> Result<Vec<Value>, Problem> {
    let start = [String::new(), String::new(), String::new()];
    let mut results = Vec::with_capacity(keys.len());
    for Key {
        kind,
        value,
        col,
        key,
    } in keys
    {
        let mut rows =
            queries::subjects_text(tx, col, std::slice::from_ref(key), &start, ROWS_PER_KEY + 1)
                .await?;
        let more = rows.len() as i64 > ROWS_PER_KEY;
        rows.truncate(ROWS_PER_KEY as usize);
        let next = match rows.last().filter(|_| more) {
            None => None,
            Some(last) => {
                let parts: Vec<String> =
                    crate::readmodel::columns::cells(last, &["case_number", "court", "person_id"])
                        .map_err(Problem::internal)?
                        .iter()
                        .map(|c| c.as_str().to_string())
                        .collect();
                Some(format!(
                    "/v1/subjects?{kind}={}&limit={ROWS_PER_KEY}&cursor={}",
                    url_escape(value),
                    url_escape(&privacy.seal(&parts))
                ))
            }
        };
        let subjects: Vec<Value> = rows
            .iter()
            .map(|r| {
                let v: Value = serde_json::from_str(r).map_err(Problem::internal)?;
                Ok(if pii { v } else { privacy.mask(v) })
            })
            .collect::<Result<_, Problem>>()?;
        results.push(serde_json::json!({
            "kind": kind,
            "value": value,
            "found": !subjects.is_empty(),
            "subjects": subjects,
            "next": next,
        }));
    }
    Ok(results)
}
