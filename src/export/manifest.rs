//! The export's manifest (`manifest.json`): watermark, files with rows, bytes and
//! SHA-256, columns with types, cases erased since the previous export; its atomic write
//! and its read. The format is `docs/EXPORTS.md`'s.

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use super::{ExportError, Format, Purged, Table};
use crate::privacy;
use crate::store::sql::Tx;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ManifestWatermark {
    /// The lowest cursor of the projection builders: every action up to it is in.
    pub action_id: i64,
    pub published: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Column {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FileEntry {
    pub table: Table,
    /// `csv` or `parquet` (absent in manifests before Parquet: csv).
    #[serde(default = "csv_format")]
    pub format: Format,
    /// The file's path under the export's directory (`cases.csv`,
    /// `events/year=2024/part-0.parquet`).
    pub name: String,
    /// The Hive partition the file holds (`{"year": "2024"}` for the events in Parquet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<BTreeMap<String, String>>,
    pub rows: u64,
    pub bytes: u64,
    pub sha256: String,
    pub columns: Vec<Column>,
    /// Cells a typed Parquet column could not hold, by column (written as nulls; the
    /// CSV keeps them verbatim).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unparsed: BTreeMap<String, u64>,
}

fn csv_only() -> Vec<Format> {
    vec![Format::Csv]
}

fn csv_format() -> Format {
    Format::Csv
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Erased {
    /// Erasures after this action ID (None: all).
    pub since: Option<i64>,
    pub cases: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub format: String,
    pub program: String,
    pub version: String,
    pub written_at: String,
    pub watermark: ManifestWatermark,
    pub since_watermark: Option<i64>,
    pub include_pii: bool,
    pub gzip: bool,
    /// The formats written (absent in manifests before Parquet: csv).
    #[serde(default = "csv_only")]
    pub formats: Vec<Format>,
    pub files: Vec<FileEntry>,
    pub erased_since_previous: Erased,
    /// Whether text cells starting with `=`, `+`, `-`, `@`, a tab or a carriage return
    /// carry a leading `'` (absent in exports before the guard: false).
    #[serde(default)]
    pub formula_guard: bool,
    /// Earlier exports that held debtors erased since, and what was done to them
    /// (filled by the nightly run, `export::purge`).
    #[serde(default)]
    pub purged: Vec<Purged>,
    /// Set in an earlier export's manifest when a later run rewrote it for erasures.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rewritten: Vec<Purged>,
}

pub const FORMAT: &str = "isir-export/1";

/// The `program` an export of this tool names.
pub const PROGRAM: &str = "isir";

/// The type of a column, as the manifest and `docs/EXPORTS.md` give it.
pub fn column_type(name: &str) -> &'static str {
    let base = name.rsplit('.').next().unwrap_or(name);
    match base {
        "erased" | "secondary_action" | "secondary_document" => "boolean",
        "documents" | "claims" | "count" | "number_in_section" | "debtor_count" => "integer",
        b if b.ends_with("action_id") => "integer",
        "opened" | "claims_deadline" | "ended" | "birth_date" | "legal_force_date" => "date",
        "published"
        | "created"
        | "latest_published"
        | "erased_at"
        | "corrected_published"
        | "annulled"
        | "left_case" => "datetime",
        _ => "string",
    }
}

pub(super) async fn watermark(tx: &mut Tx) -> Result<ManifestWatermark, sqlx::Error> {
    let cursor = tx
        .int(
            "SELECT MIN(cursor) FROM proj_meta WHERE name NOT LIKE '%#next'",
            &[],
        )
        .await?
        .unwrap_or(-1);
    let published = tx
        .texts(
            "SELECT published FROM timeline WHERE action_id = $1",
            &[cursor.into()],
        )
        .await?
        .pop();
    Ok(ManifestWatermark {
        action_id: cursor,
        published,
    })
}

/// Writes `m` as the manifest of `dir` through a temporary file renamed over it (the
/// owner's only when the export holds personal data).
pub fn write_manifest(dir: &Path, m: &Manifest) -> Result<(), ExportError> {
    let tmp = dir.join(".manifest.json.tmp");
    let mut f = if m.include_pii {
        privacy::create_private_file(&tmp)?
    } else {
        std::fs::File::create(&tmp)?
    };
    f.write_all(
        serde_json::to_string_pretty(m)
            .unwrap_or_default()
            .as_bytes(),
    )?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join("manifest.json"))?;
    Ok(())
}

/// Reads the manifest of an export directory.
pub fn read_manifest(dir: &Path) -> Result<Manifest, ExportError> {
    let text = std::fs::read_to_string(dir.join("manifest.json"))?;
    serde_json::from_str(&text)
        .map_err(|e| ExportError::Invalid(format!("{}: {e}", dir.join("manifest.json").display())))
}
