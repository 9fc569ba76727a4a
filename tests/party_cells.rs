//! The parties' documents stored as cells (`readmodel::party_cells`), on both back ends:
//! every reader (the view, built in SQL; the API's readers, which put the cells together
//! in Rust: subjects, name search, a case's parties) gets each
//! document byte for byte as `serde_json` writes the person, which is how the releases
//! before stored it, for persons written by hand here (every element of a person block,
//! and values a document's quoting could trip on); a version an earlier release made
//! (whole documents, `doc NOT NULL`) is upgraded in place and keeps serving the same.

mod common;

use common::{Backend, dump, texts};
use isir::projection;
use isir::readmodel::PartyDoc;
use isir::source::Action;
use isir::source::model::Address;
use isir::store::Store;
use isir::store::sql::Tx;

fn s(v: &str) -> Option<String> {
    Some(v.to_string())
}

/// A person note (`<osoba>` of `person`, elements as the register writes them).
fn note(court: &str, person: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?><ns2:udalost xmlns:ns2=\"http://www.cca.cz/isir/poznamka\" \
         verzeXsd=\"1_10\"><idOsobyPuvodce>{court}</idOsobyPuvodce><osoba>{person}</osoba>\
         <priznakAnVedlejsiUdalost>F</priznakAnVedlejsiUdalost></ns2:udalost>"
    )
}

fn action(id: i64, case: &str, note: String) -> Action {
    Action {
        id,
        created: "2026-03-02T09:14:05.000+01:00".into(),
        published: "2026-03-02T09:20:11.000+01:00".into(),
        document_url: None,
        case_number: case.into(),
        type_code: "1".into(),
        type_name: "Změna osoby".into(),
        section: None,
        number_in_section: None,
        note: Some(note),
    }
}

/// The hand-written persons, and the documents they make, written out field by field.
fn persons() -> (Vec<Action>, Vec<PartyDoc>) {
    let every = std::fs::read_to_string("tests/fixtures/notes/person-every-element.xml").unwrap();
    let every_doc = PartyDoc {
        case_number: "INS 7/2026".into(),
        court: "KSOSCOS".into(),
        person_id: "ŘEHOŘOVÁ ŽOFIE 2103  1".into(),
        role: s("DLUŽNÍK"),
        administrator_kind: s("INSOLV. SP"),
        kind: s("PODNIKATEL"),
        name: s("Řehořová"),
        trade_name: s("Kadeřnictví Žofie <U Lípy>"),
        first_name: s("Žofie"),
        title_before: s("Ing."),
        title_after: s("Ph.D."),
        legal_form: s("FO podnik."),
        ico: s("0123456789"),
        dic: s("CZ7551034567"),
        birth_number: s("755103/456"),
        birth_date: s("1975-01-03+01:00"),
        addresses: vec![
            Address {
                kind: s("TRVALÁ"),
                valid_from: s("2001-09-01+02:00"),
                valid_to: s("2026-02-28+01:00"),
                city: s("Frýdek-Místek"),
                street: s("Třída T. G. Masaryka"),
                house_number: s("1142/7a"),
                district: s("Frýdek-Místek"),
                country: s("CZE"),
                postcode: s("738 01"),
                phone: s("+420 558 000 111"),
                fax: s("558 000 112"),
                text: s("vchod ze dvora"),
                id: s("31337"),
            },
            Address {
                kind: s("E-MAIL"),
                text: s("zofie@example.cz"),
                ..Default::default()
            },
        ],
        left_case: s("2026-08-14+02:00"),
        first_action_id: 101,
        latest_action_id: 101,
    };
    // Quotes, backslashes, a tab, a key's text and the cells' control characters'
    // look-alikes in values; an IČO and a birth number other than their search keys.
    let odd = note(
        "KSPHAPH",
        "<idOsoby>\"Q\\ 1</idOsoby><druhRoleVRizeni>VĚŘITEL</druhRoleVRizeni>\
         <nazevOsoby>Kovář \"a\" syn\\ &amp; spol.&#9;s r.o.</nazevOsoby><druhOsoby>P</druhOsoby>\
         <ic>123 45 678</ic><rc>7551034567</rc>\
         <adresa><druhAdresy>\"city\":null</druhAdresy><mesto>\\u0001 \"id\":</mesto><ulice>x\\</ulice></adresa>\
         <adresa><druhAdresy>E-MAIL</druhAdresy><mesto>a&#10;b&#13;c&#9;d</mesto></adresa>",
    );
    let odd_doc = PartyDoc {
        case_number: "INS 8/2026".into(),
        court: "KSPHAPH".into(),
        person_id: "\"Q\\ 1".into(),
        role: s("VĚŘITEL"),
        kind: s("P"),
        name: s("Kovář \"a\" syn\\ & spol.\ts r.o."),
        ico: s("123 45 678"),
        birth_number: s("7551034567"),
        addresses: vec![
            Address {
                kind: s("\"city\":null"),
                city: s("\\u0001 \"id\":"),
                street: s("x\\"),
                ..Default::default()
            },
            Address {
                kind: s("E-MAIL"),
                city: s("a\nb\rc\td"),
                ..Default::default()
            },
        ],
        first_action_id: 102,
        latest_action_id: 103,
        ..Default::default()
    };
    // A person without addresses, named again later: the latest values win.
    let plain = |name: &str| {
        note(
            "KSPHAPH",
            &format!(
                "<idOsoby>PLAIN 1</idOsoby><druhRoleVRizeni>SPRÁVCE</druhRoleVRizeni><nazevOsoby>{name}</nazevOsoby>\
                 <druhOsoby>F</druhOsoby><ic>87654321</ic>"
            ),
        )
    };
    let plain_doc = PartyDoc {
        case_number: "INS 8/2026".into(),
        court: "KSPHAPH".into(),
        person_id: "PLAIN 1".into(),
        role: s("SPRÁVCE"),
        kind: s("F"),
        name: s("Druhý 🦀"),
        ico: s("87654321"),
        first_action_id: 104,
        latest_action_id: 105,
        ..Default::default()
    };
    let odd_again = odd.replace("<adresa>", "<titulPred>JUDr.</titulPred><adresa>");
    let mut odd_doc = odd_doc;
    odd_doc.title_before = s("JUDr.");
    let actions = vec![
        action(101, "INS 7/2026", every),
        action(102, "INS 8/2026", odd),
        action(103, "INS 8/2026", odd_again),
        action(104, "INS 8/2026", plain("První")),
        action(105, "INS 8/2026", plain("Druhý 🦀")),
    ];
    (actions, vec![every_doc, odd_doc, plain_doc])
}

