//! CSV exports over both back ends with simulator data: the files equal the API's CSV
//! and the projection; the manifest's counts and hashes are right; erased debtors are
//! absent and listed; an incremental export added to the previous one equals a full
//! export; a refused or killed export leaves nothing under a final name.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::Backend;
use isir::export::{ExportOptions, Table, export};
use isir::projection;
use sha2::Digest;

fn opts(out: &Path) -> ExportOptions {
    common::export_opts(out)
}

/// The records of a CSV file (gzip or not), header first.
fn records(path: &Path) -> Vec<Vec<String>> {
    let bytes = std::fs::read(path).unwrap();
    let text = if path.extension().is_some_and(|e| e == "gz") {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut s)
            .unwrap();
        s
    } else {
        String::from_utf8(bytes).unwrap()
    };
    csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(text.as_bytes())
        .records()
        .map(|r| r.unwrap().iter().map(String::from).collect())
        .collect()
}

async fn api_csv(base: &str, first: &str) -> Vec<Vec<String>> {
    let http = reqwest::Client::new();
    let mut url = format!("{base}{first}");
    let mut out: Vec<Vec<String>> = Vec::new();
    loop {
        let r = http.get(&url).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let next = r
            .headers()
            .get("link")
            .map(|l| l.to_str().unwrap().to_string());
        let body = r.text().await.unwrap();
        let mut recs: Vec<Vec<String>> = csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(body.as_bytes())
            .records()
            .map(|r| r.unwrap().iter().map(String::from).collect())
            .collect();
        if out.is_empty() {
            out.push(recs[0].clone());
        }
        recs.remove(0);
        out.extend(recs);
        match next {
            Some(l) => {
                let u = l.trim_start_matches('<').split('>').next().unwrap();
                url = format!("{base}{u}");
            }
            None => return out,
        }
    }
}

fn set(r: &[Vec<String>]) -> BTreeSet<Vec<String>> {
    r[1..].iter().cloned().collect()
}

