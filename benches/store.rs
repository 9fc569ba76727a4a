//! Storing pages: 1000-action pages written with their checkpoint, one transaction each,
//! on SQLite and PostgreSQL. Prints actions per second.
//!
//! `cargo bench --bench store` (PostgreSQL from ISIR_TEST_PG, default the local one).
//! Under `cargo test --benches` it runs a small smoke version.

use std::time::Instant;

use isir::sim::{SimOptions, Simulator};
use isir::source::Page;
use isir::source::parse::parse_data_response;
use isir::source::write::data_response;
use isir::store::Store;
use sqlx::Connection;

fn pages(n: usize) -> Vec<Page> {
    let sim = Simulator::new(SimOptions {
        seed: 5,
        actions: n * 1000,
        ..Default::default()
    });
    let all = sim.truth_all();
    let mut after = -1;
    all.chunks(1000)
        .map(|c| {
            let p = parse_data_response(data_response(c).as_bytes(), after).unwrap();
            after = p.last_id().unwrap();
            p
        })
        .collect()
}

/// Pages stored before the timed ones: as many notes as the last automatic note
/// dictionary is trained on (`store::notes::SAMPLES_MAX`), so that the timed pages are
/// stored as a running replica stores them, compressed with its dictionary.
const WARM: usize = 11;

/// Stores `warm`, then `pages` timed, as the poller does (a note dictionary due trained
/// before a page); gives the timed pages' actions a second.
async fn run(store: &Store, warm: &[Page], pages: &[Page]) -> f64 {
    let epoch = store.register_epoch(1).await.unwrap();
    let mut checkpoint = None;
    for p in warm {
        isir::store::notes::tend(store, epoch).await.unwrap();
        store.write_page(epoch, checkpoint, p).await.unwrap();
        checkpoint = p.last_id();
    }
    // The dictionary the warm pages made due is trained here, before the timer starts:
    // it is trained once in a replica's life, and its seconds of CPU would otherwise
    // fall in the first timed page (as they did before 2026-12-07).
    assert!(
        isir::store::notes::tend(store, epoch)
            .await
            .unwrap()
            .is_some(),
        "the warm pages make the last automatic dictionary due"
    );
    let t = Instant::now();
    for p in pages {
        isir::store::notes::tend(store, epoch).await.unwrap();
        store.write_page(epoch, checkpoint, p).await.unwrap();
        checkpoint = p.last_id();
    }
    let secs = t.elapsed().as_secs_f64();
    (pages.len() * 1000) as f64 / secs
}

fn main() {
    let quick = std::env::args().all(|a| a != "--bench");
    let n = if quick { 3 } else { 100 };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let all = pages(WARM + n);
        let (warm, pages) = all.split_at(WARM);
        // bench/store_baseline.sh loads the very same actions with `sqlite3 .import` and
        // PostgreSQL's COPY.
        if let Ok(path) = std::env::var("ISIR_DUMP_ACTIONS") {
            let mut w = csv::Writer::from_path(&path).unwrap();
            let mut header = isir::store::ACTION_FIELDS.to_vec();
            header.extend(["stored_at", "epoch"]);
            w.write_record(&header).unwrap();
            for p in pages {
                for r in &p.records {
                    let a = &r.action;
                    w.write_record([
                        a.id.to_string(),
                        a.created.clone(),
                        a.published.clone(),
                        a.document_url.clone().unwrap_or_default(),
                        a.case_number.clone(),
                        a.type_code.clone(),
                        a.type_name.clone(),
                        a.section.clone().unwrap_or_default(),
                        a.number_in_section
                            .map(|n| n.to_string())
                            .unwrap_or_default(),
                        a.note.clone().unwrap_or_default(),
                        "0".into(),
                        "1".into(),
                    ])
                    .unwrap();
                }
            }
            w.flush().unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        let sqlite = Store::connect(
            &format!("sqlite://{}", dir.path().join("b.db").display()),
            5,
        )
        .await
        .unwrap();
        sqlite.migrate().await.unwrap();
        let r = run(&sqlite, warm, pages).await;
        println!("store/sqlite: {n} pages of 1000 actions: {r:.0} actions/s");

        let admin = std::env::var("ISIR_TEST_PG")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let mut c = sqlx::PgConnection::connect(&admin)
            .await
            .expect("PostgreSQL for the bench (ISIR_TEST_PG)");
        let name = format!("isir_bench_{}", std::process::id());
        sqlx::query(&format!("DROP DATABASE IF EXISTS {name}"))
            .execute(&mut c)
            .await
            .unwrap();
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut c)
            .await
            .unwrap();
        let url = format!("{}/{name}", admin.rsplit_once('/').unwrap().0);
        let pg = Store::connect(&url, 5).await.unwrap();
        pg.migrate().await.unwrap();
        let r = run(&pg, warm, pages).await;
        println!("store/postgres: {n} pages of 1000 actions: {r:.0} actions/s");
        pg.close().await;
        sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
            .execute(&mut c)
            .await
            .unwrap();
    });
}
