//! Spoiled records (issue 40): a record that is mis-encoded is repaired, one that does
//! not parse is held back in the quarantine, and the feed goes on; on both back ends,
//! against the simulator's truth (what the register meant) and the bytes it sent, and
//! against a hand-written page.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::{BOTH, Backend};
use isir::poller::TickOutcome;
use isir::sim::spoil::RecordDefect;
use isir::sim::{FaultPlan, Simulator};
use isir::source::parse::{parse_data_response, parse_data_response_strict};
use isir::source::{Action, SourceError, SpoilReason};

// ---------------------------------------------------------------------------------------
// The parser, on a page written by hand (not by src/source/write.rs)

fn hand_page() -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/spoiled/page-spoiled.xml"),
    )
    .unwrap()
}

/// The bytes of the record with `id` in `body`, `<data>` to `</data>`.
fn record_bytes(body: &[u8], id: i64) -> Vec<u8> {
    let open = format!("<data><id>{id}</id>");
    let s = body
        .windows(open.len())
        .position(|w| w == open.as_bytes())
        .unwrap();
    let e = s + body[s..].windows(7).position(|w| w == b"</data>").unwrap() + 7;
    body[s..e].to_vec()
}

#[test]
fn hand_written_page_is_parsed_record_by_record() {
    let body = hand_page();
    let p = parse_data_response(&body, 79500000).unwrap();
    let stored: Vec<i64> = p.records.iter().map(|r| r.action.id).collect();
    assert_eq!(stored, vec![79500011, 79500012, 79500015]);
    // The windows-1250 letters read as the register meant them.
    assert_eq!(p.records[1].action.type_name, "Insolvenční návrh");
    assert_eq!(p.records[1].action.case_number, "INS 102/2026");
    let note = p.records[2].action.note.as_deref().unwrap();
    assert!(note.contains("<ulice>Náměstí</ulice>"), "{note}");
    assert!(
        note.contains("<nazevOsoby>Zkoušková</nazevOsoby>"),
        "{note}"
    );
    let isir::source::Note::Parsed(d) = &p.records[2].detail else {
        panic!("the repaired poznamka parses: {:?}", p.records[2].detail)
    };
    let person = d.person.as_ref().unwrap();
    assert_eq!(person.role.as_deref(), Some("DLUŽNÍK"));
    assert_eq!(person.addresses[0].street.as_deref(), Some("Náměstí"));
    // What was held back, why, with the case where one can be read.
    let held: Vec<(Option<i64>, Option<&str>, SpoilReason)> = p
        .held()
        .map(|s| (s.id, s.case_number.as_deref(), s.reason))
        .collect();
    assert_eq!(
        held,
        vec![
            (Some(79500013), None, SpoilReason::MissingField),
            (Some(79500014), Some("INS 104/2026"), SpoilReason::BadValue),
            (Some(79500016), Some("INS 106/2026"), SpoilReason::Encoding),
        ]
    );
    let repaired: Vec<Option<i64>> = p.repaired().map(|s| s.id).collect();
    assert_eq!(repaired, vec![Some(79500012), Some(79500015)]);
    // Every spoiled record keeps its bytes exactly as they stand in the page.
    for s in &p.spoiled {
        assert_eq!(s.raw, record_bytes(&body, s.id.unwrap()), "{:?}", s.id);
    }
    // The checkpoint goes past the last record, held back or not.
    assert_eq!(p.last_id(), Some(79500016));
    assert!(!format!("{p:?}").contains('\u{fffd}'));
    // The strict rule refuses the page, naming the first spoiled record.
    assert!(matches!(
        parse_data_response_strict(&body, 79500000),
        Err(SourceError::Invalid(m)) if m.contains("79500012")
    ));
}

