//! The projection queries behind the read API and the HTML pages: one place for each
//! question, so a page and its API endpoint answer the same.
//!
//! Reads the projection views only (never `actions`), inside the caller's read
//! snapshot; returns documents as JSON values, never renders.

use serde_json::Value;

use super::Problem;
use crate::readmodel::party_cells::{VIEW, doc_from, read_columns};
use crate::store::sql::{Tx, Val};

fn parse(rows: &[String]) -> Result<Vec<Value>, Problem> {
    rows.iter()
        .map(|r| serde_json::from_str(r))
        .collect::<Result<_, _>>()
        .map_err(Problem::internal)
}

/// One case document, as the stored JSON text.
pub async fn case_doc_text(tx: &mut Tx, case_number: &str) -> Result<Option<String>, Problem> {
    Ok(tx
        .texts(
            "SELECT doc FROM cases WHERE case_number = $1",
            &[case_number.into()],
        )
        .await?
        .pop())
}

/// How many actions of a case are held back in the quarantine (the read model
/// `case_quarantine`, written by the poller with the quarantine; never the replica).
pub async fn quarantined_actions(tx: &mut Tx, case_number: &str) -> Result<i64, Problem> {
    Ok(tx
        .int(
            "SELECT held FROM case_quarantine WHERE case_number = $1",
            &[case_number.into()],
        )
        .await?
        .unwrap_or(0))
}

/// One case document.
pub async fn case_doc(tx: &mut Tx, case_number: &str) -> Result<Option<Value>, Problem> {
    let doc = tx
        .texts(
            "SELECT doc FROM cases WHERE case_number = $1",
            &[case_number.into()],
        )
        .await?
        .pop();
    doc.map(|d| serde_json::from_str(&d).map_err(Problem::internal))
        .transpose()
}

pub use crate::readmodel::columns::event_json_sql;

/// A case's events after `after`, in action-ID order, at most `limit`.
pub async fn case_events(
    tx: &mut Tx,
    case_number: &str,
    after: i64,
    limit: i64,
) -> Result<Vec<Value>, Problem> {
    parse(&case_events_text(tx, case_number, after, limit).await?)
}

/// [`case_events`] as the database writes them: one JSON object's text a row.
pub async fn case_events_text(
    tx: &mut Tx,
    case_number: &str,
    after: i64,
    limit: i64,
) -> Result<Vec<String>, Problem> {
    let sql = format!(
        "SELECT {} FROM timeline WHERE case_number = $1 AND action_id > $2 ORDER BY action_id LIMIT $3",
        event_json_sql(tx.is_postgres(), false)
    );
    Ok(tx
        .texts(&sql, &[case_number.into(), after.into(), Val::from(limit)])
        .await?)
}

/// Persons whose `col` (`ico`, `rc` or `name_key`) is one of `keys`, after the keyset
/// position `after` (case number, court, person ID), at most `limit`.
pub async fn subjects(
    tx: &mut Tx,
    col: &str,
    keys: &[String],
    after: &[String],
    limit: i64,
) -> Result<Vec<Value>, Problem> {
    parse(&subjects_text(tx, col, keys, after, limit).await?)
}

/// [`subjects`] as the stored JSON texts.
pub async fn subjects_text(
    tx: &mut Tx,
    col: &str,
    keys: &[String],
    after: &[String],
    limit: i64,
) -> Result<Vec<String>, Problem> {
    let (sql, binds) = subjects_statement(col, keys, after, limit);
    Ok(tx.rows_with(&sql, &binds, |r| doc_from(r, 0)).await?)
}

/// The statement of [`subjects_text`] and its binds (the limit last, as
/// [`crate::read::lists::count`] takes a list statement).
pub fn subjects_statement<S: AsRef<str>>(
    col: &str,
    keys: &[String],
    after: &[S],
    limit: i64,
) -> (String, Vec<Val>) {
    let sql = if keys.len() == 1 {
        subjects_sql(col)
    } else {
        subjects_in_sql(col, keys.len())
    };
    let mut binds: Vec<Val> = keys.iter().map(|k| k.as_str().into()).collect();
    binds.extend([
        after[0].as_ref().into(),
        after[1].as_ref().into(),
        after[2].as_ref().into(),
        Val::from(limit),
    ]);
    (sql, binds)
}

/// The statement of [`subjects_text`] for one key: `$1` the key, `$2..$4` the keyset
/// position, `$5` the limit. The index `(col, case_number, court, person_id)` answers it
/// in order.
pub fn subjects_sql(col: &str) -> String {
    assert!(
        ["ico", "rc", "name_key"].contains(&col),
        "no search key {col}"
    );
    format!(
        "SELECT {} FROM {VIEW} WHERE {col} = $1 AND (case_number, court, person_id) > ($2, $3, $4) \
         ORDER BY case_number, court, person_id LIMIT $5",
        read_columns("")
    )
}

/// The statement for `n` keys: `$1..$n` the keys, then the keyset position and the
/// limit. Each key is an index lookup; the rows of all of them are then sorted (at most
/// the API's list limit of keys).
pub fn subjects_in_sql(col: &str, n: usize) -> String {
    assert!(
        ["ico", "rc", "name_key"].contains(&col),
        "no search key {col}"
    );
    let list: Vec<String> = (1..=n).map(|i| format!("${i}")).collect();
    format!(
        "SELECT {} FROM {VIEW} WHERE {col} IN ({}) AND (case_number, court, person_id) > (${}, ${}, ${}) \
         ORDER BY case_number, court, person_id LIMIT ${}",
        read_columns(""),
        list.join(", "),
        n + 1,
        n + 2,
        n + 3,
        n + 4
    )
}

/// The persons of one case (debtors, creditors, administrators), by role and name.
pub async fn case_parties(tx: &mut Tx, case_number: &str) -> Result<Vec<Value>, Problem> {
    let sql = format!(
        "SELECT {} FROM {VIEW} WHERE case_number = $1 ORDER BY role, name_key, person_id LIMIT 2000",
        read_columns("")
    );
    let rows = tx
        .rows_with(&sql, &[case_number.into()], |r| doc_from(r, 0))
        .await?;
    parse(&rows)
}
