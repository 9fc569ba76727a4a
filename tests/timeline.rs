//! The timeline's short cells (`readmodel::TimelineCells`), on both back ends: a type
//! name equal to the source's and the register's document links are stored short, and
//! everything that reads the timeline (its view, the SQLite lists' table, the JSON of
//! the API and the events export) gets them whole, equal to the simulator's truth; a
//! version an earlier release made (whole cells, `type_name NOT NULL`) is upgraded in
//! place and keeps serving the same.

mod common;

use std::collections::BTreeMap;

use common::{Backend, dump, texts};
use isir::projection;
use isir::readmodel::Event;
use isir::readmodel::columns::event_json_sql;
use isir::source::Action;
use isir::store::Store;
use isir::store::sql::Tx;

/// The register's link prefix, written out here (PROTOCOL.md, the fixtures), not taken
/// from the code under test.
const PREFIX: &str = "https://isir.justice.cz:8443/isir_public_ws/doc/Document?idDokument=";

/// The events of `from` (the view, or on SQLite a version's table) as their JSON says.
async fn served(store: &Store, from: &str) -> BTreeMap<i64, Event> {
    let pg = Tx::begin(store).await.unwrap().is_postgres();
    let sql = format!(
        "SELECT {} FROM {from} ORDER BY action_id",
        event_json_sql(pg, from != "timeline")
    );
    texts(store, &sql, &[])
        .await
        .iter()
        .map(|j| {
            let e: Event = serde_json::from_str(j).unwrap();
            (e.action_id, e)
        })
        .collect()
}

async fn catch_up_all(store: &Store) {
    for name in projection::NAMES {
        projection::catch_up(store, name, 1000).await.unwrap();
    }
}

/// The number `sql` counts.
async fn n(store: &Store, sql: &str) -> i64 {
    texts(store, &format!("SELECT CAST(({sql}) AS TEXT)"), &[]).await[0]
        .parse()
        .unwrap()
}

/// Every action of `truth` but the code list's is served with its published name and
/// link, byte for byte; the name served is the code list's, which for the seeded
/// codes the simulator uses is the published one.
fn assert_served(got: &BTreeMap<i64, Event>, truth: &[Action], what: &str) {
    let want: Vec<&Action> = truth
        .iter()
        .filter(|a| a.case_number != "INS -1/-1")
        .collect();
    assert_eq!(got.len(), want.len(), "{what}: events");
    let mut links = 0;
    for a in want {
        let e = &got[&a.id];
        assert_eq!(e.case_number, a.case_number, "{what} {}", a.id);
        assert_eq!(e.type_code, a.type_code, "{what} {}", a.id);
        assert_eq!(e.source_type_name, a.type_name, "{what} {}", a.id);
        assert_eq!(e.document_url, a.document_url, "{what} {}", a.id);
        assert_eq!(e.published, a.published, "{what} {}", a.id);
        assert_eq!(e.created, a.created, "{what} {}", a.id);
        assert_eq!(e.section, a.section, "{what} {}", a.id);
        assert_eq!(e.number_in_section, a.number_in_section, "{what} {}", a.id);
        if let Some(seeded) = isir::codes::event_type_name(&a.type_code) {
            assert_eq!(e.type_name, seeded, "{what} {}", a.id);
        }
        links += usize::from(a.document_url.is_some());
    }
    assert!(links > got.len() / 4, "{what}: {links} links");
}

