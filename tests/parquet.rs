//! Parquet exports read by independent readers (pyarrow and DuckDB, from PyPI, in the
//! environment `scripts/analysts-env.sh` makes; `ISIR_TEST_PYTHON` names its python)
//! and compared with the simulator's truth on both back ends: types, rows and nulls; the
//! mask without the scope and the data with it; owner-only files; Hive partitions by
//! Prague year; an incremental export without overlap or gap; an erased debtor absent
//! after the nightly purge; and the recipes of `docs/EXPORTS.md` run as written.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use common::Backend;
use isir::export::{Format, Table, export};
use isir::projection;
use serde_json::Value;
use sha2::Digest;

/// The python with pyarrow, DuckDB, pandas and Polars. Never skipped: without it the
/// test fails and says how to make it.
fn python() -> PathBuf {
    if let Ok(p) = std::env::var("ISIR_TEST_PYTHON") {
        return p.into();
    }
    let out = std::process::Command::new("scripts/analysts-env.sh")
        .output()
        .expect("scripts/analysts-env.sh runs");
    assert!(
        out.status.success(),
        "scripts/analysts-env.sh failed (set ISIR_TEST_PYTHON to a python with duckdb, \
         pyarrow, pandas and polars): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().into()
}

fn run_python(args: &[&str], cwd: &Path) -> String {
    let out = std::process::Command::new(python())
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "python {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// What pyarrow and DuckDB read of an export's Parquet files (`tests/py/parquet_dump.py`).
fn dump(dir: &Path) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/parquet_dump.py");
    serde_json::from_str(&run_python(
        &[script.to_str().unwrap(), dir.to_str().unwrap()],
        dir,
    ))
    .unwrap()
}

/// A file's rows as maps from column name to cell.
fn rows(file: &Value) -> Vec<BTreeMap<String, Value>> {
    let names: Vec<String> = file["schema"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c[0].as_str().unwrap().to_string())
        .collect();
    file["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            names
                .iter()
                .cloned()
                .zip(r.as_array().unwrap().iter().cloned())
                .collect()
        })
        .collect()
}

