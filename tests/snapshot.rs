//! Replica snapshots across back ends: restoring a snapshot and polling to the head
//! gives the same replica as polling from the start (SQLite to PostgreSQL and back);
//! a truncated, reordered or tampered snapshot is refused with a clear error and leaves
//! the store unchanged; a store that holds actions is refused unless appending exactly
//! after its checkpoint.

mod common;

use std::path::Path;

use common::Backend;
use isir::snapshot::{self, SnapshotError};

async fn empty_unchanged(store: &isir::store::Store) {
    assert_eq!(store.count_actions().await.unwrap(), 0);
    assert_eq!(store.checkpoint().await.unwrap(), None);
}

/// The cases the simulator's truth erases (§ 425): a snapshot redacts their notes
/// whatever `--include-pii` (erasure is the law, not a scope).
fn erased_cases(sim: &isir::sim::Simulator) -> std::collections::HashSet<String> {
    sim.truth_debtors()
        .into_iter()
        .filter(|d| d.erased)
        .map(|d| d.case_number)
        .collect()
}

/// Equal lists of actions, or a short message naming the first difference. The notes of
/// the `erased` cases are left out of the comparison (a snapshot redacts them); every
/// other field of theirs is compared.
fn same(
    a: &[isir::source::Action],
    b: &[isir::source::Action],
    erased: &std::collections::HashSet<String>,
    what: &str,
) {
    let unnoted = |v: &[isir::source::Action]| -> Vec<isir::source::Action> {
        v.iter()
            .cloned()
            .map(|mut x| {
                if erased.contains(&x.case_number) {
                    x.note = None;
                }
                x
            })
            .collect()
    };
    let (a, b) = (&unnoted(a)[..], &unnoted(b)[..]);
    if a == b {
        return;
    }
    let i = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let show =
        |v: Option<&isir::source::Action>| format!("{v:?}").chars().take(600).collect::<String>();
    panic!(
        "{what}: {} vs {} actions; first difference at {i}:\n{}\n{}",
        a.len(),
        b.len(),
        show(a.get(i)),
        show(b.get(i))
    );
}

/// Whether the replica's index `actions (case_number, id)` exists.
async fn has_case_index(store: &isir::store::Store, b: Backend) -> bool {
    let sql = match b {
        Backend::Sqlite => "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = $1",
        Backend::Postgres => "SELECT COUNT(*) FROM pg_indexes WHERE indexname = $1",
    };
    common::count(store, sql, "actions_case").await == 1
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

async fn across(from: Backend, to: Backend) {
    let (sim, url, _g) = common::sim(12_000, 1000, 61).await;
    // The source replica: polled to the head of 12 000 actions.
    let db1 = common::fresh_db(from).await;
    let mut s1 = common::settings(&url, &db1);
    s1.poll.max_batches_per_tick = 1000;
    let a1 = common::app(s1).await;
    a1.poller().unwrap().poll_once().await;
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let m = snapshot::create(&a1.store, &snap, -1, 5000, false, true)
        .await
        .unwrap();
    assert_eq!(m.chunks.len(), 3);
    assert_eq!(m.actions, 12_000);
    assert_eq!(m.checkpoint, a1.store.checkpoint().await.unwrap());

    // Restored into the other back end, then polled on: the same as polling from the start.
    let db2 = common::fresh_db(to).await;
    let mut s2 = common::settings(&url, &db2);
    s2.poll.max_batches_per_tick = 1000;
    let a2 = common::app(s2.clone()).await;
    let r = snapshot::restore(&a2.store, &a2.lease, &snap, false, false)
        .await
        .unwrap();
    assert_eq!(r.actions, 12_000);
    assert_eq!(a2.store.checkpoint().await.unwrap(), m.checkpoint);
    // Both replicas keep most notes compressed (`store::notes`): the source with the
    // dictionaries its poller trained, the restored one with a dictionary trained on
    // the snapshot's first notes; the comparisons below read them decoded.
    for (store, what) in [
        (&a1.store, "the source"),
        (&a2.store, "the restored replica"),
    ] {
        let z = common::count(
            store,
            "SELECT COUNT(*) FROM actions WHERE note_z IS NOT NULL AND case_number <> $1",
            "",
        )
        .await;
        assert!(z > 8_000, "{what}: {z} notes compressed");
    }
    // The restore builds the replica's case index after its commit; one that died in
    // between leaves it missing, and the next start builds it.
    assert!(has_case_index(&a2.store, to).await, "built by the restore");
    let mut tx = isir::store::sql::Tx::begin(&a2.store).await.unwrap();
    tx.exec("DROP INDEX actions_case", &[]).await.unwrap();
    tx.commit().await.unwrap();
    assert!(!has_case_index(&a2.store, to).await);
    let a2 = common::app(s2.clone()).await;
    assert!(
        has_case_index(&a2.store, to).await,
        "built again at the start"
    );
    sim.publish(3_000);
    let before = sim.stats().requests_total;
    let t = a2.poller().unwrap().poll_once().await;
    assert_eq!(t.checkpoint, sim.head_id());
    // Polling resumed at the watermark: 3 pages and an empty one, plus the head check.
    assert!(
        sim.stats().requests_total - before <= 5,
        "{:?}",
        sim.stats()
    );
    let erased = erased_cases(&sim);
    assert!(!erased.is_empty(), "the stream erases debtors");
    let got = common::all_actions(&a2.store).await;
    same(
        &got,
        &sim.truth_all(),
        &erased,
        "restored + polled = the source from the start",
    );
    // And the first replica polled on gives the same.
    let mut p1 = a1.poller().unwrap();
    while p1.poll_once().await.checkpoint != sim.head_id() {}
    same(
        &common::all_actions(&a1.store).await,
        &got,
        &erased,
        "the source polled on",
    );
    // Projections build from the restored replica.
    for n in isir::projection::NAMES {
        isir::projection::rebuild(&a2.store, n, 5000).await.unwrap();
    }
    let cases = common::count(
        &a2.store,
        "SELECT COUNT(*) FROM cases WHERE case_number <> $1",
        "",
    )
    .await;
    assert!(cases > 500);

    // A store that holds actions: refused, unless appending exactly after its checkpoint.
    let e = snapshot::restore(&a2.store, &a2.lease, &snap, false, false)
        .await
        .unwrap_err();
    assert!(matches!(e, SnapshotError::Store(_)), "{e}");
    assert!(e.to_string().contains("--append"), "{e}");
    let e = snapshot::restore(&a2.store, &a2.lease, &snap, true, false)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("not inside"), "{e}");
    // A replica at the snapshot's middle takes the rest.
    let db3 = common::fresh_db(to).await;
    let mut s3 = common::settings(&url, &db3);
    s3.poll.max_batches_per_tick = 5;
    let a3 = common::app(s3).await;
    a3.poller().unwrap().poll_once().await;
    let held = a3.store.count_actions().await.unwrap();
    assert_eq!(held, 5000);
    let r = snapshot::restore(&a3.store, &a3.lease, &snap, true, false)
        .await
        .unwrap();
    assert_eq!((r.actions, r.skipped), (7_000, 5_000));
    same(
        &common::all_actions(&a3.store).await,
        &sim.truth_after(i64::MIN, 12_000),
        &erased,
        "appended",
    );
}