/// The documents `sql` reads, by person ID.
async fn docs(store: &Store, sql: &str) -> std::collections::BTreeMap<String, String> {
    texts(store, sql, &[])
        .await
        .into_iter()
        .map(|d| {
            let p: PartyDoc = serde_json::from_str(&d).unwrap();
            (p.person_id, d)
        })
        .collect()
}

/// The documents as the API's readers get them (`read::queries`, `read::search`, the
/// exports on SQLite): the cells of the `party_cells` view put together in Rust, by
/// the person's key.
async fn read_docs(store: &Store) -> std::collections::BTreeMap<String, String> {
    use isir::readmodel::party_cells::{VIEW, doc_from, read_columns};
    let mut tx = Tx::begin(store).await.unwrap();
    let sql = format!(
        "SELECT {}, case_number, court, person_id FROM {VIEW}",
        read_columns("")
    );
    let rows = tx
        .rows_with(&sql, &[], |r| {
            let n = read_columns("").split(", ").count();
            let key = (0..3)
                .map(|i| r.text(n + i).map(|t| t.unwrap_or_default().to_string()))
                .collect::<Result<Vec<_>, _>>()?;
            Ok((key.join("|"), doc_from(r, 0)?))
        })
        .await
        .unwrap();
    tx.commit().await.unwrap();
    rows.into_iter().collect()
}

/// The view's documents (built in SQL) by the person's key.
async fn view_docs(store: &Store) -> std::collections::BTreeMap<String, String> {
    texts(
        store,
        "SELECT case_number || '|' || court || '|' || person_id || '|' || doc FROM parties",
        &[],
    )
    .await
    .into_iter()
    .map(|r| {
        let mut it = r.splitn(4, '|');
        let key = [it.next(), it.next(), it.next()].map(|k| k.unwrap().to_string());
        (key.join("|"), it.next().unwrap().to_string())
    })
    .collect()
}

async fn n(store: &Store, sql: &str) -> i64 {
    texts(store, &format!("SELECT CAST(({sql}) AS TEXT)"), &[]).await[0]
        .parse()
        .unwrap()
}