fn types(file: &Value) -> Vec<(String, String)> {
    file["schema"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c[0].as_str().unwrap().to_string(),
                c[1].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Every events row of a dump, by action ID.
fn events(d: &Value) -> BTreeMap<i64, BTreeMap<String, Value>> {
    let mut out = BTreeMap::new();
    for (name, f) in d["files"].as_object().unwrap() {
        if name.starts_with("events/") {
            for r in rows(f) {
                let id = r["action_id"].as_i64().unwrap();
                assert!(out.insert(id, r).is_none(), "event {id} twice");
            }
        }
    }
    out
}

/// Microseconds since the epoch of a protocol timestamp, parsed here (not by the code
/// under test).
fn micros(s: &str) -> i64 {
    use chrono::TimeZone;
    if s.len() == 10 {
        // A date in a datetime column: its midnight in Prague.
        let d = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap();
        return chrono_tz::Europe::Prague
            .from_local_datetime(&d.and_hms_opt(0, 0, 0).unwrap())
            .earliest()
            .unwrap()
            .timestamp_micros();
    }
    if s.len() == 16 {
        // A date with its zone (`2008-01-03+01:00`): midnight at that offset.
        return micros(&format!("{}T00:00:00{}", &s[..10], &s[10..]));
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .unwrap_or_else(|e| panic!("{s}: {e}"))
        .timestamp_micros()
}

fn csv_rows(path: &Path) -> Vec<BTreeMap<String, String>> {
    let mut r = csv::Reader::from_path(path).unwrap();
    let h = r.headers().unwrap().clone();
    r.records()
        .map(|x| {
            let x = x.unwrap();
            h.iter()
                .map(String::from)
                .zip(x.iter().map(String::from))
                .collect()
        })
        .collect()
}

/// A Parquet cell against the CSV cell of the same export (written without the formula
/// guard): a null is an empty field; a timestamp the same instant; a date its day.
fn same_cell(p: &Value, c: &str, ty: &str) -> bool {
    match p {
        Value::Null => c.is_empty(),
        Value::Bool(b) => c == b.to_string(),
        Value::Number(n) if ty.starts_with("timestamp") => micros(c) == n.as_i64().unwrap(),
        Value::Number(n) => c == n.to_string(),
        Value::String(s) if ty.starts_with("date32") => c.get(..10) == Some(s.as_str()),
        Value::String(s) => c == s,
        other => panic!("an unexpected cell {other}"),
    }
}

#[cfg(unix)]
fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

async fn catch_up(app: &isir::app::App) {
    while app.poller().unwrap().poll_once().await.actions > 0 {}
    for n in projection::NAMES {
        projection::catch_up(&app.store, n, 3000).await.unwrap();
    }
}

fn opts(out: &Path, pii: bool) -> isir::export::ExportOptions {
    let mut o = common::export_opts(out);
    o.formats = vec![Format::Csv, Format::Parquet];
    o.formula_guard = false;
    o.include_pii = pii;
    o
}

async fn parquet_exports(b: Backend) {
    let (sim, _db, app, _g) = common::replica(b, 6_000, 61).await;
    catch_up(&app).await;
    let dir = tempfile::tempdir().unwrap();
    let masked_dir = dir.path().join("masked");
    let m = export(&app.store, &opts(&masked_dir, false)).await.unwrap();
    let mut o = opts(&dir.path().join("pii"), true);
    o.latest = true;
    let mp = export(&app.store, &o).await.unwrap();
    let masked = dump(&masked_dir);
    let pii = dump(&dir.path().join("pii"));

    // The manifest: each Parquet file with its format, rows, bytes, SHA-256, schema.
    for (m, d, root) in [
        (&m, &masked, masked_dir.clone()),
        (&mp, &pii, dir.path().join("pii")),
    ] {
        let listed: BTreeSet<String> = m
            .files
            .iter()
            .filter(|f| f.format == Format::Parquet)
            .map(|f| f.name.clone())
            .collect();
        let read: BTreeSet<String> = d["files"].as_object().unwrap().keys().cloned().collect();
        assert_eq!(listed, read);
        for t in [Table::Cases, Table::Parties, Table::Stats] {
            assert!(listed.contains(&format!("{}.parquet", t.name())));
        }
        for f in m.files.iter().filter(|f| f.format == Format::Parquet) {
            let bytes = std::fs::read(root.join(&f.name)).unwrap();
            assert_eq!(bytes.len() as u64, f.bytes, "{}", f.name);
            assert_eq!(hex::encode(sha2::Sha256::digest(&bytes)), f.sha256);
            let got = &d["files"][&f.name];
            assert_eq!(got["num_rows"].as_u64().unwrap(), f.rows, "{}", f.name);
            assert_eq!(
                got["compression"],
                serde_json::json!(["ZSTD"]),
                "{}",
                f.name
            );
            let want: Vec<&str> = f.table.columns().to_vec();
            let names: Vec<String> = types(got).into_iter().map(|(n, _)| n).collect();
            assert_eq!(names, want, "{}: the CSV's columns, in order", f.name);
            let listed: Vec<&str> = f.columns.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(listed, want);
            assert!(f.unparsed.is_empty(), "{}: {:?}", f.name, f.unparsed);
            if f.table == Table::Events {
                let year = &f.partition.as_ref().unwrap()["year"];
                assert_eq!(f.name, format!("events/year={year}/part-0.parquet"));
            }
        }
    }

    // Types, as docs/EXPORTS.md gives them (typed here by hand, not from the code).
    let ty = |d: &Value, file: &str, col: &str| -> String {
        types(&d["files"][file])
            .into_iter()
            .find(|(n, _)| n == col)
            .unwrap_or_else(|| panic!("{file} has {col}"))
            .1
    };
    let ts = "timestamp[us, tz=Europe/Prague]";
    for (col, want) in [
        ("case_number", "string"),
        ("opened", "date32[day]"),
        ("first_action_id", "int64"),
        ("latest_published", ts),
        ("documents", "int64"),
        ("erased", "bool"),
        ("erased_at", ts),
        ("debtor_count", "int64"),
    ] {
        assert_eq!(ty(&masked, "cases.parquet", col), want, "cases {col}");
    }
    assert_eq!(ty(&masked, "parties.parquet", "birth_date"), "string");
    assert_eq!(ty(&pii, "parties.parquet", "birth_date"), "date32[day]");
    assert_eq!(ty(&masked, "parties.parquet", "latest_action_id"), "int64");
    assert_eq!(ty(&masked, "parties.parquet", "left_case"), ts);
    assert_eq!(ty(&masked, "stats.parquet", "count"), "int64");
    let an_events_file = masked["files"]
        .as_object()
        .unwrap()
        .keys()
        .find(|k| k.starts_with("events/"))
        .unwrap()
        .clone();
    for (col, want) in [
        ("action_id", "int64"),
        ("published", ts),
        ("created", ts),
        ("number_in_section", "int64"),
        ("secondary_action", "bool"),
        ("legal_force_date", "date32[day]"),
    ] {
        assert_eq!(ty(&masked, &an_events_file, col), want, "events {col}");
    }

    // Events against the truth: every action but the code list's, each field, the
    // instants exact, a missing link a null.
    let truth: Vec<isir::source::Action> = sim
        .truth_all()
        .into_iter()
        .filter(|a| a.case_number != "INS -1/-1")
        .collect();
    let ev = events(&masked);
    assert_eq!(ev.len(), truth.len());
    let mut unlinked = 0;
    for a in &truth {
        let e = &ev[&a.id];
        assert_eq!(e["case_number"], a.case_number.as_str(), "{}", a.id);
        assert_eq!(e["type_code"], a.type_code.as_str(), "{}", a.id);
        assert_eq!(
            e["published"].as_i64(),
            Some(micros(&a.published)),
            "{}",
            a.id
        );
        assert_eq!(e["created"].as_i64(), Some(micros(&a.created)), "{}", a.id);
        assert_eq!(e["section"].as_str(), a.section.as_deref(), "{}", a.id);
        assert_eq!(
            e["number_in_section"].as_i64(),
            a.number_in_section,
            "{}",
            a.id
        );
        match &a.document_url {
            Some(u) => assert_eq!(e["document_url"], u.as_str(), "{}", a.id),
            None => {
                assert!(e["document_url"].is_null(), "{}: a null", a.id);
                unlinked += 1;
            }
        }
    }
    assert!(unlinked > 0, "the stream has actions without a document");
    let by_duckdb = &masked["events_by_duckdb"];
    assert_eq!(by_duckdb["rows"].as_u64(), Some(truth.len() as u64));
    assert_eq!(by_duckdb["misplaced"], 0, "every event in its Prague year");
    let years: BTreeSet<String> = truth
        .iter()
        .map(|a| {
            chrono::DateTime::parse_from_rfc3339(&a.published)
                .unwrap()
                .with_timezone(&chrono_tz::Europe::Prague)
                .format("%Y")
                .to_string()
        })
        .collect();
    let got: BTreeSet<String> = by_duckdb["years"]
        .as_array()
        .unwrap()
        .iter()
        .map(|y| y.as_str().unwrap().to_string())
        .collect();
    assert_eq!(got, years);

    // Each Parquet file holds what the CSV of the same export holds, cell for cell.
    for t in Table::ALL {
        let csv = csv_rows(&masked_dir.join(format!("{}.csv", t.name())));
        let parquet: Vec<BTreeMap<String, Value>> = if t == Table::Events {
            ev.values().cloned().collect()
        } else {
            rows(&masked["files"][format!("{}.parquet", t.name())])
        };
        let tys: BTreeMap<String, String> = if t == Table::Events {
            types(&masked["files"][&an_events_file])
                .into_iter()
                .collect()
        } else {
            types(&masked["files"][format!("{}.parquet", t.name())])
                .into_iter()
                .collect()
        };
        assert_eq!(csv.len(), parquet.len(), "{}", t.name());
        for (c, p) in csv.iter().zip(&parquet) {
            for (k, v) in c {
                assert!(
                    same_cell(&p[k], v, &tys[k]),
                    "{} {k}: parquet {} csv {v:?}",
                    t.name(),
                    p[k]
                );
            }
        }
    }

    // Parties against the truth's debtors: masked without the scope, whole with it; an
    // erased debtor in neither.
    let people = |d: &Value| rows(&d["files"]["parties.parquet"]);
    let (pm, pp) = (people(&masked), people(&pii));
    let mut checked = 0;
    for d in sim.truth_debtors() {
        let find = |rows: &[BTreeMap<String, Value>]| -> Vec<BTreeMap<String, Value>> {
            rows.iter()
                .filter(|r| r["case_number"] == d.case_number.as_str() && r["role"] == "DLUŽNÍK")
                .cloned()
                .collect()
        };
        let (m_rows, p_rows) = (find(&pm), find(&pp));
        if d.erased {
            assert!(m_rows.is_empty() && p_rows.is_empty(), "{}", d.case_number);
            continue;
        }
        let name = d.person.name.as_deref();
        let Some(m_row) = m_rows.iter().find(|r| r["name"].as_str() == name) else {
            // Only a debtor whose person block is not published yet has no row.
            assert!(!d.named, "{}: the named debtor has no row", d.case_number);
            continue;
        };
        let p_row = p_rows
            .iter()
            .find(|r| r["person_id"] == d.person.id.trim())
            .unwrap_or_else(|| panic!("{}: the debtor with the scope", d.case_number));
        assert!(m_row["person_id"].as_str().unwrap().starts_with("p_"));
        match &d.person.birth_number {
            Some(rc) => {
                assert_eq!(m_row["birth_number"], "***", "{}", d.case_number);
                assert_eq!(p_row["birth_number"], rc.as_str(), "{}", d.case_number);
            }
            None => {
                assert!(m_row["birth_number"].is_null(), "{}", d.case_number);
                assert!(p_row["birth_number"].is_null(), "{}", d.case_number);
            }
        }
        match &d.person.birth_date {
            Some(bd) => {
                assert_eq!(m_row["birth_date"], "***");
                assert_eq!(p_row["birth_date"], &bd[..10], "{}", d.case_number);
            }
            None => assert!(m_row["birth_date"].is_null() && p_row["birth_date"].is_null()),
        }
        assert_eq!(m_row["ico"].as_str(), d.person.ico.as_deref());
        checked += 1;
    }
    assert!(checked > 100, "{checked} debtors checked");

    // With personal data: a directory and files only the owner can read; `latest` names
    // the export.
    #[cfg(unix)]
    {
        let root = dir.path().join("pii");
        assert_eq!(mode(&root), 0o700);
        assert_eq!(mode(&root.join("events")), 0o700);
        for f in &mp.files {
            assert_eq!(mode(&root.join(&f.name)), 0o600, "{}", f.name);
            if let Some(p) = root.join(&f.name).parent() {
                assert_eq!(mode(p), 0o700, "{}", p.display());
            }
        }
        let link = dir.path().join("latest");
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("pii"));
    }

    // Both formats are written from one read of each table: the files are those of
    // each format exported alone, byte for byte, and listed in the order asked; masked
    // and plain, with the formula guard and gzip and without.
    for (k, (pii, guarded, order)) in [
        (false, false, [Format::Csv, Format::Parquet]),
        (false, true, [Format::Parquet, Format::Csv]),
        (true, false, [Format::Csv, Format::Parquet]),
    ]
    .into_iter()
    .enumerate()
    {
        let variant = |o: &mut isir::export::ExportOptions| {
            o.include_pii = pii;
            o.formula_guard = guarded;
            o.gzip = guarded;
        };
        let mut alone = BTreeMap::new();
        for f in order {
            let mut o = opts(&dir.path().join(format!("alone-{k}-{}", f.name())), pii);
            variant(&mut o);
            o.formats = vec![f];
            let ma = export(&app.store, &o).await.unwrap();
            assert_eq!(ma.watermark.action_id, m.watermark.action_id);
            for e in ma.files {
                alone.insert(e.name.clone(), (e.format, e.rows, e.sha256));
            }
        }
        let mut o = opts(&dir.path().join(format!("both-{k}")), pii);
        variant(&mut o);
        o.formats = order.to_vec();
        let mb = export(&app.store, &o).await.unwrap();
        let together: BTreeMap<_, _> = mb
            .files
            .iter()
            .map(|e| (e.name.clone(), (e.format, e.rows, e.sha256.clone())))
            .collect();
        assert_eq!(together, alone, "variant {k}");
        let listed: Vec<Format> = mb.files.iter().map(|e| e.format).collect();
        let first = listed.iter().filter(|f| **f == order[0]).count();
        assert!(
            first >= 4 && listed[..first].iter().all(|f| *f == order[0]),
            "variant {k}: {listed:?}"
        );
    }

    // An incremental export: the events after the watermark, no overlap, no gap.
    sim.publish(2_500);
    catch_up(&app).await;
    let mut inc = opts(&dir.path().join("inc"), false);
    inc.formats = vec![Format::Parquet];
    inc.tables = vec![Table::Events];
    inc.since_watermark = Some(m.watermark.action_id);
    let mi = export(&app.store, &inc).await.unwrap();
    let later = events(&dump(&dir.path().join("inc")));
    assert!(!later.is_empty());
    assert!(later.keys().all(|id| *id > m.watermark.action_id));
    let all: BTreeSet<i64> = ev.keys().chain(later.keys()).copied().collect();
    assert_eq!(all.len(), ev.len() + later.len(), "no overlap");
    let want: BTreeSet<i64> = sim
        .truth_all()
        .into_iter()
        .filter(|a| a.case_number != "INS -1/-1" && a.id <= mi.watermark.action_id)
        .map(|a| a.id)
        .collect();
    assert_eq!(all, want, "no gap");

    // An incremental export without new events: one empty events file, which a glob
    // over the years finds (DuckDB reads it: no rows, no error).
    let mut none = opts(&dir.path().join("inc-none"), false);
    none.formats = vec![Format::Parquet];
    none.tables = vec![Table::Events];
    none.since_watermark = Some(mi.watermark.action_id);
    let mn = export(&app.store, &none).await.unwrap();
    let files: Vec<_> = mn
        .files
        .iter()
        .filter(|f| f.table == Table::Events)
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(files[0].rows, 0);
    let d = dump(&dir.path().join("inc-none"));
    assert_eq!(
        d["events_by_duckdb"]["rows"], 0,
        "{}",
        d["events_by_duckdb"]
    );
    assert!(events(&d).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parquet_exports_sqlite() {
    parquet_exports(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parquet_exports_postgres() {
    parquet_exports(Backend::Postgres).await;
}

/// The recipes of docs/EXPORTS.md (the ```python blocks under "Recipes"), run as
/// written from a directory whose `exports/latest` is an export: each joins cases to
/// their debtors and prints the pairs it found, which must be the truth's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recipes_work_as_written() {
    let (sim, _db, app, _g) = common::replica(Backend::Sqlite, 5_000, 62).await;
    catch_up(&app).await;
    let work = tempfile::tempdir().unwrap();
    let mut o = opts(&work.path().join("exports/2026-03-01T023000"), false);
    o.formats = vec![Format::Parquet];
    o.latest = true;
    export(&app.store, &o).await.unwrap();
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/EXPORTS.md"))
            .unwrap();
    let recipes = &doc[doc
        .find("## Recipes")
        .expect("docs/EXPORTS.md has its recipes")..];
    let blocks: Vec<&str> = recipes
        .split("```python\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .collect();
    assert_eq!(blocks.len(), 3, "DuckDB, pandas and Polars");
    // The truth's pairs: each case whose debtor's person block is published and whose
    // debtor is not erased, with the debtor's name.
    let want: BTreeSet<(String, String)> = sim
        .truth_debtors()
        .into_iter()
        .filter(|d| d.named && !d.erased)
        .map(|d| (d.case_number, d.person.name.unwrap_or_default()))
        .collect();
    assert!(want.len() > 100, "the stream names debtors: {}", want.len());
    let mut first: Option<BTreeSet<(String, String)>> = None;
    for b in blocks {
        // Each recipe ends with `pairs`, a list of (case number, debtor name).
        let script = format!(
            "{b}\nimport json\nprint(json.dumps(sorted([[str(c), str(n)] for c, n in pairs])))\n"
        );
        let out = run_python(&["-c", &script], work.path());
        let got: Vec<(String, String)> = serde_json::from_str(out.trim()).unwrap();
        let got: BTreeSet<(String, String)> = got.into_iter().collect();
        // Exactly the truth's pairs.
        let extra: Vec<_> = got.difference(&want).take(3).collect();
        let missing: Vec<_> = want.difference(&got).take(3).collect();
        assert!(
            extra.is_empty() && missing.is_empty(),
            "recipe {}: {} pairs of the truth's {}; extra {extra:?}, missing {missing:?}",
            b.lines().next().unwrap_or(""),
            got.len(),
            want.len()
        );
        // And the three recipes find the same.
        match &first {
            None => first = Some(got),
            Some(f) => assert_eq!(&got, f, "the recipes agree"),
        }
    }
}

/// The nightly purge rewrites kept Parquet files: an erased debtor leaves `parties`,
/// its case's debtor cells are nulls, read back by pyarrow; no personal value of theirs
/// remains anywhere in the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasure_reaches_kept_parquet_files() {
    let (sim, url, _g) = common::sim(20_000, 1000, 16).await;
    let db = common::fresh_db(Backend::Sqlite).await;
    let mut s = common::settings(&url, &db);
    s.poll.max_batches_per_tick = 1000;
    let app = common::app(s).await;
    catch_up(&app).await;
    let dir = tempfile::tempdir().unwrap();
    let mut n = common::nightly(dir.path(), 5, true);
    n.formats = vec![Format::Csv, Format::Parquet];
    let first = isir::export::nightly_once(&app.store, &n).await.unwrap();
    let before: HashSet<String> = sim
        .truth_debtors()
        .iter()
        .filter(|d| d.erased)
        .map(|d| d.case_number.clone())
        .collect();
    sim.publish(40_000);
    catch_up(&app).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let second = isir::export::nightly_once(&app.store, &n).await.unwrap();
    assert_eq!(second.purged.len(), 1);
    let exports = isir::export::list_exports(dir.path());
    let old = &exports[0];
    let in_first: HashSet<String> = sim
        .truth_all()
        .into_iter()
        .filter(|a| a.id <= first.watermark.action_id)
        .map(|a| a.case_number)
        .collect();
    let erased: Vec<isir::sim::TruthDebtor> = sim
        .truth_debtors()
        .into_iter()
        .filter(|d| {
            d.erased && !before.contains(&d.case_number) && in_first.contains(&d.case_number)
        })
        .collect();
    assert!(
        !erased.is_empty(),
        "a debtor of the first export was erased since"
    );
    let d = dump(old);
    let text = d.to_string();
    for e in &erased {
        let mut secrets = vec![format!("\"{}\"", e.person.id.trim())];
        if let Some(rc) = &e.person.birth_number {
            secrets.push(rc.clone());
        }
        for s in &secrets {
            assert!(
                !text.contains(s.as_str()),
                "{} still in the kept Parquet files",
                e.case_number
            );
        }
        let parties = rows(&d["files"]["parties.parquet"]);
        assert!(
            !parties
                .iter()
                .any(|r| r["case_number"] == e.case_number.as_str() && r["role"] == "DLUŽNÍK"),
            "{}: the debtor's row is gone",
            e.case_number
        );
        let cases = rows(&d["files"]["cases.parquet"]);
        let row = cases
            .iter()
            .find(|r| r["case_number"] == e.case_number.as_str())
            .expect("the case keeps its row");
        for c in [
            "debtor.name",
            "debtor.first_name",
            "debtor.ico",
            "debtor.kind",
        ] {
            assert!(row[c].is_null(), "{c} of {}", e.case_number);
        }
        assert_eq!(row["debtor_count"], 0);
        assert_eq!(row["erased"], true);
    }
    // The other debtors stay, and the manifest matches the rewritten files.
    let cases = rows(&d["files"]["cases.parquet"]);
    assert!(cases.iter().filter(|r| !r["debtor.name"].is_null()).count() > 100);
    let m = isir::export::read_manifest(old).unwrap();
    for f in &m.files {
        let bytes = std::fs::read(old.join(&f.name)).unwrap();
        assert_eq!(bytes.len() as u64, f.bytes, "{}", f.name);
        assert_eq!(
            hex::encode(sha2::Sha256::digest(&bytes)),
            f.sha256,
            "{}",
            f.name
        );
        if f.format == Format::Parquet && f.table != Table::Events {
            assert_eq!(d["files"][&f.name]["num_rows"].as_u64(), Some(f.rows));
        }
    }
    // `latest` names the newest export.
    assert_eq!(
        std::fs::read_link(dir.path().join("latest")).unwrap(),
        Path::new(exports[1].file_name().unwrap())
    );
}
