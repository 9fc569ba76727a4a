//! The projections as flat rows: the column lists of the CSV answers of the API and of
//! the nightly export (the same, so that both give the same rows), and how a cell is
//! taken from a document.
//!
//! Owns column names and order, which are a published interface (`docs/EXPORTS.md`):
//! add columns at the end, never rename or reorder.

use serde_json::Value;

pub const CASE_COLUMNS: &[&str] = &[
    "case_number",
    "court_short",
    "court_name",
    "state",
    "opened",
    "first_action_id",
    "latest_action_id",
    "latest_published",
    "claims_deadline",
    "ended",
    "debtor_kind",
    "administrator.name",
    "administrator.first_name",
    "administrator.ico",
    "documents",
    "claims",
    "erased",
    "erased_at",
];
pub const EVENT_COLUMNS: &[&str] = &[
    "action_id",
    "case_number",
    "court",
    "type_code",
    "type_name",
    "section",
    "number_in_section",
    "document_url",
    "published",
    "created",
    "slot_action_id",
    "secondary_action",
    "secondary_document",
    "legal_force_date",
    "corrected_published",
    "annulled",
];
pub const SUBJECT_COLUMNS: &[&str] = &[
    "case_number",
    "court",
    "person_id",
    "role",
    "kind",
    "name",
    "first_name",
    "title_before",
    "title_after",
    "legal_form",
    "ico",
    "dic",
    "birth_number",
    "birth_date",
    "left_case",
    "latest_action_id",
];

/// The `stats` table.
pub const STATS_COLUMNS: &[&str] = &["dim", "key", "count"];

/// A cell of a CSV row: `a.b` reaches into objects; arrays and objects are JSON text.
pub fn cell(item: &Value, path: &str) -> String {
    let mut v = item;
    for p in path.split('.') {
        v = &v[p];
    }
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The JSON object of a timeline row.
pub fn event_json_sql(pg: bool) -> String {
    let b = |c: &str| {
        if pg {
            c.to_string()
        } else {
            format!("json(CASE WHEN {c} THEN 'true' ELSE 'false' END)")
        }
    };
    let f = if pg {
        "json_build_object"
    } else {
        "json_object"
    };
    // Every column of the timeline, booleans as JSON booleans on both back ends.
    let parts: Vec<String> = super::timeline::COLUMNS
        .iter()
        .map(|c| match *c {
            "secondary_action" | "secondary_document" => format!("'{c}', {}", b(c)),
            c => format!("'{c}', {c}"),
        })
        .collect();
    let cast = if pg { "::text" } else { "" };
    format!("{f}({}){cast}", parts.join(", "))
}

/// Birth numbers and birth dates are masked (`***`) for readers without the `pii` scope.
pub fn mask_pii(mut p: Value) -> Value {
    for k in ["birth_number", "birth_date"] {
        if p[k].is_string() {
            p[k] = Value::String("***".into());
        }
    }
    p
}
