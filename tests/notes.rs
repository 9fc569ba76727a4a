//! Notes at rest (`store::notes`, issue 37): each action's `poznamka` compressed with
//! zstd dictionaries trained on the replica's own notes, read back byte for byte.
//! Expectations come from the simulator's truth (`truth_all`), never from the functions
//! under test; the previous release's replica is made by its own migrations and its own
//! INSERT statement.

mod common;

use common::Backend;
use isir::store::notes;

/// Polls a fresh replica on `b` to the head of `n` simulated actions.
async fn polled(
    b: Backend,
    n: usize,
    seed: u64,
) -> (
    isir::sim::Simulator,
    isir::sim::SimGuard,
    common::TestDb,
    isir::app::App,
) {
    let (sim, url, g) = common::sim(n, 1000, seed).await;
    let db = common::fresh_db(b).await;
    let mut s = common::settings(&url, &db);
    s.poll.max_batches_per_tick = 1000;
    let app = common::app(s).await;
    let t = app.poller().unwrap().poll_once().await;
    assert_eq!(t.checkpoint, sim.head_id());
    (sim, g, db, app)
}

/// Rows whose note is compressed with the dictionary of `version`.
async fn rows_of_version(store: &isir::store::Store, version: i64) -> i64 {
    common::count(
        store,
        &format!(
            "SELECT COUNT(*) FROM actions a JOIN note_dicts d ON d.id = a.note_dict \
             WHERE d.version = {version} AND a.note_z IS NOT NULL AND a.note IS NULL AND a.case_number <> $1"
        ),
        "",
    )
    .await
}

async fn every_note_round_trips(b: Backend) {
    let (sim, _g, _db, app) = polled(b, 25_000, 71).await;
    let truth = sim.truth_all();
    let with_notes = truth.iter().filter(|a| a.note.is_some()).count();
    assert!(with_notes > notes::SAMPLES_MAX, "{with_notes} notes");
    // Read as a new process would: every dictionary loaded from the store.
    notes::forget_loaded();
    let got = common::all_actions(&app.store).await;
    assert_eq!(got.len(), truth.len());
    for (g, t) in got.iter().zip(&truth) {
        assert_eq!(g, t, "action {} as stored", t.id);
    }
    // Two automatic dictionaries: the first at SAMPLES_FIRST notes, the second at
    // SAMPLES_MAX, each compressing the rows stored after it; the rows before the
    // first stay text.
    let dicts = common::texts(
        &app.store,
        "SELECT CAST(version AS TEXT) || ' ' || CAST(samples AS TEXT) FROM note_dicts ORDER BY version",
        &[],
    )
    .await;
    assert_eq!(
        dicts,
        vec![
            format!("1 {}", notes::SAMPLES_FIRST),
            format!("2 {}", notes::SAMPLES_MAX)
        ]
    );
    let (v1, v2) = (
        rows_of_version(&app.store, 1).await,
        rows_of_version(&app.store, 2).await,
    );
    assert!(
        v1 > 1_000 && v2 > 10_000,
        "{v1} rows of version 1, {v2} of 2"
    );
    let text = common::count(
        &app.store,
        "SELECT COUNT(*) FROM actions WHERE note IS NOT NULL AND case_number <> $1",
        "",
    )
    .await;
    assert!(
        text >= notes::SAMPLES_FIRST as i64 && text < 2_500,
        "{text} notes as text"
    );
    // A row is text or compressed, never both, and a compressed one names its dictionary.
    assert_eq!(
        common::count(
            &app.store,
            "SELECT COUNT(*) FROM actions WHERE ((note IS NOT NULL AND note_z IS NOT NULL) \
             OR (note_z IS NULL) <> (note_dict IS NULL)) AND case_number <> $1",
            "",
        )
        .await,
        0
    );
    // Every note holding an erasure mark is text, where the erasure candidates' SQL
    // finds it: as many as the truth holds.
    let marked = truth
        .iter()
        .filter(|a| {
            a.note
                .as_deref()
                .is_some_and(|n| n.contains("datumVyskrtnuti"))
        })
        .count();
    assert!(marked > 0, "the stream strikes out cases");
    assert_eq!(
        common::count(
            &app.store,
            "SELECT COUNT(*) FROM actions WHERE note LIKE $1",
            "%datumVyskrtnuti%"
        )
        .await,
        marked as i64
    );
    // No debtor's data in any dictionary (trained on the notes as erasure redacts
    // them): the truth's debtors' birth numbers and dates of birth.
    let hexes = common::texts(
        &app.store,
        if matches!(b, Backend::Postgres) {
            "SELECT encode(bytes, 'hex') FROM note_dicts"
        } else {
            "SELECT hex(bytes) FROM note_dicts"
        },
        &[],
    )
    .await;
    let all: Vec<Vec<u8>> = hexes.iter().map(|h| hex::decode(h).unwrap()).collect();
    let mut checked = 0;
    for d in sim.truth_debtors() {
        for v in [d.person.birth_number, d.person.birth_date]
            .into_iter()
            .flatten()
        {
            checked += 1;
            assert!(
                !all.iter()
                    .any(|b| b.windows(v.len()).any(|w| w == v.as_bytes())),
                "{b:?}: a debtor's {v} in a dictionary"
            );
        }
    }
    assert!(checked > 1_000, "{checked} debtor values checked");
    // Smaller: the compressed rows' frames against their notes' text in the truth.
    let ids = common::texts(
        &app.store,
        "SELECT CAST(id AS TEXT) || ' ' || CAST(length(note_z) AS TEXT) FROM actions WHERE note_z IS NOT NULL",
        &[],
    )
    .await;
    let by_id: std::collections::HashMap<i64, usize> = truth
        .iter()
        .map(|a| (a.id, a.note.as_ref().map_or(0, |n| n.len())))
        .collect();
    let (mut raw, mut packed) = (0usize, 0usize);
    for r in &ids {
        let (id, len) = r.split_once(' ').unwrap();
        raw += by_id[&id.parse::<i64>().unwrap()];
        packed += len.parse::<usize>().unwrap();
    }
    assert!(
        packed * 5 < raw,
        "the compressed notes: {raw} bytes of text in {packed}"
    );
    // The projections build from the compressed replica and verify against it.
    for n in isir::projection::NAMES {
        isir::projection::rebuild(&app.store, n, 5000)
            .await
            .unwrap();
    }
    notes::forget_loaded();
    let rep = isir::projection::verify::verify(&app.store, 300, None)
        .await
        .unwrap();
    assert_eq!(rep.checked, 300);
    assert!(rep.clean(), "{:?}", rep.differences);
}