async fn exports(b: Backend) {
    let (sim, url, _g) = common::sim(30_000, 1000, 51).await;
    let db = common::fresh_db(b).await;
    let mut s = common::settings(&url, &db);
    s.poll.max_batches_per_tick = 12;
    let app = common::app(s).await;
    app.poller().unwrap().poll_once().await;
    for n in projection::NAMES {
        projection::catch_up(&app.store, n, 5000).await.unwrap();
    }
    let dir = tempfile::tempdir().unwrap();

    // A first, full export.
    let first = dir.path().join("first");
    let m1 = export(&app.store, &opts(&first)).await.unwrap();
    assert!(first.join("manifest.json").is_file());
    assert_eq!(isir::export::read_manifest(&first).unwrap(), m1);
    for f in &m1.files {
        let p = first.join(&f.name);
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(bytes.len() as u64, f.bytes, "{}", f.name);
        assert_eq!(
            hex::encode(sha2::Sha256::digest(&bytes)),
            f.sha256,
            "{}",
            f.name
        );
        let recs = records(&p);
        assert_eq!(recs.len() as u64 - 1, f.rows, "{}", f.name);
        let header: Vec<String> = f.columns.iter().map(|c| c.name.clone()).collect();
        assert_eq!(recs[0], header);
    }
    let ws = app.store.writer_state().await.unwrap();
    assert_eq!(m1.watermark.action_id, ws.checkpoint.unwrap());

    // The export equals the API's CSV (cases and events) and the projection (parties).
    app.store.set_setting("phase", "serve").await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let state = isir::read::ReadState::new(
        app.store.clone(),
        isir::read::ReadOptions {
            rate_per_second: 100_000,
            burst: 100_000,
            ..Default::default()
        },
    );
    tokio::spawn(isir::http::run(listener, state, async move {
        let _ = rx.await;
    }));
    let cases = records(&first.join("cases.csv"));
    let api_cases = api_csv(&base, "/v1/cases?format=csv&limit=1000").await;
    assert_eq!(cases[0], api_cases[0]);
    assert_eq!(set(&cases), set(&api_cases));
    let events = records(&first.join("events.csv"));
    let api_events = api_csv(&base, "/v1/events?format=csv&limit=1000").await;
    assert_eq!(events, api_events, "the same rows in the same order");
    let parties = records(&first.join("parties.csv"));
    let n_parties = common::count(
        &app.store,
        "SELECT COUNT(*) FROM parties WHERE case_number <> $1",
        "",
    )
    .await;
    assert_eq!(parties.len() as i64 - 1, n_parties);
    // Every debtor the register had published by the export's watermark, and not
    // erased by then, is a row, masked as docs/PRIVACY.md says: from the simulator's
    // truth, not from the code's own mask.
    let w = m1.watermark.action_id;
    let upto: Vec<_> = sim.truth_all().into_iter().filter(|a| a.id <= w).collect();
    let erased_by_w: BTreeSet<String> = upto
        .iter()
        .filter(|a| matches!(a.type_code.trim(), "636" | "637"))
        .map(|a| a.case_number.clone())
        .collect();
    let published: BTreeSet<(String, String)> = upto
        .iter()
        .filter_map(|a| {
            let n = a.note.as_deref()?;
            let i = n.find("<idOsoby>")? + "<idOsoby>".len();
            let j = n[i..].find("</idOsoby>")?;
            Some((a.case_number.clone(), n[i..i + j].trim().to_string()))
        })
        .collect();
    let col = |name: &str| parties[0].iter().position(|c| c == name).unwrap();
    let (c_case, c_role, c_name, c_pid, c_ico, c_bn, c_bd) = (
        col("case_number"),
        col("role"),
        col("name"),
        col("person_id"),
        col("ico"),
        col("birth_number"),
        col("birth_date"),
    );
    let debtors: Vec<isir::sim::TruthDebtor> = sim
        .truth_debtors()
        .into_iter()
        .filter(|d| {
            !erased_by_w.contains(&d.case_number)
                && published.contains(&(d.case_number.clone(), d.person.id.trim().to_string()))
        })
        .collect();
    assert!(debtors.len() > 100, "{} published debtors", debtors.len());
    let masked = |v: &Option<String>| if v.is_some() { "***" } else { "" };
    // The formula guard as docs/EXPORTS.md states it.
    let guarded = |v: &str| {
        if v.starts_with(['=', '+', '-', '@', '\t', '\r']) {
            format!("'{v}")
        } else {
            v.to_string()
        }
    };
    let mut naturals = 0;
    for d in &debtors {
        let p = &d.person;
        let row = parties[1..]
            .iter()
            .find(|r| {
                r[c_case] == d.case_number
                    && r[c_role] == "DLUŽNÍK"
                    && r[c_name] == guarded(p.name.as_deref().unwrap_or_default())
            })
            .unwrap_or_else(|| {
                panic!(
                    "the debtor of {} is exported: {:?} {:?}",
                    d.case_number,
                    p,
                    parties
                        .iter()
                        .filter(|r| r[c_case] == d.case_number)
                        .collect::<Vec<_>>()
                )
            });
        assert_eq!(
            row[c_ico],
            p.ico.clone().unwrap_or_default(),
            "{}",
            d.case_number
        );
        assert_eq!(row[c_bn], masked(&p.birth_number), "{}", d.case_number);
        assert_eq!(row[c_bd], masked(&p.birth_date), "{}", d.case_number);
        assert!(
            row[c_pid].starts_with("p_") && row[c_pid] != p.id.trim(),
            "{}: the person ID is a reference",
            d.case_number
        );
        naturals += usize::from(p.birth_number.is_some());
    }
    assert!(
        naturals > 20,
        "{naturals} natural persons among the debtors"
    );
    // Each case's row says whose it is: the first debtor's name, first name, IČO and
    // kind, and how many debtors (the simulator's cases have one), from the truth;
    // empty (and 0) once erased or before the register has published the debtor.
    let ccol = |name: &str| {
        cases[0]
            .iter()
            .position(|c| c == name)
            .unwrap_or_else(|| panic!("cases.csv has a column {name}"))
    };
    let (k_case, k_name, k_first, k_ico, k_kind, k_count) = (
        ccol("case_number"),
        ccol("debtor.name"),
        ccol("debtor.first_name"),
        ccol("debtor.ico"),
        ccol("debtor.kind"),
        ccol("debtor_count"),
    );
    let (mut named, mut blanked) = (0, 0);
    for d in sim.truth_debtors() {
        let Some(row) = cases[1..].iter().find(|r| r[k_case] == d.case_number) else {
            continue;
        };
        let shown = !erased_by_w.contains(&d.case_number)
            && published.contains(&(d.case_number.clone(), d.person.id.trim().to_string()));
        let p = &d.person;
        let want = if shown {
            named += 1;
            [
                guarded(p.name.as_deref().unwrap_or_default()),
                p.first_name.clone().unwrap_or_default(),
                p.ico.clone().unwrap_or_default(),
                p.kind.clone().unwrap_or_default(),
                "1".to_string(),
            ]
        } else {
            blanked += usize::from(erased_by_w.contains(&d.case_number));
            [
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                "0".to_string(),
            ]
        };
        let got = [
            row[k_name].clone(),
            row[k_first].clone(),
            row[k_ico].clone(),
            row[k_kind].clone(),
            row[k_count].clone(),
        ];
        assert_eq!(got, want, "cases.csv's debtor of {}", d.case_number);
    }
    assert!(
        named > 100 && blanked > 0,
        "{named} named, {blanked} erased"
    );
    drop(tx);

    // Personal data: masked without --include-pii, present with it.
    let bn = parties[0].iter().position(|c| c == "birth_number").unwrap();
    assert!(
        parties[1..]
            .iter()
            .all(|r| r[bn].is_empty() || r[bn] == "***")
    );
    assert!(parties[1..].iter().any(|r| r[bn] == "***"));
    let pii = dir.path().join("pii");
    let mut o = opts(&pii);
    o.tables = vec![Table::Parties];
    o.gzip = true;
    o.include_pii = true;
    let mp = export(&app.store, &o).await.unwrap();
    assert_eq!(mp.files[0].name, "parties.csv.gz");
    let with = records(&pii.join("parties.csv.gz"));
    assert_eq!(with.len(), parties.len());
    assert!(
        with[1..]
            .iter()
            .any(|r| r[bn].len() >= 10 && r[bn] != "***")
    );

    // Erased debtors never appear; the manifest lists the erased cases.
    let erased = erased_by_w;
    assert!(!erased.is_empty(), "the data has erasures");
    let role = parties[0].iter().position(|c| c == "role").unwrap();
    let cn = parties[0].iter().position(|c| c == "case_number").unwrap();
    assert!(
        !parties[1..]
            .iter()
            .any(|r| r[role] == "DLUŽNÍK" && erased.contains(&r[cn]))
    );
    assert_eq!(
        m1.erased_since_previous
            .cases
            .iter()
            .cloned()
            .collect::<BTreeSet<_>>(),
        erased
    );

    // More data, then an incremental export: added to the first, it equals a full one.
    let mut p = app.poller().unwrap();
    while p.poll_once().await.checkpoint != sim.head_id() {}
    for n in projection::NAMES {
        projection::catch_up(&app.store, n, 5000).await.unwrap();
    }
    let incr = dir.path().join("incr");
    let mut o = opts(&incr);
    o.tables = vec![Table::Events];
    o.since_watermark = Some(m1.watermark.action_id);
    let mi = export(&app.store, &o).await.unwrap();
    let full = dir.path().join("full");
    let mut o = opts(&full);
    o.tables = vec![Table::Events];
    let mf = export(&app.store, &o).await.unwrap();
    assert_eq!(mi.watermark, mf.watermark);
    let mut joined = records(&first.join("events.csv"));
    joined.extend(records(&incr.join("events.csv")).into_iter().skip(1));
    assert_eq!(joined, records(&full.join("events.csv")));
    assert!(mi.files[0].rows > 0 && mi.files[0].rows < mf.files[0].rows);
    assert!(mi.erased_since_previous.cases.len() <= erased.len() + 100);
    for c in &mi.erased_since_previous.cases {
        assert!(
            !erased.contains(c),
            "{c} was erased before the previous export"
        );
    }

    // A refused export writes nothing.
    let e = export(&app.store, &opts(&first)).await.unwrap_err();
    assert!(e.to_string().contains("not empty"), "{e}");
    let bad = dir.path().join("bad");
    let mut o = opts(&bad);
    o.tables = vec![];
    assert!(export(&app.store, &o).await.is_err());
    assert!(!bad.exists());
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert!(names.iter().all(|n| !n.contains("partial")), "{names:?}");
}