async fn cells_are_stored_and_served_whole(b: Backend) {
    let db = common::fresh_db(b).await;
    let store = common::store(&db).await;
    let e = store.register_epoch(1).await.unwrap();
    let (actions, want) = persons();
    let refs: Vec<&Action> = actions.iter().collect();
    store.write_actions(e, None, -1, &refs).await.unwrap();
    for name in projection::NAMES {
        projection::catch_up(&store, name, 1000).await.unwrap();
    }
    let view = docs(&store, "SELECT doc FROM parties").await;
    assert_eq!(view.len(), want.len());
    for w in &want {
        assert_eq!(
            view[&w.person_id],
            serde_json::to_string(w).unwrap(),
            "the document of {:?}, byte for byte",
            w.person_id
        );
    }
    // Stored as cells: no document whole, the IČO and birth number again only where
    // they differ from their keys, no address key written out.
    assert_eq!(
        n(
            &store,
            "SELECT COUNT(*) FROM parties_v1 WHERE doc IS NOT NULL"
        )
        .await,
        0
    );
    assert_eq!(
        texts(&store, "SELECT person_id FROM parties_v1 WHERE ico_text IS NOT NULL OR birth_number_text IS NOT NULL", &[]).await,
        vec!["\"Q\\ 1".to_string()]
    );
    let cells = texts(
        &store,
        "SELECT addresses FROM parties_v1 WHERE addresses IS NOT NULL ORDER BY 1",
        &[],
    )
    .await;
    assert_eq!(cells.len(), 2);
    for c in &cells {
        for k in ["\"kind\":", "\"valid_from\":", "\"street\":", "\"id\":\"3"] {
            assert!(!c.contains(k), "{k} in {c:?}");
        }
    }
    // The readers' documents, put together in Rust from the cells: the same bytes.
    let read = read_docs(&store).await;
    assert_eq!(read.len(), want.len());
    for w in &want {
        let key = format!("{}|{}|{}", w.case_number, w.court, w.person_id);
        assert_eq!(
            read[&key],
            serde_json::to_string(w).unwrap(),
            "the document of {:?} as the API reads it, byte for byte",
            w.person_id
        );
    }
    // Name search (on SQLite reading the table itself, on PostgreSQL the cells' view).
    {
        use isir::read::search::{Search, Tables, search};
        let q = Search {
            words: Search::words("kovář syn").unwrap(),
            ..Default::default()
        };
        let mut tx = Tx::begin(&store).await.unwrap();
        let at = Tables::of(&mut tx).await.unwrap();
        assert_eq!(matches!(at, Tables::Sqlite { .. }), b == Backend::Sqlite);
        let hits = search(&mut tx, at, &q, None, 10).await.unwrap();
        tx.commit().await.unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].doc, serde_json::to_string(&want[1]).unwrap());
    }
    // An IČO's subjects, as `/v1/subjects?ico=` reads them.
    {
        let ico = want
            .iter()
            .find_map(|w| w.ico.clone())
            .expect("a person with an IČO");
        let key = isir::readmodel::fold::ico_key(&ico);
        let mut tx = Tx::begin(&store).await.unwrap();
        let got = isir::read::queries::subjects_text(
            &mut tx,
            "ico",
            std::slice::from_ref(&key),
            &["".to_string(), "".to_string(), "".to_string()],
            10,
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        let expect: Vec<String> = want
            .iter()
            .filter(|w| w.ico.as_deref().map(isir::readmodel::fold::ico_key) == Some(key.clone()))
            .map(|w| serde_json::to_string(w).unwrap())
            .collect();
        assert!(!expect.is_empty());
        assert_eq!(got, expect);
    }
    // A case's parties, as `/v1/cases/{id}` reads them: each case's persons.
    {
        let mut tx = Tx::begin(&store).await.unwrap();
        for w in &want {
            let got = isir::read::queries::case_parties(&mut tx, &w.case_number)
                .await
                .unwrap();
            let expect = serde_json::to_value(w).unwrap();
            assert!(
                got.contains(&expect),
                "{:?} among its case's parties",
                w.person_id
            );
        }
        tx.commit().await.unwrap();
    }
    // A rebuild stores and serves the same; `project verify` finds nothing.
    let before = dump(&store).await;
    let m = projection::rebuild(&store, "parties", 2).await.unwrap();
    assert_eq!(m.version, 2);
    assert_eq!(dump(&store).await, before);
    let rep = projection::verify::verify(&store, 10, None).await.unwrap();
    assert!(rep.differences.is_empty(), "{:?}", rep.differences);
}

#[tokio::test]
async fn cells_are_stored_and_served_whole_sqlite() {
    cells_are_stored_and_served_whole(Backend::Sqlite).await;
}

#[tokio::test]
async fn cells_are_stored_and_served_whole_postgres() {
    cells_are_stored_and_served_whole(Backend::Postgres).await;
}