#[tokio::test]
async fn every_note_round_trips_sqlite() {
    every_note_round_trips(Backend::Sqlite).await;
}

#[tokio::test]
async fn every_note_round_trips_postgres() {
    every_note_round_trips(Backend::Postgres).await;
}

/// The previous release's replica: its migrations (every one before the notes' own),
/// its INSERT of the source's fields as text. The new release opens it, reads it as it
/// was, and polls on into it, compressing from then on.
async fn the_previous_release_is_read(b: Backend) {
    let (sim, url, _g) = common::sim(6_000, 1000, 72).await;
    let truth = sim.truth_all();
    let db = common::fresh_db(b).await;
    let before = 3_000;
    // The previous release's schema: its own migration files, every one before the
    // notes' (`sqlx::migrate!` limited to them); its rows written as it wrote them.
    let store = isir::store::Store::connect(&db.url, 2).await.unwrap();
    macro_rules! previous_migrations {
        ($pool:expr, $dir:literal, $last:expr) => {{
            let mut m = sqlx::migrate!($dir);
            m.migrations = m
                .migrations
                .iter()
                .filter(|x| x.version <= $last)
                .cloned()
                .collect::<Vec<_>>()
                .into();
            m.run($pool).await.unwrap();
        }};
    }
    match &store {
        isir::store::Store::Sqlite(p) => previous_migrations!(p, "migrations/sqlite", 6),
        isir::store::Store::Postgres(p) => previous_migrations!(p, "migrations/postgres", 5),
    }
    common::write_as_previous_release(&store, &truth[..before]).await;
    store.close().await;
    let mut s = common::settings(&url, &db);
    s.poll.max_batches_per_tick = 1000;
    let app = common::app(s).await;
    notes::forget_loaded();
    assert_eq!(
        common::all_actions(&app.store).await,
        truth[..before].to_vec(),
        "the previous release's rows read as they were"
    );
    let t = app.poller().unwrap().poll_once().await;
    assert_eq!(t.checkpoint, sim.head_id());
    notes::forget_loaded();
    assert_eq!(
        common::all_actions(&app.store).await,
        truth,
        "old rows and new"
    );
    // The first dictionary was trained on the previous release's notes, and compresses
    // what came after them.
    assert!(rows_of_version(&app.store, 1).await > 2_000);
    assert_eq!(
        common::count(
            &app.store,
            "SELECT COUNT(*) FROM actions WHERE note_z IS NOT NULL AND id <= CAST($1 AS BIGINT)",
            &truth[before - 1].id.to_string()
        )
        .await,
        0,
        "old rows are left as they are"
    );
}

