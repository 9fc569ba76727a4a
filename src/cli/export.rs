//! `isir export`: a CSV and/or Parquet export of the projections in one read snapshot, with a manifest
//! (run from cron, or nightly by the daemon with `export.schedule`).

use std::path::PathBuf;

use std::io::IsTerminal;

use clap::Args;

use super::{Exit, Output};
use crate::config::{Format, Settings, Table};
use crate::store::Store;

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The export's directory; must not exist or be empty.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Tables, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "cases,parties,events,stats"
    )]
    pub tables: Vec<Table>,
    /// File formats, comma-separated: csv, parquet (default: `export.formats`, csv).
    #[arg(
        long = "format",
        value_enum,
        value_delimiter = ',',
        value_name = "FORMAT"
    )]
    pub formats: Vec<Format>,
    /// Compress each CSV file with gzip (Parquet is compressed inside, with zstd).
    #[arg(long)]
    pub gzip: bool,
    /// Only events after this action ID (a previous export's watermark).
    #[arg(long, value_name = "ID")]
    pub since_watermark: Option<i64>,
    /// Include personal data (birth numbers and dates, person IDs); the files are
    /// then readable by their owner only.
    #[arg(long)]
    pub include_pii: bool,
    /// Write cells as they are, without the CSV formula guard (a leading `'` before
    /// a text starting with `=`, `+`, `-`, `@`, a tab or a carriage return).
    #[arg(long)]
    pub no_formula_guard: bool,
    /// When the export is complete, point `latest` beside it (a symbolic link in the
    /// directory above `--out`) at it.
    #[arg(long)]
    pub latest: bool,
    /// A previous export: its watermark names the erasures to list.
    #[arg(long, value_name = "DIR")]
    pub previous: Option<PathBuf>,
    #[command(flatten)]
    pub output: Output,
}

pub async fn run(settings: &Settings, store: &Store, a: ExportArgs) -> anyhow::Result<Exit> {
    let previous_watermark = match &a.previous {
        Some(p) => Some(crate::export::read_manifest(p)?.watermark.action_id),
        None => None,
    };
    let m = crate::export::export(
        store,
        &crate::export::ExportOptions {
            out: a.out.clone(),
            tables: a.tables.clone(),
            formats: if a.formats.is_empty() {
                settings.export.formats()?
            } else {
                a.formats.clone()
            },
            gzip: a.gzip,
            since_watermark: a.since_watermark,
            include_pii: a.include_pii,
            formula_guard: !a.no_formula_guard && settings.export.formula_guard,
            previous_watermark,
            progress: !a.output.json && std::io::stderr().is_terminal(),
            latest: a.latest,
        },
    )
    .await?;
    a.output.print(&m, || {
        let mut t = String::new();
        for f in &m.files {
            t.push_str(&format!(
                "{:<34} {:>10} rows {:>14} bytes  sha256 {}\n",
                f.name, f.rows, f.bytes, f.sha256
            ));
        }
        t.push_str(&format!(
            "export written to {} at watermark {} ({} erased cases listed)",
            a.out.display(),
            m.watermark.action_id,
            m.erased_since_previous.cases.len()
        ));
        t
    })?;
    Ok(Exit::Ok)
}