/// `/v1/events` of the read API over `store`, page after page: each event's
/// `type_name` and `document_url` by action ID (on SQLite the lists read the table).
async fn api_events(store: &Store) -> BTreeMap<i64, (String, String)> {
    store.set_setting("phase", "serve").await.unwrap();
    let opts = isir::read::ReadOptions {
        rate_per_second: 10_000,
        burst: 10_000,
        ..Default::default()
    };
    let (base, _stop) = common::serve_api(isir::read::ReadState::new(store.clone(), opts)).await;
    let http = reqwest::Client::new();
    let mut out = BTreeMap::new();
    let mut path = "/v1/events?limit=1000".to_string();
    loop {
        let r = http.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let body: serde_json::Value = r.json().await.unwrap();
        for e in body["events"].as_array().unwrap() {
            out.insert(
                e["action_id"].as_i64().unwrap(),
                (
                    e["type_name"].as_str().unwrap().to_string(),
                    e["document_url"].as_str().unwrap_or_default().to_string(),
                ),
            );
        }
        match body["next"].as_str() {
            Some(n) => path = n.to_string(),
            None => return out,
        }
    }
}

/// The events export's `type_name` and `document_url` cells by action ID.
async fn exported(store: &Store) -> BTreeMap<i64, (String, String)> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x");
    let mut o = common::export_opts(&out);
    o.tables = vec![isir::export::Table::Events];
    isir::export::export(store, &o).await.unwrap();
    let text = std::fs::read_to_string(out.join("events.csv")).unwrap();
    let mut r = csv::Reader::from_reader(text.as_bytes());
    let h = r.headers().unwrap().clone();
    let col = |n: &str| h.iter().position(|c| c == n).unwrap();
    let (id, name, url) = (col("action_id"), col("type_name"), col("document_url"));
    r.records()
        .map(|x| {
            let x = x.unwrap();
            (
                x[id].parse().unwrap(),
                (x[name].to_string(), x[url].to_string()),
            )
        })
        .collect()
}

fn assert_exported(got: &BTreeMap<i64, (String, String)>, events: &BTreeMap<i64, Event>) {
    assert_eq!(got.len(), events.len());
    for (id, e) in events {
        let want = (
            e.type_name.clone(),
            e.document_url.clone().unwrap_or_default(),
        );
        assert_eq!(got[id], want, "exported event {id}");
    }
}

async fn short_cells_are_stored_and_served_whole(b: Backend) {
    let (sim, _db, app, _g) = common::replica(b, 4_000, 71).await;
    let store = &app.store;
    catch_up_all(store).await;
    let truth: Vec<Action> = sim.truth_models().into_iter().map(|(a, _)| a).collect();
    let view = served(store, "timeline").await;
    assert_served(&view, &truth, "view");
    if b == Backend::Sqlite {
        // The lists read the table itself on SQLite.
        assert_eq!(served(store, "timeline_v1").await, view, "table");
    }
    assert_exported(&exported(store).await, &view);
    assert_exported(&api_events(store).await, &view);
    // Stored short: no link whole (every one the simulator makes has the prefix), its
    // ID instead; a type name only where it is not the published one.
    let linked = truth.iter().filter(|a| a.document_url.is_some()).count() as i64;
    assert_eq!(
        n(
            store,
            "SELECT COUNT(*) FROM timeline_v1 WHERE document_url IS NOT NULL"
        )
        .await,
        0
    );
    assert_eq!(
        n(
            store,
            "SELECT COUNT(*) FROM timeline_v1 WHERE document_id IS NOT NULL"
        )
        .await,
        linked
    );
    assert_eq!(
        n(
            store,
            "SELECT COUNT(*) FROM timeline_v1 WHERE type_name IS NOT NULL"
        )
        .await,
        0
    );
    // A rebuild stores and serves the same.
    let before = dump(store).await;
    let m = projection::rebuild(store, "timeline", 700).await.unwrap();
    assert_eq!(m.version, 2);
    assert_eq!(dump(store).await, before);
    assert_eq!(served(store, "timeline").await, view);

    // Links and names of other streams: without the prefix, the prefix alone, an ID
    // with characters a link may hold, a name not the published one, on a fresh store.
    let db = common::fresh_db(b).await;
    let store = common::store(&db).await;
    let e = store.register_epoch(1).await.unwrap();
    let odd = [
        (
            Some("http://example.org/doc?id=1"),
            "5",
            "Zveřejnění vyhlášky",
        ),
        (Some(PREFIX), "5", "něco"),
        (Some(&*format!("{PREFIX}12|a'b%20\"c")), "9999", "nový typ"),
        (
            Some(&*format!(
                "https://isir.justice.cz:8443/isir_public_ws/doc/Document?id={PREFIX}"
            )),
            "1",
            "x",
        ),
        (None, "1", ""),
    ];
    let acts: Vec<Action> = odd
        .iter()
        .enumerate()
        .map(|(i, (url, code, name))| Action {
            id: 100 + i as i64,
            created: "2026-03-02T09:14:05.000+01:00".into(),
            published: "2026-03-02T09:20:11.000+01:00".into(),
            document_url: url.map(str::to_string),
            case_number: "INS 7/2026".into(),
            type_code: code.to_string(),
            type_name: name.to_string(),
            section: None,
            number_in_section: None,
            note: None,
        })
        .collect();
    let refs: Vec<&Action> = acts.iter().collect();
    store.write_actions(e, None, -1, &refs).await.unwrap();
    catch_up_all(&store).await;
    let got = served(&store, "timeline").await;
    for a in &acts {
        let g = &got[&a.id];
        assert_eq!(g.document_url, a.document_url, "{}", a.id);
        assert_eq!(g.source_type_name, a.type_name, "{}", a.id);
        let name = isir::codes::event_type_name(&a.type_code).unwrap_or(&a.type_name);
        assert_eq!(g.type_name, name, "{}", a.id);
    }
    assert_exported(&exported(&store).await, &got);
    assert_exported(&api_events(&store).await, &got);
    assert_eq!(
        n(
            &store,
            "SELECT COUNT(*) FROM timeline_v1 WHERE document_url IS NOT NULL"
        )
        .await,
        2,
        "the links without the prefix are stored whole"
    );
}

