//! Projections against the simulator's ground truth, on both back ends: cases, parties,
//! timeline, stats and search keys; erasure; rebuild equals incremental build; unknown
//! input never stops a builder; a failing action stops it, named.

mod common;

use common::{count, dump, texts};

use std::collections::{BTreeMap, BTreeSet};

use common::{BOTH, Backend};
use isir::projection;
use isir::readmodel::fold::name_key;
use isir::readmodel::{CaseDoc, PartyDoc};
use isir::source::model::{Note, Record};
use isir::store::Store;
use isir::store::sql::Tx;

/// The published actions with their notes as the generator made them: neither the
/// note writer nor the parser stands between the truth and the expectations.
fn records(sim: &isir::sim::Simulator) -> Vec<Record> {
    use isir::sim::TruthNote;
    sim.truth_models()
        .into_iter()
        .map(|(action, note)| Record {
            action,
            detail: match note {
                TruthNote::Absent => Note::Absent,
                TruthNote::Model(d) => Note::Parsed(d),
                // Written verbatim by the simulator (a newer schema, a broken document):
                // no expectation is taken from its content.
                TruthNote::Raw(_) => Note::Unparsed {
                    error: "written verbatim".into(),
                },
            },
        })
        .collect()
}

async fn catch_up_all(store: &Store, chunk: i64) {
    for n in projection::NAMES {
        projection::catch_up(store, n, chunk).await.unwrap();
    }
}

/// The query plan of `sql` as text (on PostgreSQL with sequential scans and sorts
/// discouraged, so that the small test tables do not hide what the indexes allow).
async fn explain(store: &Store, sql: &str) -> String {
    use sqlx::Row;
    match store {
        Store::Sqlite(p) => sqlx::query(&format!("EXPLAIN QUERY PLAN {sql}"))
            .fetch_all(p)
            .await
            .unwrap()
            .iter()
            .map(|r| r.get::<String, _>(3))
            .collect::<Vec<_>>()
            .join("\n"),
        Store::Postgres(p) => {
            let mut c = p.acquire().await.unwrap();
            sqlx::query("SET enable_seqscan = off")
                .execute(&mut *c)
                .await
                .unwrap();
            sqlx::query("SET enable_sort = off")
                .execute(&mut *c)
                .await
                .unwrap();
            let plan = sqlx::query(&format!("EXPLAIN {sql}"))
                .fetch_all(&mut *c)
                .await
                .unwrap()
                .iter()
                .map(|r| r.get::<String, _>(0))
                .collect::<Vec<_>>()
                .join("\n");
            sqlx::query("RESET ALL").execute(&mut *c).await.unwrap();
            plan
        }
    }
}

/// Expectations derived directly from the truth, without the builders' code.
struct Expect {
    state: Option<String>,
    /// Each debtor's ID, kind, surname or company name, first name and IČO.
    debtors: BTreeSet<DebtorKey>,
    admin: Option<String>,
    /// The latest administrator appointment date published in the case.
    appointed: Option<String>,
    court_code: Option<String>,
    claims_deadline: Option<String>,
    ended: Option<String>,
    legal_force: Vec<String>,
    claims: i64,
    erased: bool,
    ids: Vec<i64>,
    documents: i64,
}