#[test]
fn a_record_out_of_order_is_held_back_alone() {
    let sim = Simulator::new(isir::sim::SimOptions {
        actions: 10,
        ..Default::default()
    });
    let truth = sim.truth_all();
    let (page, _) =
        isir::sim::spoil::render_page(&truth, 0, |i| (i == 3).then_some(RecordDefect::BackId));
    let p = parse_data_response(&page, truth[0].id - 1).unwrap();
    let held: Vec<_> = p.held().map(|s| (s.id, s.reason)).collect();
    assert_eq!(held, vec![(Some(truth[3].id), SpoilReason::OutOfOrder)]);
    // It says which bound it broke: the record before it in the page, which is the one
    // that followed it (`BackId` sends it after that one).
    let detail = p.held().next().unwrap().detail.clone();
    assert_eq!(
        detail,
        format!("id is not above the record before it ({})", truth[4].id)
    );
    let mut want = truth.clone();
    want.remove(3);
    assert_eq!(p.actions().cloned().collect::<Vec<_>>(), want);
    // A first record not above the ID asked after: that bound, named.
    let (clean, _) = isir::sim::spoil::render_page(&truth, 0, |_| None);
    let p = parse_data_response(&clean, truth[0].id).unwrap();
    let held: Vec<_> = p
        .held()
        .map(|s| (s.id, s.reason, s.detail.clone()))
        .collect();
    assert_eq!(
        held,
        vec![(
            Some(truth[0].id),
            SpoilReason::OutOfOrder,
            format!("id is not above the requested ID {}", truth[0].id)
        )]
    );
    assert_eq!(
        p.actions().cloned().collect::<Vec<_>>(),
        truth[1..].to_vec()
    );
}

/// A record that fails on its own and also holds bytes that are neither UTF-8 nor
/// windows-1250 (0x98 is undefined in windows-1250): held back for its encoding, the
/// field it lacks named too, its bytes as received.
#[test]
fn a_record_both_undecodable_and_incomplete_is_held_for_its_encoding() {
    let body = hand_page();
    let whole = record_bytes(&body, 79500013);
    // Its `č` (C4 8D) replaced by a byte no encoding the register uses knows.
    let at = whole.windows(2).position(|w| w == [0xc4, 0x8d]).unwrap();
    let mut bad = whole[..at].to_vec();
    bad.push(0x98);
    bad.extend_from_slice(&whole[at + 2..]);
    let start = body.windows(whole.len()).position(|w| w == whole).unwrap();
    let mut spoiled = body[..start].to_vec();
    spoiled.extend_from_slice(&bad);
    spoiled.extend_from_slice(&body[start + whole.len()..]);
    let p = parse_data_response(&spoiled, 79500000).unwrap();
    let s = p.held().find(|s| s.id == Some(79500013)).unwrap();
    assert_eq!(s.reason, SpoilReason::Encoding);
    assert!(
        s.detail
            .starts_with("bytes that are neither UTF-8 nor windows-1250 text; ")
            && s.detail.contains("spisovaZnacka"),
        "{}",
        s.detail
    );
    assert_eq!(s.raw, bad);
    // The page's other records as before.
    let before = parse_data_response(&body, 79500000).unwrap();
    assert_eq!(
        p.actions().cloned().collect::<Vec<_>>(),
        before.actions().cloned().collect::<Vec<_>>()
    );
}

