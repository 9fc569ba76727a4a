//! Pages of a list: the `limit` parameter, the sealed keyset cursor, the `next` link's
//! query, and the caller's view of the documents (masked without the `pii` scope).
//!
//! Owns paging rules only; it never runs a query.

use serde_json::Value;

use crate::read::params::url_escape;
use crate::read::{Problem, ReadState};

pub(crate) fn limit(state: &ReadState, q: &super::params::Params) -> Result<i64, Problem> {
    match q.get("limit") {
        None => Ok(state.opts.default_limit),
        Some(l) => {
            let n: i64 = l
                .parse()
                .map_err(|_| Problem::bad(format!("limit {l:?} is not a number")))?;
            if n < 1 || n > state.opts.max_limit {
                return Err(Problem::bad(format!(
                    "limit {n} is outside 1-{}",
                    state.opts.max_limit
                )));
            }
            Ok(n)
        }
    }
}

/// Cuts the rows of a list query (which asked for `limit + 1`) to the page, and tells
/// whether there is a next page.
pub(crate) fn page<T>(mut items: Vec<T>, limit: i64) -> (Vec<T>, bool) {
    let more = items.len() as i64 > limit;
    items.truncate(limit as usize);
    (items, more)
}

/// The `action_id` of the last of `rows` (events as JSON text), where a page ends.
pub(crate) fn last_action_id(rows: &[String]) -> Result<Option<i64>, Problem> {
    let Some(l) = rows.last() else {
        return Ok(None);
    };
    let c = crate::readmodel::columns::cells(l, &["action_id"]).map_err(Problem::internal)?;
    c[0].as_str()
        .parse()
        .map(Some)
        .map_err(|_| Problem::internal("an event without its action ID"))
}

/// Parses JSON documents read from a projection.
pub(crate) fn docs(rows: &[String]) -> Result<Vec<Value>, Problem> {
    rows.iter()
        .map(|r| serde_json::from_str(r))
        .collect::<Result<_, _>>()
        .map_err(Problem::internal)
}

/// A cursor: the keyset position sealed with the replica's key (a person ID never
/// leaves in a page link).
pub(crate) fn encode_cursor(p: &crate::privacy::Privacy, parts: &[String]) -> String {
    p.seal(parts)
}

pub(crate) fn decode_cursor(
    p: &crate::privacy::Privacy,
    c: &str,
    n: usize,
) -> Result<Vec<String>, Problem> {
    p.unseal(c, n).ok_or_else(|| {
        Problem::bad("the cursor is malformed or not this replica's; use the `next` link of the previous page")
    })
}

/// The caller's view of projection documents: as stored for the `pii` scope, through
/// the privacy mask otherwise.
pub(crate) fn view(p: Option<&crate::privacy::Privacy>, docs: Vec<Value>) -> Vec<Value> {
    match p {
        None => docs,
        Some(p) => docs.into_iter().map(|d| p.mask(d)).collect(),
    }
}

/// The request's parameters but `drop`, escaped, in a stable order (for `next` links).
pub(crate) fn query_except(q: &super::params::Params, drop: &[&str]) -> Vec<String> {
    let mut qs: Vec<String> = q
        .pairs()
        .filter(|(k, _)| !drop.contains(k))
        .map(|(k, v)| format!("{k}={}", url_escape(v)))
        .collect();
    qs.sort();
    qs
}