/// A parties version the release before made: whole documents (`doc NOT NULL`), no cells,
/// the view `SELECT *`, built up to the middle of the stream. Opening it adds the cells
/// and remakes the view; the persons the rest of the stream changes are stored as cells
/// (on SQLite whole: the constraint stays until a rebuild); every document is served as
/// a version this release builds afresh serves it.
async fn a_parties_version_made_before_the_cells(b: Backend) {
    let (_sim, _db, app, _g) = common::replica(b, 4_000, 73).await;
    let store = &app.store;
    for name in ["cases", "timeline"] {
        projection::catch_up(store, name, 1000).await.unwrap();
    }
    projection::ensure(store, "parties").await.unwrap();
    projection::step(store, "parties", "parties", 2_000)
        .await
        .unwrap();
    let at_half = dump(store).await["parties"].clone();
    // The earlier form, holding every person of the first half whole.
    let mut tx = Tx::begin(store).await.unwrap();
    for stmt in [
        "DROP VIEW parties".to_string(),
        "DROP VIEW party_cells".into(),
        "CREATE TABLE parties_old (case_number TEXT NOT NULL, court TEXT NOT NULL, person_id TEXT NOT NULL, \
         role TEXT, kind TEXT, ico TEXT, rc TEXT, name_key TEXT, latest_action_id BIGINT NOT NULL, \
         doc TEXT NOT NULL, first_action_id BIGINT NOT NULL, PRIMARY KEY (case_number, court, person_id))"
            .into(),
        format!(
            "INSERT INTO parties_old SELECT case_number, court, person_id, role, kind, ico, rc, name_key, \
             latest_action_id, {}, first_action_id FROM parties_v1",
            isir::readmodel::party_cells::doc_sql(b == Backend::Postgres, "")
        ),
        "DROP TABLE parties_v1".into(),
        "ALTER TABLE parties_old RENAME TO parties_v1".into(),
        "CREATE VIEW parties AS SELECT * FROM parties_v1".into(),
    ] {
        tx.exec(&stmt, &[]).await.unwrap();
    }
    tx.commit().await.unwrap();
    assert_eq!(
        dump(store).await["parties"],
        at_half,
        "the old form, read as it is"
    );
    // Before the writer opens it, this release's readers answer that the projection is
    // not in this release's form yet (a 503 with `Retry-After`), not a 500: name search
    // (on SQLite it reads the table's cells itself) and an IČO's subjects (their view).
    {
        use isir::read::search::{Search, Tables, search};
        let q = Search {
            words: Search::words("nov").unwrap(),
            ..Default::default()
        };
        let mut tx = Tx::begin(store).await.unwrap();
        let at = Tables::of(&mut tx).await.unwrap();
        let e = search(&mut tx, at, &q, None, 10).await.err();
        assert_eq!(e.map(|e| e.status), Some(503), "name search");
        drop(tx);
        // (A new transaction: PostgreSQL's failed statement ended the one before.)
        let mut tx = Tx::begin(store).await.unwrap();
        let e = isir::read::queries::subjects_text(
            &mut tx,
            "ico",
            &["12345678".to_string()],
            &["".to_string(), "".to_string(), "".to_string()],
            10,
        )
        .await
        .err();
        assert_eq!(e.map(|e| e.status), Some(503), "subjects");
        tx.commit().await.unwrap();
    }

    projection::catch_up(store, "parties", 1000).await.unwrap();
    let upgraded = dump(store).await;
    let cells = n(store, "SELECT COUNT(*) FROM parties_v1 WHERE doc IS NULL").await;
    if b == Backend::Postgres {
        assert!(
            cells > 100,
            "stored as cells once the column allows it: {cells}"
        );
    } else {
        assert_eq!(cells, 0, "whole while the column requires it");
    }
    let rep = projection::verify::verify(store, 50, None).await.unwrap();
    assert!(rep.differences.is_empty(), "{:?}", rep.differences);
    // The readers (whole documents where a row has one, cells elsewhere) and the view
    // serve the same.
    let read = read_docs(store).await;
    assert_eq!(read, view_docs(store).await);
    assert!(read.len() > 100);
    // Opened again: nothing to do.
    projection::ensure(store, "parties").await.unwrap();
    assert_eq!(dump(store).await, upgraded);
    // A rebuild makes the new form and serves the same.
    let m = projection::rebuild(store, "parties", 1000).await.unwrap();
    assert_eq!(m.version, 2);
    assert_eq!(dump(store).await, upgraded);
    assert_eq!(
        n(
            store,
            "SELECT COUNT(*) FROM parties_v2 WHERE doc IS NOT NULL"
        )
        .await,
        0
    );
}

#[tokio::test]
async fn a_parties_version_made_before_the_cells_sqlite() {
    a_parties_version_made_before_the_cells(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_parties_version_made_before_the_cells_postgres() {
    a_parties_version_made_before_the_cells(Backend::Postgres).await;
}

/// The benchmarks' floor statements select what the API selects: `bench/lib.sh`'s list
/// of a person's cells is `read_columns`.
#[test]
fn the_benchmarks_select_the_cells_the_api_reads() {
    let lib =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/bench/lib.sh")).unwrap();
    let line = lib
        .lines()
        .find_map(|l| l.strip_prefix("PARTY_CELLS=\""))
        .expect("bench/lib.sh sets PARTY_CELLS");
    assert_eq!(
        line.trim_end_matches('"'),
        isir::readmodel::party_cells::read_columns("")
    );
}