// ---------------------------------------------------------------------------------------
// Any single spoiled record leaves the others exactly as the clean page gives them.

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 48, ..Default::default() })]
    #[test]
    fn one_spoiled_record_leaves_the_others_exact(
        start in 0usize..400, len in 1usize..60, pick in 0usize..1000, kind in 0usize..6
    ) {
        let sim = Simulator::new(isir::sim::SimOptions { seed: 5, actions: 500, ..Default::default() });
        let all = sim.truth_all();
        let page = &all[start..(start + len).min(all.len())];
        let i = pick % page.len();
        let defect = RecordDefect::ALL[kind];
        let after = page[0].id - 1;
        let clean = parse_data_response(isir::source::write::data_response(page).as_bytes(), after).unwrap();
        let (body, _) = isir::sim::spoil::render_page(page, 0, |k| (k == i).then_some(defect));
        let got = parse_data_response(&body, after).unwrap();
        let others = |p: &isir::source::Page| -> Vec<isir::source::Record> {
            p.records.iter().filter(|r| r.action.id != page[i].id).cloned().collect()
        };
        proptest::prop_assert_eq!(others(&got), others(&clean));
        let shown = format!("{:?}", got);
        proptest::prop_assert!(!shown.contains(char::REPLACEMENT_CHARACTER));
        let stored = got.records.iter().find(|r| r.action.id == page[i].id);
        match defect {
            // Repaired: the record reads as the register meant it.
            RecordDefect::Cp1250 | RecordDefect::Cp1250Note => {
                proptest::prop_assert_eq!(stored, clean.records.get(i));
            }
            RecordDefect::BackId if i + 1 == page.len() => {}
            _ => {
                proptest::prop_assert!(stored.is_none());
                proptest::prop_assert_eq!(got.held().filter(|s| s.id == Some(page[i].id)).count(), 1);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The poller and the store, on both back ends

/// The first position (0-based) at or after `from` whose action satisfies `pred`.
fn pick(truth: &[Action], from: usize, pred: impl Fn(&Action) -> bool) -> usize {
    (from..truth.len()).find(|i| pred(&truth[*i])).unwrap()
}

fn non_ascii(s: &str) -> bool {
    !s.is_ascii()
}

/// Defects at the first and last record of pages, mid-page, and the stream's last
/// record, for a stream of `n` actions served in pages of `page`.
fn mixed_plan(truth: &[Action], page: usize) -> (FaultPlan, BTreeMap<i64, RecordDefect>) {
    let n = truth.len();
    let mut at: Vec<(usize, RecordDefect)> = vec![
        (0, RecordDefect::NoCase),           // first of page 1
        (page - 1, RecordDefect::BadNumber), // last of page 1
        (
            pick(truth, page, |a| non_ascii(&a.type_name)),
            RecordDefect::Cp1250,
        ), // early in page 2
        (
            pick(truth, page + 5, |a| {
                a.note.as_deref().is_some_and(non_ascii)
            }),
            RecordDefect::Cp1250Note,
        ),
        (2 * page, RecordDefect::Undecodable), // first of page 3
        (2 * page + 7, RecordDefect::BackId),  // mid page 3
        (3 * page - 1, RecordDefect::Cp1250Note), // last of page 3 (may be ASCII)
        (n - 1, RecordDefect::NoCase),         // the stream's last record
    ];
    at.sort();
    at.dedup_by_key(|(i, _)| *i);
    let mut plan = FaultPlan::none();
    let mut by_id = BTreeMap::new();
    for (i, d) in at {
        plan = plan.record(i as u64 + 1, d);
        by_id.insert(truth[i].id, d);
    }
    (plan, by_id)
}

/// Runs ticks until the poller catches up (at most 10).
async fn ingest(p: &mut isir::poller::Poller) -> Vec<isir::poller::Tick> {
    let mut ticks = Vec::new();
    for _ in 0..10 {
        let t = p.poll_once().await;
        let done = t.outcome != TickOutcome::BatchLimit;
        ticks.push(t);
        if done {
            break;
        }
    }
    ticks
}

async fn mixed_backfill(b: Backend) {
    let (sim, url, _g) = common::sim(260, 50, 21).await;
    let truth = sim.truth_all();
    let (plan, defects) = mixed_plan(&truth, 50);
    sim.set_faults(plan);
    let db = common::fresh_db(b).await;
    let mut s = common::settings(&url, &db);
    s.poll.max_batches_per_tick = 3;
    let app = common::app(s).await;
    let mut p = app.poller().unwrap();
    let ticks = ingest(&mut p).await;
    assert_eq!(
        ticks.last().unwrap().outcome,
        TickOutcome::CaughtUp,
        "{ticks:?}"
    );
    // The checkpoint reaches the head, the last record of the stream held back or not.
    assert_eq!(app.store.checkpoint().await.unwrap(), sim.head_id());
    // A spoiled page costs one request like a clean one: the head check and six pages.
    assert_eq!(sim.stats().requests_total, 1 + 6, "{ticks:?}");

    let sent = sim.spoiled_sent();
    // What the simulator sent decides what must be repaired (not UTF-8 but only
    // mis-encoded) and what must be held back.
    let mut want_repaired = BTreeSet::new();
    let mut want_held = BTreeSet::new();
    for (id, d) in &defects {
        match d {
            RecordDefect::Cp1250 | RecordDefect::Cp1250Note => {
                if std::str::from_utf8(&sent[id]).is_err() {
                    want_repaired.insert(*id);
                }
            }
            _ => {
                want_held.insert(*id);
            }
        }
    }
    assert!(want_repaired.len() >= 2, "{want_repaired:?}");
    let replica = common::all_actions(&app.store).await;
    let stored: BTreeSet<i64> = replica.iter().map(|a| a.id).collect();
    let rows = app.store.quarantine_rows(false).await.unwrap();
    let held: BTreeSet<i64> = rows
        .iter()
        .filter(|r| r.status == "held")
        .map(|r| r.action_id.unwrap())
        .collect();
    let repaired: BTreeSet<i64> = rows
        .iter()
        .filter(|r| r.status == "repaired")
        .map(|r| r.action_id.unwrap())
        .collect();
    assert_eq!(held, want_held, "{b:?}");
    assert_eq!(repaired, want_repaired, "{b:?}");
    // Replica plus quarantine equal the stream; no action in both.
    assert!(stored.is_disjoint(&held));
    let all: BTreeSet<i64> = stored.union(&held).copied().collect();
    assert_eq!(all, truth.iter().map(|a| a.id).collect::<BTreeSet<_>>());
    // Every stored record, sound or repaired, equals what the register meant.
    let by_id: BTreeMap<i64, &Action> = truth.iter().map(|a| (a.id, a)).collect();
    for a in &replica {
        assert_eq!(a, by_id[&a.id], "{b:?}");
    }
    assert!(!format!("{replica:?}").contains('\u{fffd}'));
    // The bytes kept are the bytes sent.
    for r in &rows {
        let raw = app.store.quarantine_raw(r.seq).await.unwrap().unwrap();
        assert_eq!(&raw, &sent[&r.action_id.unwrap()], "{r:?}");
    }
    // The counts the status shows, and the per-case counts the API reads.
    assert_eq!(
        app.store.quarantine_counts().await.unwrap(),
        (want_held.len() as i64, want_repaired.len() as i64)
    );
    let st = isir::status::collect(&app.status_source()).await.unwrap();
    assert_eq!(
        (st.quarantined, st.repaired),
        (want_held.len() as i64, want_repaired.len() as i64)
    );
    // (A record without its case number cannot be counted in a case.)
    let readable: Vec<i64> = want_held
        .iter()
        .copied()
        .filter(|id| defects[id] != RecordDefect::NoCase)
        .collect();
    assert!(!readable.is_empty());
    for id in &want_held {
        let case = &by_id[id].case_number;
        let want = readable
            .iter()
            .filter(|h| &by_id[h].case_number == case)
            .count() as i64;
        assert_eq!(
            app.store.quarantined_in_case(case).await.unwrap(),
            want,
            "{case}"
        );
    }
    // The ticks counted them.
    let (q, r): (u64, u64) = ticks
        .iter()
        .fold((0, 0), |(q, r), t| (q + t.quarantined, r + t.repaired));
    assert_eq!(
        (q as usize, r as usize),
        (want_held.len(), want_repaired.len())
    );
}

#[tokio::test]
async fn mixed_defects_across_pages_sqlite() {
    mixed_backfill(Backend::Sqlite).await;
}

#[tokio::test]
async fn mixed_defects_across_pages_postgres() {
    mixed_backfill(Backend::Postgres).await;
}

/// Each kind of defect alone, in the middle of the second page.
#[tokio::test]
async fn each_defect_alone_on_both_back_ends() {
    // The process's recorder, before the poller counts anything.
    let metrics = isir::telemetry::handle();
    for b in BOTH {
        for d in RecordDefect::ALL {
            let (sim, url, _g) = common::sim(120, 50, 3).await;
            let truth = sim.truth_all();
            let i = match d {
                RecordDefect::Cp1250 => pick(&truth, 55, |a| non_ascii(&a.type_name)),
                RecordDefect::Cp1250Note => {
                    pick(&truth, 55, |a| a.note.as_deref().is_some_and(non_ascii))
                }
                _ => 60,
            };
            sim.set_faults(FaultPlan::none().record(i as u64 + 1, d));
            let db = common::fresh_db(b).await;
            let app = common::app(common::settings(&url, &db)).await;
            let t = app.poller().unwrap().poll_once().await;
            assert_eq!(t.outcome, TickOutcome::CaughtUp, "{b:?} {d:?} {t:?}");
            assert_eq!(app.store.checkpoint().await.unwrap(), sim.head_id());
            let replica = common::all_actions(&app.store).await;
            let rows = app.store.quarantine_rows(false).await.unwrap();
            assert_eq!(rows.len(), 1, "{b:?} {d:?}");
            assert_eq!(rows[0].action_id, Some(truth[i].id));
            let sent = sim.spoiled_sent();
            assert_eq!(
                app.store
                    .quarantine_raw(rows[0].seq)
                    .await
                    .unwrap()
                    .unwrap(),
                sent[&truth[i].id]
            );
            match d {
                RecordDefect::Cp1250 | RecordDefect::Cp1250Note => {
                    assert_eq!(
                        (rows[0].status.as_str(), rows[0].reason.as_str()),
                        ("repaired", "cp1250")
                    );
                    assert_eq!(replica, truth, "{b:?} {d:?}");
                }
                _ => {
                    let reason = match d {
                        RecordDefect::NoCase => "missing_field",
                        RecordDefect::BadNumber => "bad_value",
                        RecordDefect::BackId => "out_of_order",
                        _ => "encoding",
                    };
                    assert_eq!(
                        (rows[0].status.as_str(), rows[0].reason.as_str()),
                        ("held", reason)
                    );
                    let mut want = truth.clone();
                    want.remove(i);
                    assert_eq!(replica, want, "{b:?} {d:?}");
                }
            }
        }
    }
    // Counted by reason.
    let text = metrics.render();
    for (name, reason) in [
        ("isir_source_records_repaired_total", "cp1250"),
        ("isir_source_records_quarantined_total", "missing_field"),
        ("isir_source_records_quarantined_total", "bad_value"),
        ("isir_source_records_quarantined_total", "out_of_order"),
        ("isir_source_records_quarantined_total", "encoding"),
    ] {
        let line = format!("{name}{{reason=\"{reason}\"}}");
        assert!(
            text.lines().any(|l| l.starts_with(&line)),
            "{line} missing:\n{text}"
        );
    }
}

async fn breaker_and_stop(b: Backend) {
    let (sim, url, _g) = common::sim(100, 50, 4).await;
    let truth = sim.truth_all();
    // Three spoiled records in the first page.
    sim.set_faults(
        FaultPlan::none()
            .record(3, RecordDefect::NoCase)
            .record(10, RecordDefect::BadNumber)
            .record(20, RecordDefect::Undecodable),
    );
    let db = common::fresh_db(b).await;
    let mut s = common::settings(&url, &db);
    s.source.max_bad_records_per_page = 2;
    let app = common::app(s.clone()).await;
    let mut p = app.poller().unwrap();
    let t = p.poll_once().await;
    p.release().await;
    match &t.outcome {
        TickOutcome::SourceError {
            class,
            after,
            error,
        } => {
            assert_eq!(class, "spoiled");
            assert_eq!(*after, -1);
            assert!(
                error.contains("missing_field=1") && error.contains("encoding=1"),
                "{error}"
            );
        }
        o => panic!("{b:?}: the breaker stops the tick: {o:?}"),
    }
    assert_eq!(app.store.checkpoint().await.unwrap(), None);
    assert_eq!(app.store.count_actions().await.unwrap(), 0);
    assert!(app.store.quarantine_rows(false).await.unwrap().is_empty());
    // `stop`: today's strict behaviour, whatever the tolerance.
    let mut strict = s.clone();
    strict.source.bad_records = isir::config::BadRecords::Stop;
    strict.source.max_bad_records_per_page = 100;
    let app2 = common::app(strict).await;
    let mut p = app2.poller().unwrap();
    let t = p.poll_once().await;
    p.release().await;
    assert!(
        matches!(&t.outcome, TickOutcome::SourceError { class, error, .. }
            if class == "invalid" && error.contains(&truth[2].id.to_string())),
        "{b:?}: {t:?}"
    );
    assert_eq!(app2.store.checkpoint().await.unwrap(), None);
    assert!(app2.store.quarantine_rows(false).await.unwrap().is_empty());
    // A raised tolerance lets the page through.
    s.source.max_bad_records_per_page = 3;
    let app3 = common::app(s).await;
    let t = app3.poller().unwrap().poll_once().await;
    assert_eq!(t.outcome, TickOutcome::CaughtUp, "{b:?}: {t:?}");
    assert_eq!(app3.store.checkpoint().await.unwrap(), sim.head_id());
    assert_eq!(app3.store.quarantine_counts().await.unwrap(), (3, 0));
}

#[tokio::test]
async fn breaker_stop_and_tolerance_sqlite() {
    breaker_and_stop(Backend::Sqlite).await;
}

#[tokio::test]
async fn breaker_stop_and_tolerance_postgres() {
    breaker_and_stop(Backend::Postgres).await;
}

/// Retry: a record held back for its order parses alone (its ID is not stored), so a
/// retry brings it in, and the projections equal those of a replica that got the whole
/// stream clean. A record that still does not parse stays held.
async fn retry_brings_in_what_now_parses(b: Backend) {
    let (sim, url, _g) = common::sim(150, 50, 8).await;
    let db = common::fresh_db(b).await;
    sim.set_faults(
        FaultPlan::none()
            .record(60, RecordDefect::BackId)
            .record(70, RecordDefect::NoCase),
    );
    let app = common::projected(&url, &db).await;
    let truth = sim.truth_all();
    assert_eq!(app.store.quarantine_counts().await.unwrap(), (2, 0));
    // The case's answer in the API says an action of it is held back.
    app.store.set_setting("phase", "serve").await.unwrap();
    let (base, _stop) = common::serve_api(isir::read::ReadState::new(
        app.store.clone(),
        isir::read::ReadOptions {
            rate_per_second: 10_000,
            burst: 10_000,
            ..Default::default()
        },
    ))
    .await;
    let (n, y) = truth[59]
        .case_number
        .trim_start_matches("INS ")
        .split_once('/')
        .unwrap();
    let case_url = format!("{base}/v1/cases/{y}/{n}");
    let answer = |url: String| async move {
        let r = reqwest::get(url).await.unwrap();
        let status = r.status();
        let body = r.text().await.unwrap();
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<serde_json::Value>(&body).unwrap()
    };
    let before = answer(case_url.clone()).await;
    assert_eq!(before["quarantined_actions"], 1, "{b:?}: {before}");
    let r = isir::quarantine::retry(&app.store, &app.lease, 1000, u64::MAX)
        .await
        .unwrap();
    match &r {
        isir::quarantine::Retry::Done {
            tried,
            released,
            still_held,
            rebuilt,
        } => {
            assert_eq!(
                (*tried, released.clone(), *still_held),
                (2, vec![truth[59].id], 1)
            );
            assert_eq!(rebuilt.len(), 3);
        }
        o => panic!("{o:?}"),
    }
    assert_eq!(app.store.quarantine_counts().await.unwrap(), (1, 0));
    let after = answer(case_url).await;
    assert!(after.get("quarantined_actions").is_none(), "{b:?}: {after}");
    let mut want = truth.clone();
    want.remove(69);
    assert_eq!(common::all_actions(&app.store).await, want);
    // The same stream with only the missing-field record spoiled, ingested and projected
    // from scratch: what the projections must be.
    sim.set_faults(FaultPlan::none().record(70, RecordDefect::NoCase));
    let clean_db = common::fresh_db(b).await;
    let clean = common::projected(&url, &clean_db).await;
    assert_eq!(common::all_actions(&clean.store).await, want);
    assert_eq!(
        common::dump(&app.store).await,
        common::dump(&clean.store).await,
        "{b:?}"
    );
    // A second retry changes nothing.
    let r = isir::quarantine::retry(&app.store, &app.lease, 1000, u64::MAX)
        .await
        .unwrap();
    assert!(
        matches!(r, isir::quarantine::Retry::Done { ref released, still_held: 1, .. } if released.is_empty())
    );
}

#[tokio::test]
async fn retry_sqlite() {
    retry_brings_in_what_now_parses(Backend::Sqlite).await;
}

#[tokio::test]
async fn retry_postgres() {
    retry_brings_in_what_now_parses(Backend::Postgres).await;
}

/// Snapshots carry the quarantine, and the erasure (§ 425) of a case removes the bytes
/// of its quarantined records as it redacts its replica rows.
async fn snapshot_and_erasure(b: Backend) {
    let (sim, url, _g) = common::sim(1500, 500, 12).await;
    let truth = sim.truth_all();
    let erased: BTreeSet<String> = sim
        .truth_debtors()
        .into_iter()
        .filter(|d| d.erased)
        .map(|d| d.case_number)
        .collect();
    let e = truth
        .iter()
        .position(|a| erased.contains(&a.case_number))
        .expect("an erased case in the stream");
    let kept = truth
        .iter()
        .position(|a| !erased.contains(&a.case_number) && a.id > truth[e].id + 3)
        .unwrap();
    sim.set_faults(
        FaultPlan::none()
            .record(e as u64 + 1, RecordDefect::BadNumber)
            .record(kept as u64 + 1, RecordDefect::Undecodable),
    );
    let db = common::fresh_db(b).await;
    let app = common::projected(&url, &db).await;
    let sent = sim.spoiled_sent();
    let rows = app.store.quarantine_rows(false).await.unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    for r in &rows {
        let raw = app.store.quarantine_raw(r.seq).await.unwrap().unwrap();
        if r.action_id == Some(truth[e].id) {
            assert!(raw.is_empty(), "{b:?}: the erased case's bytes are removed");
            assert!(
                r.detail.ends_with(isir::privacy::QUARANTINE_ERASED),
                "{r:?}"
            );
        } else {
            assert_eq!(raw, sent[&truth[kept].id]);
        }
    }
    // A snapshot and a restore into another back end carry every row and its bytes.
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let m = isir::snapshot::create(&app.store, &snap, -1, 5000, false, false)
        .await
        .unwrap();
    assert_eq!(m.quarantine.as_ref().map(|q| q.rows), Some(2));
    let other = match b {
        Backend::Sqlite => Backend::Postgres,
        Backend::Postgres => Backend::Sqlite,
    };
    let db2 = common::fresh_db(other).await;
    let app2 = common::app(common::settings(&url, &db2)).await;
    isir::snapshot::restore(&app2.store, &app2.lease, &snap, false, false)
        .await
        .unwrap();
    let strip = |rs: Vec<isir::store::QuarantineRow>| -> Vec<_> {
        rs.into_iter()
            .map(|r| {
                (
                    r.action_id,
                    r.case_number,
                    r.reason,
                    r.detail,
                    r.status,
                    r.page_after,
                )
            })
            .collect()
    };
    let rows2 = app2.store.quarantine_rows(false).await.unwrap();
    for (a, c) in rows.iter().zip(&rows2) {
        assert_eq!(
            app.store.quarantine_raw(a.seq).await.unwrap(),
            app2.store.quarantine_raw(c.seq).await.unwrap()
        );
    }
    assert_eq!(strip(rows), strip(rows2));
    assert_eq!(
        app2.store.quarantine_counts().await.unwrap(),
        app.store.quarantine_counts().await.unwrap()
    );
    let case = &truth[kept].case_number;
    assert_eq!(app2.store.quarantined_in_case(case).await.unwrap(), 1);
}

#[tokio::test]
async fn snapshot_and_erasure_sqlite() {
    snapshot_and_erasure(Backend::Sqlite).await;
}

#[tokio::test]
async fn snapshot_and_erasure_postgres() {
    snapshot_and_erasure(Backend::Postgres).await;
}

/// The binary killed with SIGKILL between and inside pages of a backfill with spoiled
/// records: nothing is lost, nothing is stored twice (in the replica or the quarantine),
/// and `isir quarantine show` prints the bytes the register sent.
async fn kill_during_spoiled_backfill(b: Backend) {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let (sim, url, _g) = isir::sim::spawn(isir::sim::SimOptions {
        seed: 31,
        actions: 6000,
        page: 100,
        daily_limit: None,
        per_minute_limit: None,
        latency: Duration::from_millis(80),
        ..Default::default()
    })
    .await
    .unwrap();
    let truth = sim.truth_all();
    let mut plan = FaultPlan::none();
    let mut held = BTreeSet::new();
    for (k, i) in (49..6000).step_by(97).enumerate() {
        let d = [
            RecordDefect::NoCase,
            RecordDefect::BadNumber,
            RecordDefect::Undecodable,
        ][k % 3];
        plan = plan.record(i as u64 + 1, d);
        held.insert(truth[i].id);
    }
    sim.set_faults(plan);
    let db = common::fresh_db(b).await;
    let s = common::settings(&url, &db);
    let env: Vec<(&str, String)> = vec![
        ("ISIR_SOURCE__URL", url.clone()),
        ("ISIR_DATABASE__URL", db.url.clone()),
        ("ISIR_POLL__PERIOD_SECS", "1".into()),
        ("ISIR_POLL__MAX_BATCHES_PER_TICK", "1000".into()),
        ("ISIR_POLL__PAGE_SIZE", "100".into()),
        ("ISIR_LEASE__KEY", s.lease.key.clone()),
        ("ISIR_LEASE__EPOCH_KEY", s.lease.epoch_key.clone()),
        ("ISIR_BUDGET__DAILY", "1000000".into()),
        ("ISIR_BUDGET__PER_MINUTE", "1000000".into()),
        ("ISIR_API__BIND", "127.0.0.1:0".into()),
        ("ISIR_LOG", "warn".into()),
    ];
    let bin = env!("CARGO_BIN_EXE_isir");
    let run = || {
        Command::new(bin)
            .arg("run")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let store = common::store(&db).await;
    let mut rng = rand::thread_rng();
    for _ in 0..4 {
        let mut child = run();
        let wait = rand::Rng::gen_range(&mut rng, 200..800);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        Command::new("kill")
            .args(["-KILL", &child.id().to_string()])
            .status()
            .unwrap();
        child.wait().unwrap();
        store.lease_force_release(&s.lease.key).await.unwrap();
    }
    let mid = store.checkpoint().await.unwrap();
    assert!(mid != sim.head_id(), "the kills land during the backfill");
    let mut child = run();
    let deadline = Instant::now() + Duration::from_secs(120);
    while store.checkpoint().await.unwrap() != sim.head_id() {
        assert!(Instant::now() < deadline, "the backfill did not finish");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    child.wait().unwrap();
    let replica = common::all_actions(&store).await;
    let want: Vec<Action> = truth
        .iter()
        .filter(|a| !held.contains(&a.id))
        .cloned()
        .collect();
    assert_eq!(replica, want, "{b:?}: nothing lost, nothing twice");
    let rows = store.quarantine_rows(false).await.unwrap();
    let ids: Vec<i64> = rows.iter().map(|r| r.action_id.unwrap()).collect();
    assert_eq!(
        ids,
        held.iter().copied().collect::<Vec<_>>(),
        "{b:?}: each held back once"
    );
    // The commands, on the binary: stdout of a successful run.
    let cli = |args: &[&str]| -> Vec<u8> {
        let out = Command::new(bin)
            .args(args)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {err}");
        out.stdout
    };
    // `isir quarantine list --json` lists them.
    let listed: Vec<serde_json::Value> =
        serde_json::from_slice(&cli(&["quarantine", "list", "--json"])).unwrap();
    let listed: Vec<i64> = listed
        .iter()
        .map(|r| r["action_id"].as_i64().unwrap())
        .collect();
    assert_eq!(listed, ids);
    // `isir quarantine show ID` prints the bytes sent, exactly.
    let sent = sim.spoiled_sent();
    for id in ids.iter().take(3) {
        let shown = cli(&["quarantine", "show", &id.to_string()]);
        assert_eq!(shown, sent[id], "{b:?}: action {id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_spoiled_backfill_sqlite() {
    kill_during_spoiled_backfill(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_spoiled_backfill_postgres() {
    kill_during_spoiled_backfill(Backend::Postgres).await;
}