#[tokio::test]
async fn the_previous_release_is_read_sqlite() {
    the_previous_release_is_read(Backend::Sqlite).await;
}

#[tokio::test]
async fn the_previous_release_is_read_postgres() {
    the_previous_release_is_read(Backend::Postgres).await;
}

/// A damaged frame is an error that names the action, never a note that differs.
#[tokio::test]
async fn a_damaged_note_is_an_error_naming_its_action() {
    let (sim, _g, _db, app) = polled(Backend::Sqlite, 3_000, 73).await;
    let victim = sim
        .truth_all()
        .into_iter()
        .rev()
        .find(|a| {
            a.note
                .as_deref()
                .is_some_and(|n| !n.contains("datumVyskrtnuti"))
        })
        .unwrap();
    // One byte of the frame's middle flipped (the frame's checksum catches it).
    let hex = common::texts(
        &app.store,
        "SELECT hex(note_z) FROM actions WHERE id = $1 AND note_z IS NOT NULL",
        &[victim.id.into()],
    )
    .await;
    assert_eq!(hex.len(), 1, "the last note is compressed");
    let mut z = hex::decode(&hex[0]).unwrap();
    let mid = z.len() / 2;
    z[mid] ^= 0x20;
    let mut tx = isir::store::sql::Tx::begin(&app.store).await.unwrap();
    tx.exec(
        "UPDATE actions SET note_z = $1 WHERE id = $2",
        &[isir::store::sql::Val::Z(Some(z)), victim.id.into()],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let e = app
        .store
        .actions_after(victim.id - 1, 1)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains(&victim.id.to_string()), "{e}");
}

/// A dictionary is added only by the writer whose epoch the store holds: a stale
/// holder's is refused as fenced and adds nothing; the holder's is the first version.
#[tokio::test]
async fn a_stale_writer_adds_no_dictionary() {
    use isir::source::parse::parse_data_response;
    use isir::source::write::data_response;
    let sim = isir::sim::Simulator::new(isir::sim::SimOptions {
        actions: 2_000,
        ..Default::default()
    });
    for b in common::BOTH {
        let db = common::fresh_db(b).await;
        let store = common::store(&db).await;
        // Pages stored without the poller's dictionary check: notes as text, enough of
        // them for the first dictionary.
        let e = store.register_epoch(1).await.unwrap();
        let xml = data_response(&sim.truth_after(-1, 2_000));
        let page = parse_data_response(xml.as_bytes(), -1).unwrap();
        store.write_page(e, None, &page).await.unwrap();
        store.register_epoch(e + 1).await.unwrap();
        match notes::tend(&store, e).await {
            Err(isir::store::StoreError::Fenced { mine, current }) => {
                assert_eq!((mine, current), (e, e + 1), "{b:?}")
            }
            other => panic!("{b:?}: a stale writer's dictionary: {other:?}"),
        }
        let none =
            common::count(&store, "SELECT COUNT(*) FROM note_dicts WHERE $1 = $1", "x").await;
        assert_eq!(none, 0, "{b:?}");
        assert_eq!(notes::tend(&store, e + 1).await.unwrap(), Some(1), "{b:?}");
        // Not due again until SAMPLES_MAX notes are stored.
        assert_eq!(notes::tend(&store, e + 1).await.unwrap(), None, "{b:?}");
    }
}
