//! In-place upgrades of the versions that earlier releases built: what a builder's
//! `upgrade` adds to a version made before a change of its shape (a column, an index),
//! in the caller's transaction, so that a store keeps serving without a rebuild.
//!
//! Owns no table of its own; it only alters the builder's tables of the version it is
//! given, and never reads the replica except through the builder's own backfills.

use super::ProjectionError;
use crate::store::sql::Tx;

/// The name-search index of a version made before it ([`super::names`]); whether it
/// was built.
pub(super) async fn names_index(tx: &mut Tx, v: i64) -> Result<bool, ProjectionError> {
    if super::names::current(tx, v).await? == Some(true) {
        return Ok(false);
    }
    let n = super::names::backfill(tx, v).await?;
    // A new table, filled at once: on SQLite its full-text index in one segment, as
    // a rebuild leaves it (the backfill's chunks left one each: 18 at 100 000 cases,
    // each read by every search until merged); its statistics now, not when
    // autovacuum comes.
    super::optimize(tx, &format!("names_v{v}")).await?;
    super::analyze(tx, &format!("names_v{v}")).await?;
    if tx.is_postgres() {
        super::analyze(tx, &format!("name_terms_v{v}")).await?;
    }
    tracing::info!(
        version = v,
        persons = n,
        "parties: name-search index built for a store made before this release's index"
    );
    Ok(true)
}

/// The per-action table of person blocks that releases before 2026-12-06 kept.
pub(super) const HISTORY: &str = "party_history";

/// `parties_vN.first_action_id` for a version made before the column: added and filled
/// with what the feed read from the history table until then (the first action that
/// named the person; the party's document, which holds the same, where no history row
/// is left), and the history table dropped, all in the caller's transaction. Whether it
/// changed anything.
pub(super) async fn first_action_column(tx: &mut Tx, v: i64) -> Result<bool, ProjectionError> {
    let table = format!("parties_v{v}");
    if column(tx, &table, "first_action_id").await?.is_some() {
        return Ok(false);
    }
    let history = format!("{HISTORY}_v{v}");
    let history_exists = if tx.is_postgres() {
        "SELECT COUNT(*) FROM pg_class WHERE relname = $1 AND relkind IN ('r', 'p') \
         AND relnamespace = current_schema()::regnamespace"
    } else {
        "SELECT COUNT(*) FROM sqlite_master WHERE name = $1 AND type = 'table'"
    };
    let from_history = tx
        .int(history_exists, &[history.as_str().into()])
        .await?
        .unwrap_or(0)
        > 0;
    let from_doc = if tx.is_postgres() {
        "(doc::json->>'first_action_id')::bigint"
    } else {
        "json_extract(doc, '$.first_action_id')"
    };
    tx.exec(
        &format!("ALTER TABLE {table} ADD COLUMN first_action_id BIGINT"),
        &[],
    )
    .await?;
    let first = if from_history {
        format!(
            "COALESCE((SELECT MIN(h.action_id) FROM {history} h WHERE h.case_number = {table}.case_number \
             AND h.court = {table}.court AND h.person_id = {table}.person_id), {from_doc})"
        )
    } else {
        from_doc.to_string()
    };
    tx.exec(
        &format!("UPDATE {table} SET first_action_id = {first}"),
        &[],
    )
    .await?;
    tx.exec(&format!("DROP VIEW IF EXISTS {HISTORY}"), &[])
        .await?;
    tx.exec(&format!("DROP TABLE IF EXISTS {history}"), &[])
        .await?;
    tracing::info!(
        version = v,
        "parties: first actions moved into the parties table, the per-action history dropped"
    );
    Ok(true)
}

/// The cells of `parties_vN` (`readmodel::party_cells`) for a version made before them:
/// the columns added, and on PostgreSQL `doc` made nullable. Rows stored before keep
/// their whole documents, which read the same; SQLite cannot drop the old `NOT NULL` in
/// place, so there the version goes on storing whole documents
/// ([`party_docs_required`]) until a rebuild. Whether it changed anything.
pub(super) async fn party_cells(tx: &mut Tx, v: i64) -> Result<bool, ProjectionError> {
    let table = format!("parties_v{v}");
    let mut added = false;
    for (c, t) in crate::readmodel::party_cells::CELL_COLUMNS {
        if column(tx, &table, c).await?.is_none() {
            tx.exec(&format!("ALTER TABLE {table} ADD COLUMN {c} {t}"), &[])
                .await?;
            added = true;
        }
    }
    if added && tx.is_postgres() {
        tx.exec(
            &format!("ALTER TABLE {table} ALTER COLUMN doc DROP NOT NULL"),
            &[],
        )
        .await?;
    }
    if added {
        tracing::info!(
            version = v,
            "parties: documents stored as cells from now on, earlier rows kept whole"
        );
    }
    Ok(added)
}

/// Whether `parties_vN` still requires whole documents (an earlier release's SQLite
/// version, see [`party_cells`]; never on PostgreSQL, whose upgrade drops the
/// constraint, so no catalogue query there on a batch's path).
pub(super) async fn party_docs_required(tx: &mut Tx, v: i64) -> Result<bool, ProjectionError> {
    if tx.is_postgres() {
        return Ok(false);
    }
    Ok(column(tx, &format!("parties_v{v}"), "doc").await? == Some(true))
}

/// Whether `table` has column `col`, and if so whether it is `NOT NULL`.
async fn column(tx: &mut Tx, table: &str, col: &str) -> Result<Option<bool>, ProjectionError> {
    let sql = if tx.is_postgres() {
        "SELECT CAST(CASE WHEN is_nullable = 'NO' THEN 1 ELSE 0 END AS BIGINT) FROM information_schema.columns \
         WHERE table_schema = current_schema() AND table_name = $1 AND column_name = $2"
    } else {
        "SELECT \"notnull\" FROM pragma_table_info($1) WHERE name = $2"
    };
    Ok(tx
        .int(sql, &[table.into(), col.into()])
        .await?
        .map(|n| n != 0))
}

/// The short cells of `timeline_vN` (`readmodel::TimelineCells`) for a version made
/// before them: `document_id` added, and on PostgreSQL `type_name` made nullable. Rows
/// stored before keep their whole cells, which read the same; SQLite cannot drop the
/// old `NOT NULL` in place, so there the version goes on storing whole type names
/// ([`timeline_names_required`]) until a rebuild. Whether it changed anything (the view
/// is then made again, to serve the new column's links).
pub(super) async fn timeline_short_cells(tx: &mut Tx, v: i64) -> Result<bool, ProjectionError> {
    let table = format!("timeline_v{v}");
    if column(tx, &table, "document_id").await?.is_some() {
        return Ok(false);
    }
    tx.exec(
        &format!("ALTER TABLE {table} ADD COLUMN document_id TEXT"),
        &[],
    )
    .await?;
    if tx.is_postgres() {
        tx.exec(
            &format!("ALTER TABLE {table} ALTER COLUMN type_name DROP NOT NULL"),
            &[],
        )
        .await?;
    }
    tracing::info!(
        version = v,
        "timeline: document links stored short from now on, earlier rows kept whole"
    );
    Ok(true)
}

/// Whether `timeline_vN` still requires whole type names (an earlier release's SQLite
/// version, see [`timeline_short_cells`]).
pub(super) async fn timeline_names_required(tx: &mut Tx, v: i64) -> Result<bool, ProjectionError> {
    Ok(column(tx, &format!("timeline_v{v}"), "type_name").await? == Some(true))
}