#[tokio::test]
async fn exports_sqlite() {
    exports(Backend::Sqlite).await;
}

#[tokio::test]
async fn exports_postgres() {
    exports(Backend::Postgres).await;
}

/// `isir export` killed midway leaves nothing under the final name; the next run
/// cleans the staging directory and completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_export_leaves_no_partial_file() {
    let (_sim, url, _g) = common::sim(60_000, 1000, 52).await;
    let db = common::fresh_db(Backend::Sqlite).await;
    let mut s = common::settings(&url, &db);
    s.poll.max_batches_per_tick = 1000;
    let app = common::app(s).await;
    app.poller().unwrap().poll_once().await;
    for n in projection::NAMES {
        projection::catch_up(&app.store, n, 5000).await.unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    // ISIR_CHAOS_KILLS (scripts/chaos/crash.sh) asks for more kills than CI's two.
    let want: usize = std::env::var("ISIR_CHAOS_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let mut killed = 0;
    for attempt in 0..want * 5 {
        let out = dir.path().join(format!("x{attempt}"));
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_isir"))
            .args(["export", "--gzip", "--out"])
            .arg(&out)
            .env("ISIR_DATABASE__URL", &db.url)
            .env("ISIR_LOG", "warn")
            .spawn()
            .unwrap();
        let staging = isir::export::staging_dir(&out);
        let staging = staging.with_file_name(
            staging
                .file_name()
                .unwrap()
                .to_string_lossy()
                .replace(&std::process::id().to_string(), &child.id().to_string()),
        );
        let t = std::time::Instant::now();
        while !staging.exists() && t.elapsed().as_secs() < 20 {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        let _ = child.kill();
        let status = child.wait().unwrap();
        if status.success() {
            continue; // it finished first; try again
        }
        killed += 1;
        assert!(!out.exists(), "a killed export left {}", out.display());
        // The next export of the same target cleans up and completes.
        let m = export(&app.store, &opts(&out)).await.unwrap();
        assert!(out.join("manifest.json").exists());
        assert!(!staging.exists(), "the stale staging directory is removed");
        assert_eq!(m.files.len(), 4);
        if killed >= want {
            break;
        }
    }
    assert!(killed >= 1, "no kill landed during an export");
    eprintln!("killed export test: {killed} SIGKILLs mid-export, no file left under a final name");
}

/// The nightly export keeps `export.keep` exports and lists erasures since the
/// previous one; the schedule is Prague time, across the clock changes.
#[tokio::test]
async fn nightly_keeps_and_schedules() {
    use chrono::TimeZone;
    let (_sim, url, _g) = common::sim(5_000, 1000, 53).await;
    let db = common::fresh_db(Backend::Sqlite).await;
    let app = common::app(common::settings(&url, &db)).await;
    app.poller().unwrap().poll_once().await;
    for n in projection::NAMES {
        projection::catch_up(&app.store, n, 5000).await.unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let n = common::nightly(dir.path(), 2, false);
    let mut last = None;
    for _ in 0..3 {
        let m = isir::export::nightly_once(&app.store, &n).await.unwrap();
        if let Some(prev) = last {
            assert_eq!(m.erased_since_previous.since, Some(prev));
        } else {
            assert_eq!(m.erased_since_previous.since, None);
        }
        last = Some(m.watermark.action_id);
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    }
    assert_eq!(isir::export::list_exports(dir.path()).len(), 2);

    let at = isir::export::parse_schedule("02:30").unwrap();
    let utc = |y, mo, d, h, mi| chrono::Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap();
    // Winter (UTC+1): 02:30 Prague is 01:30 UTC.
    assert_eq!(
        isir::export::next_run(utc(2026, 1, 10, 12, 0), at),
        utc(2026, 1, 11, 1, 30)
    );
    // Summer (UTC+2): 00:30 UTC.
    assert_eq!(
        isir::export::next_run(utc(2026, 7, 10, 0, 0), at),
        utc(2026, 7, 10, 0, 30)
    );
    // 29 March 2026: 02:00-03:00 does not exist in Prague; it runs at 03:00 (01:00 UTC).
    assert_eq!(
        isir::export::next_run(utc(2026, 3, 28, 12, 0), at),
        utc(2026, 3, 29, 1, 0)
    );
    assert!(isir::export::parse_schedule("2:30pm").is_none());
}

/// `docs/EXPORTS.md` lists every table's columns in the files' order, with the types
/// the manifest gives.
#[test]
fn exports_doc_lists_every_column() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/EXPORTS.md")).unwrap();
    for t in Table::ALL {
        let head = format!("### {}.csv", t.name());
        let at = doc
            .find(&head)
            .unwrap_or_else(|| panic!("no section {head}"));
        let rows: Vec<(String, String)> = doc[at..]
            .lines()
            .skip_while(|l| !l.starts_with("| column"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                let f: Vec<&str> = l.split('|').map(str::trim).collect();
                (f[1].to_string(), f[2].to_string())
            })
            .collect();
        let want: Vec<(String, String)> = t
            .columns()
            .iter()
            .map(|c| (c.to_string(), isir::export::column_type(c).to_string()))
            .collect();
        assert_eq!(rows, want, "{head}");
    }
    // The examples of court short names are the protocol's (its table of courts).
    let protocol = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/isir/PROTOCOL.md"
    ));
    let shorts: Vec<String> = match &protocol {
        Ok(p) => p
            .lines()
            .skip_while(|l| !l.starts_with("| code in feed | short |"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|l| l.split('|').nth(2).unwrap().trim().to_string())
            .collect(),
        // As tests/parser.rs: the shared folder must be there in CI.
        Err(_) if std::env::var_os("CI").is_none() => return,
        Err(e) => panic!("../shared/isir/PROTOCOL.md: {e}"),
    };
    assert!(shorts.len() >= 8, "{shorts:?}");
    let examples: Vec<&str> = doc
        .lines()
        .filter(|l| l.starts_with("| court_short |"))
        .flat_map(|l| l.split('`').skip(1).step_by(2))
        .collect();
    assert!(!examples.is_empty());
    for e in examples {
        assert!(
            shorts.iter().any(|s| s == e),
            "docs/EXPORTS.md gives {e} as a court_short; the protocol's are {shorts:?}"
        );
    }
}
