//! Builds the replica for the API benchmark (`bench/api.sh`): the simulator's actions,
//! rendered to the protocol's XML and parsed exactly as the poller does, stored page by
//! page with their checkpoint straight into a store, without the SOAP round trip (the
//! backfill itself is measured by `bench/backfill.sh`). Projections are then built by
//! `isir project catch-up`, so the API reads what the real pipeline builds.
//!
//! `ISIR_FIXTURE_DB=sqlite://... ISIR_FIXTURE_CASES=1000000 cargo bench --bench api_fixture`
//! (`ISIR_FIXTURE_PLAIN_NOTES=1`: no note dictionary is trained, so every note is stored
//! as text, as the release before dictionaries stored it: `bench/size.sh`'s baseline.)
//! Under `cargo test --benches` it builds a small fixture in a temporary file and checks it.

use std::time::Instant;

use isir::sim::{SimOptions, Simulator};
use isir::source::parse::parse_data_response;
use isir::source::write::data_response;
use isir::store::Store;

fn main() {
    let quick = std::env::args().all(|a| a != "--bench");
    let dir = tempfile::tempdir().unwrap();
    let (url, cases) = if quick {
        (
            format!("sqlite://{}", dir.path().join("f.db").display()),
            200,
        )
    } else {
        (
            std::env::var("ISIR_FIXTURE_DB").expect("ISIR_FIXTURE_DB"),
            std::env::var("ISIR_FIXTURE_CASES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1_000_000usize),
        )
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let t = Instant::now();
        // About 13 actions a case in a small stream, about 20 in a long one (cases stay open
        // longer); generate until `cases` exist.
        let mut actions = cases * 13;
        let sim = loop {
            let sim = Simulator::new(SimOptions {
                seed: 77,
                actions,
                ..Default::default()
            });
            let have = sim.case_count();
            if have >= cases {
                break sim;
            }
            actions = actions * cases / have.max(1) + 1000;
        };
        eprintln!(
            "fixture: {} actions, {} cases generated in {:.1} s",
            actions,
            sim.case_count(),
            t.elapsed().as_secs_f64()
        );
        let store = Store::connect(&url, 2).await.unwrap();
        store.migrate().await.unwrap();
        let epoch = store.register_epoch(1).await.unwrap();
        let plain_notes = std::env::var("ISIR_FIXTURE_PLAIN_NOTES").is_ok_and(|v| v == "1");
        let mut after = store.checkpoint().await.unwrap();
        let t = Instant::now();
        let mut n = 0usize;
        loop {
            let batch = sim.truth_after(after.unwrap_or(i64::MIN), 1000);
            if batch.is_empty() {
                break;
            }
            let page =
                parse_data_response(data_response(&batch).as_bytes(), after.unwrap_or(-1)).unwrap();
            // As the poller: a note dictionary due is trained before the page.
            if !plain_notes {
                isir::store::notes::tend(&store, epoch).await.unwrap();
            }
            store.write_page(epoch, after, &page).await.unwrap();
            after = page.last_id();
            n += batch.len();
            if n % 1_000_000 < 1000 {
                eprintln!("fixture: {n} actions stored");
            }
        }
        eprintln!(
            "fixture: {n} actions stored in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        if quick {
            assert_eq!(n, actions);
        }
        store.close().await;
    });
}