#[tokio::test]
async fn short_cells_are_stored_and_served_whole_sqlite() {
    short_cells_are_stored_and_served_whole(Backend::Sqlite).await;
}

#[tokio::test]
async fn short_cells_are_stored_and_served_whole_postgres() {
    short_cells_are_stored_and_served_whole(Backend::Postgres).await;
}

/// A timeline version the release before 2026-12-06 made: whole type names (`NOT
/// NULL`) and links, no `document_id`, the view `SELECT *`. Opening it adds the column
/// and remakes the view; the actions applied after are stored short (on SQLite the
/// names stay whole: the constraint stays until a rebuild); every event is served as
/// before, and a rebuild serves the same.
async fn a_timeline_version_made_before_the_short_cells(b: Backend) {
    let (sim, _db, app, _g) = common::replica(b, 4_000, 72).await;
    let store = &app.store;
    catch_up_all(store).await;
    let truth: Vec<Action> = sim.truth_models().into_iter().map(|(a, _)| a).collect();
    let half = truth[truth.len() / 2].id;
    // The earlier form, holding the first half of the stream whole; the cursor there.
    let boolean = if b == Backend::Postgres {
        "BOOLEAN"
    } else {
        "INTEGER"
    };
    let key = if b == Backend::Postgres {
        "BIGINT"
    } else {
        "INTEGER"
    };
    let mut tx = Tx::begin(store).await.unwrap();
    for stmt in [
        "DROP VIEW timeline".to_string(),
        format!(
            "CREATE TABLE timeline_old (action_id {key} PRIMARY KEY, case_number TEXT NOT NULL, court TEXT, \
             type_code TEXT NOT NULL, type_name TEXT NOT NULL, source_type_name TEXT NOT NULL, section TEXT, \
             number_in_section BIGINT, document_url TEXT, published TEXT NOT NULL, created TEXT NOT NULL, \
             slot_action_id BIGINT, secondary_action {boolean} NOT NULL, secondary_document {boolean} NOT NULL, \
             legal_force_date TEXT, corrected_published TEXT, annulled TEXT)"
        ),
        format!(
            "INSERT INTO timeline_old SELECT action_id, case_number, court, type_code, COALESCE(type_name, source_type_name), \
             source_type_name, section, number_in_section, COALESCE(document_url, '{PREFIX}' || document_id), published, created, \
             slot_action_id, secondary_action, secondary_document, legal_force_date, corrected_published, annulled \
             FROM timeline_v1 WHERE action_id <= {half}"
        ),
        "DROP TABLE timeline_v1".into(),
        "ALTER TABLE timeline_old RENAME TO timeline_v1".into(),
        "CREATE INDEX timeline_v1_case ON timeline_v1 (case_number, action_id)".into(),
        "CREATE VIEW timeline AS SELECT * FROM timeline_v1".into(),
        format!("UPDATE proj_meta SET cursor = {half} WHERE name = 'timeline'"),
    ] {
        tx.exec(&stmt, &[]).await.unwrap();
    }
    tx.commit().await.unwrap();
    let old = served(store, "timeline").await;
    // Read before the projector opens the projections (a read-only `isir serve`, or the
    // API before the projector's first round): whole, as stored.
    assert_exported(&api_events(store).await, &old);
    assert_eq!(
        old.len(),
        truth
            .iter()
            .filter(|a| a.id <= half && a.case_number != "INS -1/-1")
            .count()
    );

    projection::ensure(store, "timeline").await.unwrap();
    projection::catch_up(store, "timeline", 1000).await.unwrap();
    let view = served(store, "timeline").await;
    assert_served(&view, &truth, "upgraded view");
    for (id, e) in &old {
        assert_eq!(&view[id], e, "an event stored before the upgrade");
    }
    if b == Backend::Sqlite {
        assert_eq!(served(store, "timeline_v1").await, view, "table");
    }
    assert_exported(&exported(store).await, &view);
    assert_exported(&api_events(store).await, &view);
    // The actions applied after the upgrade are stored short; those before kept whole.
    assert_eq!(
        n(store, &format!("SELECT COUNT(*) FROM timeline_v1 WHERE action_id > {half} AND document_url IS NOT NULL")).await,
        0
    );
    assert!(
        n(store, &format!(
            "SELECT COUNT(*) FROM timeline_v1 WHERE action_id > {half} AND document_id IS NOT NULL"
        ))
        .await
            > 100
    );
    assert_eq!(
        n(store, &format!(
            "SELECT COUNT(*) FROM timeline_v1 WHERE action_id <= {half} AND document_id IS NOT NULL"
        ))
        .await,
        0
    );
    let named = n(
        store,
        &format!(
            "SELECT COUNT(*) FROM timeline_v1 WHERE action_id > {half} AND type_name IS NOT NULL"
        ),
    )
    .await;
    if b == Backend::Postgres {
        assert_eq!(named, 0, "names stored short once the column allows it");
    } else {
        assert!(
            named > 100,
            "names stored whole while the column requires them"
        );
    }
    // Opened again: nothing to do.
    let before = dump(store).await;
    projection::ensure(store, "timeline").await.unwrap();
    assert_eq!(dump(store).await, before);
    // A rebuild makes the new form and serves the same.
    let m = projection::rebuild(store, "timeline", 1000).await.unwrap();
    assert_eq!(m.version, 2);
    assert_eq!(dump(store).await, before);
    assert_eq!(served(store, "timeline").await, view);
    assert_eq!(
        n(
            store,
            "SELECT COUNT(*) FROM timeline_v2 WHERE type_name IS NOT NULL"
        )
        .await,
        0
    );
}

#[tokio::test]
async fn a_timeline_version_made_before_the_short_cells_sqlite() {
    a_timeline_version_made_before_the_short_cells(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_timeline_version_made_before_the_short_cells_postgres() {
    a_timeline_version_made_before_the_short_cells(Backend::Postgres).await;
}