type DebtorKey = (
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

fn expectations(recs: &[Record]) -> BTreeMap<String, Expect> {
    let mut m: BTreeMap<String, Expect> = BTreeMap::new();
    for r in recs.iter().filter(|r| r.action.case_number != "INS -1/-1") {
        let e = m.entry(r.action.case_number.clone()).or_insert(Expect {
            state: None,
            debtors: BTreeSet::new(),
            admin: None,
            appointed: None,
            court_code: None,
            claims_deadline: None,
            ended: None,
            legal_force: vec![],
            claims: 0,
            erased: false,
            ids: vec![],
            documents: 0,
        });
        e.ids.push(r.action.id);
        e.documents += r.action.document_url.is_some() as i64;
        let secondary = |d: &isir::source::model::Detail| {
            [&d.secondary_action, &d.secondary_document]
                .iter()
                .any(|f| f.as_ref().is_some_and(|f| f.as_str() == "T"))
        };
        // PROTOCOL.md: type 63 is a claim filed; a secondary document or action for the
        // same slot is not another claim.
        if r.action.type_code == "63" && !matches!(&r.detail, Note::Parsed(d) if secondary(d)) {
            e.claims += 1;
        }
        if let Note::Parsed(d) = &r.detail {
            if e.court_code.is_none() {
                e.court_code = d.origin.clone();
            }
            if let Some(c) = &d.case {
                if let Some(s) = &c.state {
                    e.state = Some(s.clone());
                }
                if c.claims_deadline.is_some() {
                    e.claims_deadline = c.claims_deadline.clone();
                }
                if c.ended.is_some() {
                    e.ended = c.ended.clone();
                }
            }
            if let Some(f) = &d.legal_force_date {
                e.legal_force.push(f.clone());
            }
            if d.administrator_appointed.is_some() {
                e.appointed = d.administrator_appointed.clone();
            }
            if let Some(p) = &d.person {
                match p.role.as_deref() {
                    Some("DLUŽNÍK") => {
                        e.debtors.insert((
                            p.id.clone(),
                            p.kind.clone(),
                            p.name.clone(),
                            p.first_name.clone(),
                            p.ico.clone(),
                        ));
                    }
                    Some("SPRÁVCE") => e.admin = Some(p.id.clone()),
                    _ => {}
                }
            }
            if d.struck_out.is_some() {
                e.erased = true;
            }
        }
        // PROTOCOL.md: 636 and 637 strike the debtor, whatever their note.
        if ["636", "637"].contains(&r.action.type_code.as_str()) {
            e.erased = true;
        }
    }
    for e in m.values_mut() {
        if e.erased {
            e.debtors.clear();
        }
    }
    m
}

async fn projections_match_truth(b: Backend) {
    let (sim, _db, app, _g) = common::replica(b, 30_000, 31).await;
    let store = &app.store;
    catch_up_all(store, 777).await;
    let recs = records(&sim);
    let exp = expectations(&recs);
    let docs: Vec<CaseDoc> = texts(store, "SELECT doc FROM cases", &[])
        .await
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(docs.len(), exp.len(), "one case per case number");
    let mut erased_cases = 0;
    for d in &docs {
        let e = &exp[&d.case_number];
        assert_eq!(d.state, e.state, "{}", d.case_number);
        assert_eq!(d.erased, e.erased, "{}", d.case_number);
        assert_eq!(
            d.debtors
                .iter()
                .map(|x| (
                    x.person_id.clone(),
                    x.kind.clone(),
                    x.name.clone(),
                    x.first_name.clone(),
                    x.ico.clone()
                ))
                .collect::<BTreeSet<_>>(),
            e.debtors,
            "{}",
            d.case_number
        );
        assert_eq!(d.court_code, e.court_code, "{}", d.case_number);
        assert_eq!(d.claims_deadline, e.claims_deadline, "{}", d.case_number);
        assert_eq!(d.ended, e.ended, "{}", d.case_number);
        assert_eq!(
            d.legal_force
                .iter()
                .map(|l| l.date.clone())
                .collect::<Vec<_>>(),
            e.legal_force,
            "{}",
            d.case_number
        );
        assert_eq!(d.claims, e.claims, "{}", d.case_number);
        assert_eq!(
            d.administrator.as_ref().map(|a| a.person_id.clone()),
            e.admin,
            "{}",
            d.case_number
        );
        assert_eq!(d.first_action_id, e.ids[0]);
        assert_eq!(d.latest_action_id, *e.ids.last().unwrap());
        assert_eq!(d.documents, e.documents);
        assert!(d.court_short.is_some());
        if let Some(a) = &d.administrator {
            assert!(
                a.appointed.is_some() && a.appointed == e.appointed,
                "the latest appointment date reaches the administrator: {}",
                d.case_number
            );
        }
        erased_cases += d.erased as usize;
        let ids: Vec<i64> = texts(
            store,
            "SELECT CAST(t.action_id AS TEXT) FROM timeline t WHERE t.case_number = $1 ORDER BY t.action_id",
            &[d.case_number.as_str().into()],
        )
        .await
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        assert_eq!(ids, e.ids, "timeline of {}", d.case_number);
    }
    assert!(erased_cases > 0, "the simulator erased some cases");
    // Stats add up and match the states.
    let stats = texts(
        store,
        "SELECT dim || '|' || key || '|' || CAST(count AS TEXT) FROM stats",
        &[],
    )
    .await;
    let mut by_state: BTreeMap<String, i64> = BTreeMap::new();
    for d in &docs {
        *by_state
            .entry(d.state.clone().unwrap_or("?".into()))
            .or_default() += 1;
    }
    for (s, n) in &by_state {
        assert!(
            stats.contains(&format!("state|{s}|{n}")),
            "state {s}: {n} in {stats:?}"
        );
    }
    for dim in ["court", "month"] {
        let sum: i64 = stats
            .iter()
            .filter(|l| l.starts_with(&format!("{dim}|")))
            .map(|l| l.rsplit('|').next().unwrap().parse::<i64>().unwrap())
            .sum();
        assert_eq!(sum as usize, docs.len(), "{dim}");
    }
    // Each party's first action (the feed's `new_party`): the first action of the stream
    // that named the person, from the simulator's records; in the cases never erased (an erasure drops a role-less person, who may
    // come back later with a role).
    let first = first_actions(&recs);
    let mut parties_checked = 0;
    for row in texts(
        store,
        "SELECT case_number || '|' || court || '|' || person_id || '|' || CAST(first_action_id AS TEXT) FROM parties",
        &[],
    )
    .await
    {
        let (key, id) = row.rsplit_once('|').unwrap();
        let case = key.split('|').next().unwrap();
        if exp[case].erased {
            continue;
        }
        assert_eq!(
            first.get(key).map(|f| f.to_string()).as_deref(),
            Some(id),
            "first action of the party {key}"
        );
        parties_checked += 1;
    }
    assert!(parties_checked > 1000, "{parties_checked} parties checked");
    // Erased debtors' data appear in no projection table.
    let mut checked = 0;
    for r in &recs {
        let Note::Parsed(d) = &r.detail else { continue };
        let Some(p) = &d.person else { continue };
        if p.role.as_deref() != Some("DLUŽNÍK") || !exp[&r.action.case_number].erased {
            continue;
        }
        for needle in [
            p.birth_number.clone(),
            p.id.clone().into(),
            p.birth_date.clone(),
        ]
        .into_iter()
        .flatten()
        {
            let like = format!("%{needle}%");
            for sql in [
                "SELECT COUNT(*) FROM parties WHERE doc LIKE $1",
                "SELECT COUNT(*) FROM cases WHERE doc LIKE $1",
            ] {
                assert_eq!(
                    count(store, sql, &like).await,
                    0,
                    "{needle} of an erased debtor found by {sql}"
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 0);
    // Search keys: a surname without case and diacritics, an IČO, a birth number.
    let with_diacritics = docs
        .iter()
        .flat_map(|d| d.debtors.iter())
        .find(|p| {
            p.kind.as_deref() == Some("F")
                && p.name
                    .as_ref()
                    .is_some_and(|n| name_key(n) != n.to_lowercase())
        })
        .expect("a debtor with diacritics");
    let surname = with_diacritics.name.clone().unwrap();
    for q in [
        surname.to_uppercase(),
        name_key(&surname).to_uppercase(),
        surname.to_lowercase(),
    ] {
        let hits = texts(
            store,
            "SELECT doc FROM parties WHERE name_key = $1",
            &[name_key(&q).into()],
        )
        .await;
        assert!(
            hits.iter()
                .any(|h| serde_json::from_str::<PartyDoc>(h).unwrap().person_id
                    == with_diacritics.person_id),
            "{q} finds {surname}"
        );
    }
    let company = docs
        .iter()
        .flat_map(|d| d.debtors.iter())
        .find(|p| p.ico.is_some())
        .unwrap();
    let ico = company.ico.clone().unwrap();
    assert!(count(store, "SELECT COUNT(*) FROM parties WHERE ico = $1", &ico).await >= 1);
    let person: PartyDoc = serde_json::from_str(
        &texts(
            store,
            "SELECT doc FROM parties WHERE rc IS NOT NULL AND role = 'DLUŽNÍK'",
            &[],
        )
        .await[0],
    )
    .unwrap();
    let rc = person.birth_number.clone().unwrap();
    assert!(count(store, "SELECT COUNT(*) FROM parties WHERE rc = $1", &rc).await >= 1);
    assert!(
        count(
            store,
            "SELECT COUNT(*) FROM parties WHERE rc = $1",
            &isir::readmodel::fold::rc_key(&rc.replace('/', ""))
        )
        .await
            >= 1
    );
    // The lookup behind `/v1/subjects` reads its page from the key's index in keyset
    // order and stops there: no sort of everything the key matches.
    for col in ["ico", "rc", "name_key"] {
        let sql = isir::read::queries::subjects_sql(col)
            .replace("$1", "'12345678'")
            .replace("$2", "''")
            .replace("$3", "''")
            .replace("$4", "''")
            .replace("$5", "51");
        let plan = explain(store, &sql).await;
        assert!(
            !plan.contains("TEMP B-TREE") && !plan.contains("Sort"),
            "{col}: {plan}"
        );
        assert!(
            plan.contains(&format!(
                "INDEX parties_v1_{}",
                col.replace("name_key", "name")
            )) || plan.contains(&format!(
                "parties_v1_{} on",
                col.replace("name_key", "name")
            )),
            "{col}: {plan}"
        );
    }
    // Every case recomputes to the same documents.
    let all: Vec<String> = docs.iter().map(|d| d.case_number.clone()).collect();
    let rep = projection::verify::verify(store, 0, Some(all))
        .await
        .unwrap();
    assert!(
        rep.clean(),
        "{:?}",
        &rep.differences[..rep.differences.len().min(3)]
    );
    assert_eq!(rep.checked, docs.len());
    let metas = projection::metas(store).await.unwrap();
    assert!(
        metas
            .iter()
            .all(|m| m.cursor == sim.head_id().unwrap() && m.error.is_none()),
        "{metas:?}"
    );
    assert!(
        metas
            .iter()
            .find(|m| m.name == "parties")
            .unwrap()
            .counts
            .erased
            > 0
    );
}

#[tokio::test]
async fn projections_match_truth_sqlite() {
    projections_match_truth(Backend::Sqlite).await;
}

#[tokio::test]
async fn projections_match_truth_postgres() {
    projections_match_truth(Backend::Postgres).await;
}

/// The name-search index as rows to compare: each person's row (but SQLite's `prow`,
/// the rowid of their `parties` row, which a rebuild numbers anew) and on PostgreSQL
/// every (term, latest action) row.
async fn name_index(store: &Store) -> Vec<String> {
    let v = count(
        store,
        "SELECT version FROM proj_meta WHERE name = $1",
        "parties",
    )
    .await;
    if matches!(store, Store::Postgres(_)) {
        let mut rows = texts(
            store,
            &format!(
                "SELECT case_number || '|' || court || '|' || person_id || '|' || words || '|' || terms \
                 || '|' || exact || '|' || COALESCE(CAST(birth_year AS TEXT), '') || '|' || COALESCE(role, '') \
                 || '|' || COALESCE(kind, '') || '|' || CAST(latest AS TEXT) FROM names_v{v} ORDER BY 1"
            ),
            &[],
        )
        .await;
        rows.extend(
            texts(
                store,
                &format!(
                    "SELECT 'term ' || term || '|' || CAST(latest AS TEXT) FROM name_terms_v{v} ORDER BY 1"
                ),
                &[],
            )
            .await,
        );
        rows
    } else {
        texts(
            store,
            &format!(
                "SELECT CAST(rowid AS TEXT) || '|' || words || '|' || tags || '|' || exact || '|' || case_number \
                 || '|' || court || '|' || person_id FROM names_v{v} ORDER BY rowid"
            ),
            &[],
        )
        .await
    }
}

/// Built incrementally in small steps while pages arrive, or rebuilt side by side in one
/// go: the same projections, name-search index and (on PostgreSQL) its term table
/// included, which a rebuild fills at its end.
#[tokio::test]
async fn rebuild_equals_incremental() {
    for b in BOTH {
        let (sim, url, _g) = common::sim(12_000, 1000, 32).await;
        let db = common::fresh_db(b).await;
        let mut s = common::settings(&url, &db);
        s.poll.max_batches_per_tick = 2;
        let app = common::app(s).await;
        let mut p = app.poller().unwrap();
        loop {
            let t = p.poll_once().await;
            catch_up_all(&app.store, 333).await;
            if t.outcome == isir::poller::TickOutcome::CaughtUp {
                break;
            }
        }
        let incremental = dump(&app.store).await;
        assert!(incremental["cases"].len() > 500);
        let names = name_index(&app.store).await;
        assert!(
            names.len() > 1000
                && (b == Backend::Sqlite || names.iter().any(|r| r.starts_with("term "))),
            "{} index rows",
            names.len()
        );
        for n in projection::NAMES {
            let m = projection::rebuild(&app.store, n, 5000).await.unwrap();
            assert_eq!(m.version, 2);
            assert_eq!(m.cursor, sim.head_id().unwrap());
        }
        let rebuilt = dump(&app.store).await;
        for (k, v) in &incremental {
            assert_eq!(v, &rebuilt[k], "{k} on {b:?}");
        }
        let again = name_index(&app.store).await;
        assert_eq!(names.len(), again.len(), "name index rows on {b:?}");
        for (a, r) in names.iter().zip(&again) {
            assert_eq!(a, r, "the name index on {b:?}");
        }
        // The old version is gone; a second rebuild works too.
        assert_eq!(
            count(
                &app.store,
                "SELECT COUNT(*) FROM proj_meta WHERE name LIKE $1",
                "%#next"
            )
            .await,
            0
        );
        projection::rebuild(&app.store, "cases", 5000)
            .await
            .unwrap();
        assert_eq!(dump(&app.store).await["cases"], incremental["cases"]);
    }
}

/// A PostgreSQL rebuild refreshes the statistics of the version it fills as it grows
/// (after its 1st, 2nd, 4th... batch), not only once it is full: PostgreSQL's own
/// counter of `ANALYZE` runs on the new tables says so (the final refresh alone is one).
#[tokio::test]
async fn a_postgres_rebuild_refreshes_statistics_as_the_version_grows() {
    let (_sim, _db, app, _g) = common::replica(Backend::Postgres, 12_000, 41).await;
    catch_up_all(&app.store, 5000).await;
    // Batches of 300 actions: 40 of them, so the schedule refreshes at least 6 times.
    let m = projection::rebuild(&app.store, "parties", 300)
        .await
        .unwrap();
    assert_eq!(m.version, 2);
    let analyzed = |t: &'static str| {
        let store = app.store.clone();
        async move {
            count(
                &store,
                "SELECT CAST(COALESCE(SUM(analyze_count), 0) AS BIGINT) FROM pg_stat_user_tables WHERE relname = $1",
                t,
            )
            .await
        }
    };
    // (The rebuild's connections report their counters when they go idle.)
    let mut n = 0;
    for _ in 0..100 {
        n = analyzed("parties_v2").await;
        if n >= 4 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(n >= 4, "parties_v2 analyzed {n} times during its rebuild");
    assert!(analyzed("names_v2").await >= 2);
}

fn action(id: i64, case: &str, code: &str, note: Option<&str>) -> isir::source::Action {
    isir::source::Action {
        id,
        created: "2026-03-02T09:14:05.000+01:00".into(),
        published: "2026-03-02T09:20:11.000+01:00".into(),
        document_url: None,
        case_number: case.into(),
        type_code: code.into(),
        type_name: "něco".into(),
        section: None,
        number_in_section: None,
        note: note.map(str::to_string),
    }
}

#[tokio::test]
async fn unknown_codes_and_unparsed_details_never_stop_a_builder() {
    for b in BOTH {
        let db = common::fresh_db(b).await;
        let store = common::store(&db).await;
        let e = store.register_epoch(1).await.unwrap();
        let acts = [
            action(
                10,
                "INS 1/2026",
                "9999",
                Some(
                    "<udalost><idOsobyPuvodce>KSBR_NEW</idOsobyPuvodce><vec><druhStavRizeni>NOVÝ STAV</druhStavRizeni></vec></udalost>",
                ),
            ),
            action(11, "INS 1/2026", "5", Some("<udalost><osoba>broken")),
            action(
                12,
                "INS 1/2026",
                "1",
                Some(
                    "<udalost><idOsobyPuvodce>KSBR_NEW</idOsobyPuvodce><osoba><idOsoby>X 1</idOsoby><druhRoleVRizeni>NOVÁ ROLE</druhRoleVRizeni></osoba></udalost>",
                ),
            ),
            action(13, "INS 2/2026", "5", None),
        ];
        let refs: Vec<&isir::source::Action> = acts.iter().collect();
        store.write_actions(e, None, -1, &refs).await.unwrap();
        catch_up_all(&store, 1000).await;
        let metas = projection::metas(&store).await.unwrap();
        let m = |n: &str| metas.iter().find(|m| m.name == n).unwrap().clone();
        assert!(metas.iter().all(|m| m.cursor == 13 && m.error.is_none()));
        assert_eq!(m("timeline").counts.unknown_codes, 1);
        assert_eq!(m("cases").counts.unparsed, 1);
        assert!(
            m("cases").counts.unknown_other >= 2,
            "unknown court, state and role: {:?}",
            m("cases").counts
        );
        let doc: CaseDoc = serde_json::from_str(
            &texts(
                &store,
                "SELECT doc FROM cases WHERE case_number = 'INS 1/2026'",
                &[],
            )
            .await[0],
        )
        .unwrap();
        assert_eq!(doc.state.as_deref(), Some("NOVÝ STAV"), "kept verbatim");
        assert_eq!(doc.court_code.as_deref(), Some("KSBR_NEW"));
        let tl = texts(
            &store,
            "SELECT type_name FROM timeline WHERE action_id = 10",
            &[],
        )
        .await;
        assert_eq!(tl, ["něco"], "an unknown code keeps the published name");
    }
}

#[tokio::test]
async fn a_failing_action_stops_the_builder_at_that_action() {
    let (sim, _db, app, _g) = common::replica(Backend::Sqlite, 3000, 33).await;
    let store = &app.store;
    projection::ensure_all(store).await.unwrap();
    let truth = sim.truth_all();
    // Damage the stored document of the case of the 1500th action.
    let victim = truth[1500].clone();
    let first_of_victim = truth
        .iter()
        .find(|a| a.case_number == victim.case_number)
        .unwrap()
        .id;
    let mut tx = Tx::begin(store).await.unwrap();
    tx.exec(
        "INSERT INTO cases_v1 (case_number, opened, first_action_id, latest_action_id, latest_published, erased, doc) VALUES ($1, '', 0, 0, '', 0, 'not json')",
        &[victim.case_number.as_str().into()],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let err = projection::catch_up(store, "cases", 1000)
        .await
        .unwrap_err();
    match &err {
        projection::ProjectionError::Action { id, why } => {
            assert_eq!(*id, first_of_victim, "{why}");
        }
        other => panic!("{other:?}"),
    }
    let m = projection::metas(store)
        .await
        .unwrap()
        .into_iter()
        .find(|m| m.name == "cases")
        .unwrap();
    let before = truth
        .iter()
        .take_while(|a| a.id < first_of_victim)
        .last()
        .unwrap()
        .id;
    assert_eq!(
        m.cursor, before,
        "stopped just before the failing action, everything before it applied"
    );
    assert!(m.error.unwrap().contains(&first_of_victim.to_string()));
}

/// With `projection.redact_replica`, the erased debtors' data also leave the raw replica.
#[tokio::test]
async fn erasure_can_redact_the_replica() {
    let (sim, url, _g) = common::sim(30_000, 1000, 31).await;
    let db = common::fresh_db(Backend::Sqlite).await;
    let mut s = common::settings(&url, &db);
    s.poll.max_batches_per_tick = 10_000;
    s.projection.redact_replica = true;
    let app = common::app(s).await;
    app.poller().unwrap().poll_once().await;
    catch_up_all(&app.store, 5000).await;
    let recs = records(&sim);
    let exp = expectations(&recs);
    let mut needles = 0;
    let mut kept = 0;
    // The notes as stored, decoded (most are compressed: `store::notes`).
    let notes: Vec<String> = common::all_actions(&app.store)
        .await
        .into_iter()
        .filter_map(|a| a.note)
        .collect();
    let compressed = count(
        &app.store,
        "SELECT COUNT(*) FROM actions WHERE note_z IS NOT NULL AND case_number <> $1",
        "",
    )
    .await;
    assert!(
        compressed > 10_000,
        "the replica's notes are compressed: {compressed}"
    );
    for r in &recs {
        let Note::Parsed(d) = &r.detail else { continue };
        let Some(p) = &d.person else { continue };
        if p.role.as_deref() != Some("DLUŽNÍK") {
            continue;
        }
        let erased = exp[&r.action.case_number].erased;
        if !erased && kept >= 20 {
            continue;
        }
        let rc = p.birth_number.clone().unwrap_or_else(|| p.id.clone());
        let n = notes.iter().filter(|n| n.contains(&rc)).count();
        if erased {
            assert_eq!(n, 0, "{rc} of an erased debtor left in the replica");
            needles += 1;
        } else {
            assert!(n > 0, "other debtors stay");
            kept += 1;
        }
    }
    assert!(needles > 0 && kept > 0);
    // The redacted replica still rebuilds to the same projections.
    let before = dump(&app.store).await;
    for n in projection::NAMES {
        projection::rebuild(&app.store, n, 5000).await.unwrap();
    }
    assert_eq!(before, dump(&app.store).await);
}

/// In the daemon, the builders follow the stored pages by themselves once the phase is
/// `project`, and not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_builds_projections_in_the_project_phase() {
    let (sim, url, _g) = common::sim(5_000, 1000, 34).await;
    let db = common::fresh_db(Backend::Sqlite).await;
    let mut s = common::settings(&url, &db);
    s.poll.period_secs = 1;
    s.projection.debounce_ms = 100;
    s.projection.every_secs = 1;
    let app = std::sync::Arc::new(common::app(s).await);
    projection::ensure_all(&app.store).await.unwrap();
    let (tx, rx) = tokio::sync::watch::channel(false);
    let a = app.clone();
    let daemon = tokio::spawn(async move { isir::daemon::run(&a, rx).await });
    // Phase `ingest`: the replica fills, the projections do not.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while app.store.checkpoint().await.unwrap() != sim.head_id() {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let ms = projection::metas(&app.store).await.unwrap();
    assert!(ms.len() == 3 && ms.iter().all(|m| m.cursor == -1), "{ms:?}");
    // Phase `project`: they catch up, and follow new pages.
    app.store.set_setting("phase", "project").await.unwrap();
    sim.publish(300);
    let head = sim.head_id().unwrap();
    loop {
        let ms = projection::metas(&app.store).await.unwrap();
        if ms.len() == 3 && ms.iter().all(|m| m.cursor == head) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline + std::time::Duration::from_secs(30),
            "{ms:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    tx.send(true).unwrap();
    daemon.await.unwrap().unwrap();
}

/// The check a rebuild runs before its swap: a sample of a version recomputed from the
/// replica. Clean on a correct version; a version that differs is caught (and a rebuild
/// that meets one keeps the live version, `ProjectionError::VerifyFailed`).
#[tokio::test]
async fn a_version_is_verified_before_it_is_swapped_in() {
    for b in BOTH {
        let (_sim, _db, app, _g) = common::replica(b, 8_000, 33).await;
        let store = &app.store;
        catch_up_all(store, 2000).await;
        let ms = projection::metas(store).await.unwrap();
        for m in &ms {
            let r = projection::verify::verify_version(store, &m.name, m.version, m.cursor, 60)
                .await
                .unwrap();
            assert!(r.checked > 10, "{b:?} {}: {}", m.name, r.checked);
            assert!(r.clean(), "{b:?} {}: {:?}", m.name, r.differences);
        }
        // A version that is wrong everywhere (every case's document count changed).
        let cases = ms.iter().find(|m| m.name == "cases").unwrap();
        let mut tx = Tx::begin(store).await.unwrap();
        tx.exec(
            &format!(
                "UPDATE cases_v{} SET doc = replace(doc, '\"documents\":', '\"documents\":9')",
                cases.version
            ),
            &[],
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        let r = projection::verify::verify_version(store, "cases", cases.version, cases.cursor, 60)
            .await
            .unwrap();
        assert!(!r.clean(), "{b:?}: a wrong version is caught");
        // What a rebuild's error quotes: the case and the field, not the documents.
        for d in &r.differences {
            assert!(
                d.starts_with("cases INS ") && d.contains("documents: projection 9"),
                "{d}"
            );
            assert!(!d.contains("debtors") && !d.contains("\"name\""), "{d}");
        }
        // A rebuild still swaps in a correct version (its own check is clean).
        projection::rebuild(store, "cases", 2000).await.unwrap();
        assert!(
            projection::verify::verify(store, 50, None)
                .await
                .unwrap()
                .clean()
        );
    }
}

/// A rebuild's swap on PostgreSQL under a long reader (an export's snapshot), API reads
/// and the writer: the swap never queues the readers behind its exclusive locks (it
/// waits at most `SWAP_LOCK_WAIT` and tries again), and it lands once the long reader
/// is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_does_not_stall_readers_behind_a_long_export() {
    let (sim, _db, app, _g) = common::replica(Backend::Postgres, 8_000, 34).await;
    let store = app.store.clone();
    catch_up_all(&store, 2000).await;
    let before = projection::metas(&store).await.unwrap();
    let v0 = before.iter().find(|m| m.name == "cases").unwrap().version;
    // The long reader: an export's snapshot that has read `cases`.
    let mut export = Tx::begin_read(&store).await.unwrap();
    let n = export
        .int("SELECT COUNT(*) FROM cases", &[])
        .await
        .unwrap()
        .unwrap();
    assert!(n > 100);
    let rb = {
        let s = store.clone();
        tokio::spawn(async move { projection::rebuild(&s, "cases", 2000).await })
    };
    // Meanwhile the writer stores new pages, and readers read, for 8 s.
    sim.publish(2_000);
    app.poller().unwrap().poll_once().await;
    let mut slowest = std::time::Duration::ZERO;
    let until = std::time::Instant::now() + std::time::Duration::from_secs(8);
    let mut reads = 0;
    while std::time::Instant::now() < until {
        let t = std::time::Instant::now();
        let read = async {
            let mut tx = Tx::begin_read(&store).await.unwrap();
            tx.texts("SELECT doc FROM cases ORDER BY case_number LIMIT 5", &[])
                .await
                .unwrap();
            tx.commit().await.unwrap();
        };
        // A read stuck behind the swap would wait for the export (held by this test):
        // it fails here instead.
        tokio::time::timeout(std::time::Duration::from_secs(10), read)
            .await
            .expect("a read queued behind the swap's locks");
        slowest = slowest.max(t.elapsed());
        reads += 1;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(!rb.is_finished(), "the swap waits for the long reader");
    // Without the lock timeout a read queues behind the swap's pending lock until the
    // export ends (8 s and more); with it, at most about SWAP_LOCK_WAIT.
    assert!(
        slowest < projection::SWAP_LOCK_WAIT * 2,
        "a read waited {slowest:?} ({reads} reads)"
    );
    export.commit().await.unwrap();
    let m = rb.await.unwrap().unwrap();
    assert_eq!(m.version, v0 + 1, "swapped in once the long reader is done");
    catch_up_all(&store, 2000).await;
    assert!(
        projection::verify::verify(&store, 50, None)
            .await
            .unwrap()
            .clean()
    );
}

/// A rebuild on a SQLite file keeps its WAL near `projection.rebuild_wal_limit_mib`. Its
/// reader, one batch ahead of the writes, holds a snapshot nearly all the time, which
/// keeps SQLite from ever starting the WAL over by itself: the WAL then grows to the
/// size of everything the rebuild writes (9.4 GB for the parties of a million cases).
/// Here the same rebuilds run without a limit, then with one of 1 MiB; the WAL's peak
/// must fall well below the first (with a limit, what is left is mostly the one
/// transaction that builds the new version's indexes).
#[tokio::test]
async fn a_sqlite_rebuild_keeps_its_wal_bounded() {
    let (_sim, db, app, _g) = common::replica(Backend::Sqlite, 60_000, 41).await;
    let file = std::path::PathBuf::from(db.url.strip_prefix("sqlite://").unwrap());
    let wal = file.with_file_name("isir.db-wal");
    catch_up_all(&app.store, 5000).await;
    let incremental = dump(&app.store).await;
    assert!(incremental["cases"].len() > 1000);
    let mut peaks = Vec::new();
    for limit in [u64::MAX, 1 << 20] {
        // Each run starts from an empty WAL (a WAL file keeps its size when SQLite starts
        // it over).
        let c = rusqlite::Connection::open(&file).unwrap();
        let busy: i64 = c
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
            .unwrap();
        assert_eq!((busy, std::fs::metadata(&wal).unwrap().len()), (0, 0));
        drop(c);
        // The largest the WAL gets, sampled every millisecond on a thread of its own.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watcher = {
            let (stop, wal) = (stop.clone(), wal.clone());
            std::thread::spawn(move || {
                let mut max = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    max = max.max(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0));
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                max
            })
        };
        for n in projection::NAMES {
            projection::rebuild_with(&app.store, n, 1000, limit)
                .await
                .unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        peaks.push(watcher.join().unwrap());
        // The truncations lost nothing: the rebuilt projections equal those built step
        // by step.
        let rebuilt = dump(&app.store).await;
        for (k, v) in &incremental {
            assert_eq!(
                v, &rebuilt[k],
                "{k} after rebuilds with a WAL limit of {limit}"
            );
        }
    }
    let (free, limited) = (peaks[0], peaks[1]);
    eprintln!("the WAL's peak: {free} bytes without a limit, {limited} with 1 MiB");
    assert!(
        free > 24 << 20,
        "the rebuilds wrote too little to tell: {free}"
    );
    assert!(
        limited * 2 < free,
        "the WAL reached {limited} bytes with a limit of 1 MiB, {free} without"
    );
}

/// SQLite's full-text name index gains a segment with every transaction that writes to
/// it: built incrementally in small chunks it holds many, which a search reads one term
/// list each. The projector's periodic refresh merges them a bounded step at a time, and
/// a rebuild's new version is one segment before readers see it (FTS5's own `%_idx`
/// table says which segments hold terms).
#[tokio::test]
async fn the_sqlite_name_index_is_merged_periodically_and_one_segment_after_a_rebuild() {
    let (_sim, _db, app, _g) = common::replica(Backend::Sqlite, 12_000, 43).await;
    catch_up_all(&app.store, 200).await;
    let segments = |v: i64| {
        let store = app.store.clone();
        async move {
            count(
                &store,
                &format!("SELECT COUNT(DISTINCT segid) FROM names_v{v}_idx WHERE $1 = $1"),
                "x",
            )
            .await
        }
    };
    let before = segments(1).await;
    assert!(before > 3, "{before} segments after 60 chunks");
    projection::analyze_live(&app.store).await.unwrap();
    // (This index is smaller than one step's 500 pages: merged whole.)
    let after = segments(1).await;
    assert_eq!(after, 1, "{before} segments, then {after}");
    let m = projection::rebuild(&app.store, "parties", 300)
        .await
        .unwrap();
    assert_eq!(m.version, 2);
    assert_eq!(segments(2).await, 1, "the rebuilt index in one segment");
}

/// SQLite compiles a statement again whenever a value bound to a parameter compared
/// with an indexed column changes, where `ANALYZE` left value samples (`sqlite_stat4`;
/// `sqlite3_prepare_v2`'s documentation): every page of the feed or of a list would be
/// parsed and planned anew. The statistics the projector refreshes keep no samples, and
/// samples an earlier release left are dropped when the projections are opened; SQLite's
/// own counter of a statement's re-preparations says none happens.
#[tokio::test]
async fn sqlite_reads_are_prepared_once_whatever_their_values() {
    use isir::read::lists::{self, CaseQuery, EventQuery, Sort, Source};
    use isir::store::sql::Val;
    let (_sim, db, app, _g) = common::replica(Backend::Sqlite, 6_000, 45).await;
    catch_up_all(&app.store, 1_000).await;
    let path = db.url.strip_prefix("sqlite://").unwrap().to_string();
    let c = rusqlite::Connection::open(&path).unwrap();
    let one = |sql: &str| c.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
    let version = |name: &str| {
        one(&format!(
            "SELECT version FROM proj_meta WHERE name = '{name}'"
        ))
    };
    let (cases_v, timeline_v) = (version("cases"), version("timeline"));
    // Two values of each: feed positions and court + state pairs, from the data.
    let afters: Vec<i64> = {
        let mut s = c
            .prepare(&format!(
                "SELECT action_id FROM timeline_v{timeline_v} ORDER BY action_id LIMIT 2 OFFSET 100"
            ))
            .unwrap();
        s.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let pairs: Vec<(String, String)> = {
        let mut s = c
            .prepare(&format!(
                "SELECT court_short, state FROM cases_v{cases_v} WHERE court_short IS NOT NULL \
                 AND state IS NOT NULL GROUP BY 1, 2 ORDER BY COUNT(*) DESC LIMIT 2"
            ))
            .unwrap();
        s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    // The feed of a court (the two courts with most events): an equality on a column
    // of the walk's index, which samples would make SQLite compile again per value (a
    // position alone is the table's rowid range, which no sample ever concerns).
    let courts: Vec<String> = {
        let mut s = c
            .prepare(&format!(
                "SELECT court FROM timeline_v{timeline_v} WHERE court IS NOT NULL GROUP BY 1 \
                 ORDER BY COUNT(*) DESC LIMIT 2"
            ))
            .unwrap();
        s.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(
        (afters.len(), courts.len(), pairs.len()),
        (2, 2, 2),
        "values to read"
    );
    let feed = |(after, court): (i64, &String)| {
        let q = EventQuery {
            after,
            limit: 51,
            court: Some(court.clone()),
            ..Default::default()
        };
        lists::events(
            &q,
            &isir::read::queries::event_json_sql(false, true),
            &Source::Sqlite(timeline_v),
        )
        .unwrap()
    };
    let list = |(court, state): &(String, String)| {
        let q = CaseQuery {
            sort: Some(Sort::Latest),
            equal: vec![("court_short", court.clone()), ("state", state.clone())],
            limit: 51,
            ..CaseQuery::default()
        };
        lists::case_list(&q, &Source::Sqlite(cases_v)).unwrap()
    };
    // How often each statement was compiled again, run with its two values in turn.
    let reprepared = |c: &rusqlite::Connection| -> Vec<i32> {
        let mut out = Vec::new();
        for statements in [
            afters
                .iter()
                .zip(&courts)
                .map(|(a, c)| feed((*a, c)))
                .collect::<Vec<_>>(),
            pairs.iter().map(list).collect(),
        ] {
            let mut st = c.prepare(&statements[0].0).unwrap();
            for (sql, binds) in &statements {
                assert_eq!(sql, &statements[0].0, "one statement, other values");
                for (i, b) in binds.iter().enumerate() {
                    match b {
                        Val::I(v) => st.raw_bind_parameter(i + 1, v),
                        Val::T(v) => st.raw_bind_parameter(i + 1, v),
                        Val::B(v) => st.raw_bind_parameter(i + 1, v),
                        Val::Z(v) => st.raw_bind_parameter(i + 1, v),
                    }
                    .unwrap();
                }
                let mut rows = st.raw_query();
                let mut n = 0;
                while rows.next().unwrap().is_some() {
                    n += 1;
                }
                assert!(n > 0, "{sql}: no rows to read");
            }
            out.push(st.get_status(rusqlite::StatementStatus::RePrepare));
        }
        out
    };
    // The projector's refresh of the statistics.
    projection::analyze_live(&app.store).await.unwrap();
    assert!(
        one("SELECT COUNT(*) FROM sqlite_stat1") > 0,
        "statistics kept"
    );
    assert_eq!(one("SELECT COUNT(*) FROM sqlite_stat4"), 0, "no samples");
    let c2 = rusqlite::Connection::open(&path).unwrap();
    assert_eq!(reprepared(&c2), [0, 0], "feed and list, after the refresh");
    // Samples an earlier release left (an ANALYZE of every table) are dropped when the
    // projections are opened.
    c.execute_batch("ANALYZE").unwrap();
    assert!(
        one("SELECT COUNT(*) FROM sqlite_stat4") > 0,
        "samples taken"
    );
    let c3 = rusqlite::Connection::open(&path).unwrap();
    assert_eq!(
        reprepared(&c3),
        [2, 2],
        "with samples, each statement is compiled again for each of its two values"
    );
    projection::ensure_all(&app.store).await.unwrap();
    assert_eq!(
        one("SELECT COUNT(*) FROM sqlite_stat4"),
        0,
        "samples dropped"
    );
    let c4 = rusqlite::Connection::open(&path).unwrap();
    assert_eq!(reprepared(&c4), [0, 0], "feed and list, samples dropped");
}

/// The first action of each party (case, origin court, `idOsoby`) from the simulator's
/// records, as `case|court|person` -> action ID.
fn first_actions(recs: &[Record]) -> BTreeMap<String, i64> {
    let mut first = BTreeMap::new();
    for r in recs {
        let Note::Parsed(d) = &r.detail else { continue };
        let Some(p) = &d.person else { continue };
        first
            .entry(format!(
                "{}|{}|{}",
                r.action.case_number,
                d.origin.clone().unwrap_or_default(),
                p.id
            ))
            .or_insert(r.action.id);
    }
    first
}

/// A parties version made by the release before 2026-12-06: no `first_action_id`
/// column, and a `party_history_v1` table (one row per action naming a person, with
/// the person's block) that the watchlist feed took each party's first action from.
/// Opening the projections adds the column, filled from that table, and drops it with
/// its view; a rebuild's swap drops a history table a rebuild of that release left.
async fn a_parties_version_made_before_the_first_action_column(b: Backend) {
    let (sim, _db, app, _g) = common::replica(b, 6_000, 53).await;
    catch_up_all(&app.store, 5000).await;
    let recs = records(&sim);
    let exp = expectations(&recs);
    let first = first_actions(&recs);
    let store = &app.store;
    // The release before's form, its history table filled from the simulator's records
    // (every action naming a person of a party the version holds, in cases not erased).
    let keys = texts(
        store,
        "SELECT case_number || '|' || court || '|' || person_id FROM parties",
        &[],
    )
    .await;
    let mut tx = Tx::begin(store).await.unwrap();
    tx.exec("DROP VIEW parties", &[]).await.unwrap();
    // (Its documents whole, as that release stored them: no first action column, no
    // cells, no view of them.)
    tx.exec("DROP VIEW party_cells", &[]).await.unwrap();
    for stmt in [
        "CREATE TABLE parties_old (case_number TEXT NOT NULL, court TEXT NOT NULL, person_id TEXT NOT NULL, \
         role TEXT, kind TEXT, ico TEXT, rc TEXT, name_key TEXT, latest_action_id BIGINT NOT NULL, \
         doc TEXT NOT NULL, PRIMARY KEY (case_number, court, person_id))"
            .to_string(),
        format!(
            "INSERT INTO parties_old SELECT case_number, court, person_id, role, kind, ico, rc, name_key, \
             latest_action_id, {} FROM parties_v1",
            isir::readmodel::party_cells::doc_sql(b == Backend::Postgres, "")
        ),
        "DROP TABLE parties_v1".into(),
        "ALTER TABLE parties_old RENAME TO parties_v1".into(),
    ] {
        tx.exec(&stmt, &[]).await.unwrap();
    }
    tx.exec("CREATE VIEW parties AS SELECT * FROM parties_v1", &[])
        .await
        .unwrap();
    tx.exec(
        "CREATE TABLE party_history_v1 (case_number TEXT NOT NULL, court TEXT NOT NULL, person_id TEXT NOT NULL, \
         action_id BIGINT NOT NULL, person TEXT NOT NULL, PRIMARY KEY (case_number, court, person_id, action_id))",
        &[],
    )
    .await
    .unwrap();
    tx.exec(
        "CREATE VIEW party_history AS SELECT * FROM party_history_v1",
        &[],
    )
    .await
    .unwrap();
    let held: BTreeSet<&str> = keys.iter().map(String::as_str).collect();
    let mut rows = 0;
    for r in &recs {
        let Note::Parsed(d) = &r.detail else { continue };
        let Some(p) = &d.person else { continue };
        let court = d.origin.clone().unwrap_or_default();
        let key = format!("{}|{court}|{}", r.action.case_number, p.id);
        // (The parties of erased cases get no history rows: their first action comes
        // from their documents, as for a party whose history rows are missing.)
        if !held.contains(key.as_str()) || exp[&r.action.case_number].erased {
            continue;
        }
        tx.exec(
            "INSERT INTO party_history_v1 (case_number, court, person_id, action_id, person) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
            &[
                r.action.case_number.as_str().into(),
                court.as_str().into(),
                p.id.as_str().into(),
                r.action.id.into(),
                serde_json::to_string(p).unwrap().into(),
            ],
        )
        .await
        .unwrap();
        rows += 1;
    }
    tx.commit().await.unwrap();
    assert!(
        rows > keys.len() / 2,
        "{rows} history rows for {} parties",
        keys.len()
    );
    let tables = |like: &'static str| async move {
        texts(
            store,
            if b == Backend::Postgres {
                "SELECT relname::text FROM pg_class WHERE relname LIKE $1 AND relkind IN ('r', 'v') \
                 AND relnamespace = current_schema()::regnamespace ORDER BY 1"
            } else {
                "SELECT name FROM sqlite_master WHERE name LIKE $1 AND type IN ('table', 'view') ORDER BY 1"
            },
            &[like.into()],
        )
        .await
    };
    assert_eq!(tables("party_history%").await.len(), 2);

    projection::ensure(store, "parties").await.unwrap();
    assert!(tables("party_history%").await.is_empty());
    let got = texts(
        store,
        "SELECT case_number || '|' || court || '|' || person_id || '|' || CAST(first_action_id AS TEXT) FROM parties",
        &[],
    )
    .await;
    assert_eq!(got.len(), keys.len());
    let mut checked = 0;
    for row in &got {
        let (key, id) = row.rsplit_once('|').unwrap();
        if exp[key.split('|').next().unwrap()].erased {
            continue;
        }
        assert_eq!(
            first.get(key).map(|f| f.to_string()).as_deref(),
            Some(id),
            "{key}"
        );
        checked += 1;
    }
    assert!(checked > 100, "{checked}");
    // Opened again: nothing to do, the same rows.
    let before = dump(store).await;
    projection::ensure(store, "parties").await.unwrap();
    assert_eq!(dump(store).await, before);
    // New actions are applied to the upgraded version.
    projection::catch_up(store, "parties", 5000).await.unwrap();

    // A rebuild of the release before left its next version's history table: the
    // rebuild makes its version without it, and its swap leaves none.
    let mut tx = Tx::begin(store).await.unwrap();
    tx.exec(
        "CREATE TABLE party_history_v2 (case_number TEXT NOT NULL, court TEXT NOT NULL, person_id TEXT NOT NULL, \
         action_id BIGINT NOT NULL, person TEXT NOT NULL)",
        &[],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let m = projection::rebuild(store, "parties", 1000).await.unwrap();
    assert_eq!(m.version, 2);
    assert!(tables("party_history%").await.is_empty());
    assert_eq!(
        dump(store).await,
        before,
        "the rebuild equals the upgraded version"
    );
}

#[tokio::test]
async fn a_parties_version_made_before_the_first_action_column_sqlite() {
    a_parties_version_made_before_the_first_action_column(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_parties_version_made_before_the_first_action_column_postgres() {
    a_parties_version_made_before_the_first_action_column(Backend::Postgres).await;
}