#[tokio::test]
async fn sqlite_to_postgres() {
    across(Backend::Sqlite, Backend::Postgres).await;
}

#[tokio::test]
async fn postgres_to_sqlite() {
    across(Backend::Postgres, Backend::Sqlite).await;
}

#[tokio::test]
async fn bad_snapshots_are_refused() {
    let (sim, url, _g) = common::sim(10_000, 1000, 62).await;
    let db1 = common::fresh_db(Backend::Sqlite).await;
    let mut s1 = common::settings(&url, &db1);
    s1.poll.max_batches_per_tick = 1000;
    let a1 = common::app(s1).await;
    a1.poller().unwrap().poll_once().await;
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good");
    let m = snapshot::create(&a1.store, &good, -1, 6000, false, true)
        .await
        .unwrap();
    assert_eq!(m.chunks.len(), 2);

    let db2 = common::fresh_db(Backend::Sqlite).await;
    let a2 = common::app(common::settings(&url, &db2)).await;
    let refused = |e: SnapshotError, want: &str| {
        assert!(matches!(e, SnapshotError::Refused(_)), "{e}");
        assert!(e.to_string().contains(want), "{e} (want {want:?})");
    };

    // Tampered: one byte of the second chunk changed.
    let t = dir.path().join("tampered");
    copy_dir(&good, &t);
    let f = t.join(&m.chunks[1].file);
    let mut bytes = std::fs::read(&f).unwrap();
    let i = bytes.len() / 2;
    bytes[i] ^= 0x01;
    std::fs::write(&f, bytes).unwrap();
    let e = snapshot::restore(&a2.store, &a2.lease, &t, false, false)
        .await
        .unwrap_err();
    // Refused, by whichever check meets the flipped byte first (the checksum, gzip's
    // own check, or the line it garbles).
    assert!(matches!(e, snapshot::SnapshotError::Refused(_)), "{e}");
    empty_unchanged(&a2.store).await;

    // Truncated: the last chunk cut short, or missing.
    let t = dir.path().join("truncated");
    copy_dir(&good, &t);
    let f = t.join(&m.chunks[1].file);
    let bytes = std::fs::read(&f).unwrap();
    std::fs::write(&f, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let e = snapshot::restore(&a2.store, &a2.lease, &t, false, false)
        .await
        .unwrap_err();
    assert!(matches!(e, SnapshotError::Refused(_)), "{e}");
    empty_unchanged(&a2.store).await;
    std::fs::remove_file(&f).unwrap();
    refused(
        snapshot::restore(&a2.store, &a2.lease, &t, false, false)
            .await
            .unwrap_err(),
        "missing",
    );
    empty_unchanged(&a2.store).await;

    // Reordered: the chunks listed the other way round.
    let t = dir.path().join("reordered");
    copy_dir(&good, &t);
    let mut m2 = m.clone();
    m2.chunks.reverse();
    write_manifest(&t, &m2);
    refused(
        snapshot::restore(&a2.store, &a2.lease, &t, false, false)
            .await
            .unwrap_err(),
        "out of order",
    );
    empty_unchanged(&a2.store).await;

    // A manifest that lies about the count.
    let t = dir.path().join("count");
    copy_dir(&good, &t);
    let mut m3 = m.clone();
    m3.actions += 1;
    write_manifest(&t, &m3);
    refused(
        snapshot::restore(&a2.store, &a2.lease, &t, false, false)
            .await
            .unwrap_err(),
        "manifest says",
    );
    empty_unchanged(&a2.store).await;

    // A manifest changed without its checksum.
    let t = dir.path().join("unsummed");
    copy_dir(&good, &t);
    let mut m4 = m.clone();
    m4.checkpoint = m4.checkpoint.map(|c| c + 1000);
    std::fs::write(t.join("manifest.json"), serde_json::to_string(&m4).unwrap()).unwrap();
    refused(
        snapshot::restore(&a2.store, &a2.lease, &t, false, false)
            .await
            .unwrap_err(),
        "checksum",
    );
    // A consistent manifest whose checkpoint lies beyond its last action: the poller
    // would skip part of the feed.
    write_manifest(&t, &m4);
    refused(
        snapshot::restore(&a2.store, &a2.lease, &t, false, false)
            .await
            .unwrap_err(),
        "checkpoint",
    );
    empty_unchanged(&a2.store).await;

    // A chunk that is a symbolic link (to a file outside the snapshot).
    let t = dir.path().join("linked");
    copy_dir(&good, &t);
    let outside = dir.path().join("outside.gz");
    std::fs::rename(t.join(&m.chunks[0].file), &outside).unwrap();
    std::os::unix::fs::symlink(&outside, t.join(&m.chunks[0].file)).unwrap();
    refused(
        snapshot::restore(&a2.store, &a2.lease, &t, false, false)
            .await
            .unwrap_err(),
        "symbolic link",
    );
    empty_unchanged(&a2.store).await;

    // One endless line: refused at the cap, before it is parsed (or held whole).
    let t = dir.path().join("long");
    std::fs::create_dir_all(&t).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &vec![b'x'; snapshot::MAX_LINE + 10]).unwrap();
    let bytes = gz.finish().unwrap();
    std::fs::write(t.join("actions-00000.ndjson.gz"), &bytes).unwrap();
    let mut m5 = m.clone();
    m5.chunks = vec![snapshot::Chunk {
        file: "actions-00000.ndjson.gz".into(),
        first_id: m.chunks[0].first_id,
        last_id: m.chunks[0].first_id,
        actions: 1,
        sha256: {
            use sha2::Digest;
            hex::encode(sha2::Sha256::digest(&bytes))
        },
    }];
    m5.actions = 1;
    m5.checkpoint = Some(m.chunks[0].first_id);
    write_manifest(&t, &m5);
    refused(
        snapshot::restore(&a2.store, &a2.lease, &t, false, false)
            .await
            .unwrap_err(),
        "longer than",
    );
    empty_unchanged(&a2.store).await;

    // The good one loads.
    let r = snapshot::restore(&a2.store, &a2.lease, &good, false, false)
        .await
        .unwrap();
    assert_eq!(r.actions, m.actions);
    same(
        &common::all_actions(&a2.store).await,
        &common::all_actions(&a1.store).await,
        &erased_cases(&sim),
        "the good snapshot",
    );
}

/// Writes `m` as the manifest of `dir` with its checksum, as a tool that made a
/// consistent but lying manifest would.
fn write_manifest(dir: &std::path::Path, m: &snapshot::SnapshotManifest) {
    use sha2::Digest;
    let text = serde_json::to_string(m).unwrap();
    std::fs::write(dir.join("manifest.json"), &text).unwrap();
    std::fs::write(
        dir.join(snapshot::MANIFEST_SUM),
        format!(
            "{}  manifest.json\n",
            hex::encode(sha2::Sha256::digest(text.as_bytes()))
        ),
    )
    .unwrap();
}
