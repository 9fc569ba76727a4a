//! Reads whose cost is bounded, on both back ends: every shape of `/v1/cases` and
//! `/v1/events` the API serves is planned as an index walk in keyset order (checked with
//! `EXPLAIN`, as the subjects test does), the shapes no index serves are refused with a
//! 400 that names them, and a statement that runs past `api.statement_timeout_ms` is
//! stopped, answered with a 503 and `Retry-After`, and frees its connection.

mod common;

use std::time::{Duration, Instant};

use common::{BOTH, Backend};
use isir::bind_all;
use isir::read::limit::Plans;
use isir::read::lists::{self, CaseQuery, EventQuery, Sort};
use isir::store::Store;
use isir::store::sql::{Tx, Val};

/// The plan of `sql` with `binds`, one line per step (on PostgreSQL with sequential
/// scans and sorts discouraged, so that the small test tables do not hide what the
/// indexes allow).
async fn explain(store: &Store, sql: &str, binds: &[Val]) -> String {
    use sqlx::Row;
    match store {
        Store::Sqlite(p) => {
            // `?` placeholders are positional; `$N` ones are named in order of appearance.
            let sql = format!("EXPLAIN QUERY PLAN {sql}");
            bind_all!(sqlx::query(&sql), binds)
                .fetch_all(p)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
                .iter()
                .map(|r| r.get::<String, _>(3))
                .collect::<Vec<_>>()
                .join("\n")
        }
        Store::Postgres(p) => pg_explain(p, (&[], ""), &format!("EXPLAIN {sql}"), binds).await,
    }
}

/// On PostgreSQL, the plan `explain` (an `EXPLAIN ...` statement) prints with `binds`, on
/// one connection after the statements `setup`, with sequential scans and sorts
/// discouraged ([`explain`]); the statements `undo` and `RESET ALL` run before the
/// connection goes back (not `DEALLOCATE ALL`: it would drop sqlx's own statements).
async fn pg_explain(
    p: &sqlx::PgPool,
    (setup, undo): (&[String], &str),
    explain: &str,
    binds: &[Val],
) -> String {
    use sqlx::Row;
    let mut c = p.acquire().await.unwrap();
    let discourage = ["SET enable_seqscan = off", "SET enable_sort = off"].map(String::from);
    for s in discourage.iter().chain(setup) {
        sqlx::raw_sql(s)
            .execute(&mut *c)
            .await
            .unwrap_or_else(|e| panic!("{s}: {e}"));
    }
    let plan = bind_all!(sqlx::query(explain), binds)
        .fetch_all(&mut *c)
        .await
        .unwrap_or_else(|e| panic!("{explain}: {e}"))
        .iter()
        .map(|r| r.get::<String, _>(0))
        .collect::<Vec<_>>()
        .join("\n");
    sqlx::raw_sql(&format!("{undo} RESET ALL"))
        .execute(&mut *c)
        .await
        .unwrap();
    plan
}

/// The plans a list statement runs with: on SQLite its one plan; on PostgreSQL the plan
/// for these values and the generic plan the read pool keeps for every value
/// (`Plans::Kept`: `plan_cache_mode = force_generic_plan`), of the statement prepared by
/// name and executed with `binds` as literals (an `EXPLAIN` of a statement with
/// parameters plans for their values, never generically).
async fn explain_all(store: &Store, sql: &str, binds: &[Val]) -> Vec<(&'static str, String)> {
    let mut out = vec![("", explain(store, sql, binds).await)];
    if let Store::Postgres(p) = store {
        let lits: Vec<String> = binds
            .iter()
            .map(|b| match b {
                Val::I(Some(v)) => v.to_string(),
                Val::T(Some(v)) => format!("'{}'", v.replace('\'', "''")),
                Val::B(v) => v.to_string(),
                _ => "NULL".to_string(),
            })
            .collect();
        let setup = [
            "SET plan_cache_mode = force_generic_plan".to_string(),
            format!("PREPARE kept_plan AS {sql}"),
        ];
        let explain = format!("EXPLAIN EXECUTE kept_plan({})", lits.join(", "));
        out.push((
            "kept",
            pg_explain(p, (&setup, "DEALLOCATE kept_plan;"), &explain, &[]).await,
        ));
    }
    out
}

/// Whether `plan` reads in index order without a sort and without a walk of a table:
/// on SQLite no `SCAN t` without an index and no temporary B-tree (unless `sorted` may
/// sort a bounded set), every equality column in an index search; on PostgreSQL no
/// sequential scan and no sort (unless `sorted`).
fn check(plan: &str, pg: bool, equal: &[&str], sorted: bool, what: &str) {
    if pg {
        assert!(!plan.contains("Seq Scan"), "{what}: a table walk\n{plan}");
        assert!(sorted || !plan.contains("Sort"), "{what}: a sort\n{plan}");
        assert!(plan.contains("Index"), "{what}: no index\n{plan}");
        for c in equal {
            assert!(
                plan.contains(&format!("{c} =")),
                "{what}: {c} is not an index condition\n{plan}"
            );
        }
    } else {
        for l in plan.lines() {
            let l = l.trim();
            assert!(
                // (A scan of a subquery's rows, `SCAN t3`, reads what an index walk gave.)
                !(l.starts_with("SCAN ") && l.contains("_v") && !l.contains("USING")),
                "{what}: a table walk ({l})\n{plan}"
            );
            assert!(
                sorted || !l.contains("TEMP B-TREE"),
                "{what}: a sort ({l})\n{plan}"
            );
        }
        for c in equal {
            assert!(
                plan.contains(&format!("{c}=?")),
                "{what}: {c} is not an index search\n{plan}"
            );
        }
    }
}

async fn store(b: Backend) -> (Store, common::TestDb) {
    let db = common::fresh_db(b).await;
    let store = Store::connect(&db.url, 4).await.unwrap();
    store.migrate().await.unwrap();
    isir::projection::ensure_all(&store).await.unwrap();
    (store, db)
}

/// The read side on `store` with `max_connections` and an acquire timeout of
/// `acquire_ms` (the PostgreSQL read pool's tests).
fn pool_state(store: &Store, max_connections: u32, acquire_ms: u64) -> isir::read::ReadState {
    isir::read::ReadState::new(
        store.clone(),
        isir::read::ReadOptions {
            max_connections,
            acquire_timeout: Duration::from_millis(acquire_ms),
            ..Default::default()
        },
    )
}

async fn plans(b: Backend) {
    let (store, _db) = store(b).await;
    let pg = b == Backend::Postgres;
    let at = if pg {
        lists::Source::Views
    } else {
        lists::Source::Sqlite(1)
    };
    let value = |c: &str| match c {
        "court_short" => "KSPH".to_string(),
        "state" => "KONKURS".to_string(),
        _ => "F".to_string(),
    };
    let shapes = lists::case_shapes();
    assert_eq!(shapes.len(), 12, "every served shape is checked");
    for (sort, set) in shapes {
        for with_cursor in [false, true] {
            for with_range in [false, true] {
                let mut q = CaseQuery {
                    sort: Some(sort),
                    equal: set.iter().map(|c| (*c, value(c))).collect(),
                    limit: 51,
                    ..CaseQuery::default()
                };
                if with_range {
                    match sort {
                        Sort::Opened => {
                            q.opened_from = Some("2020-01-01".into());
                            q.opened_to = Some("2021-01-01".into());
                        }
                        Sort::Updated => q.updated_since = Some("2024-01-01".into()),
                        Sort::Latest => continue,
                    }
                }
                if with_cursor {
                    q.after = Some(match sort {
                        Sort::Latest => ["12345".into(), "INS 1/2020".into()],
                        _ => ["2020-05-01".into(), "INS 1/2020".into()],
                    });
                }
                let (sql, binds) = lists::case_list(&q, &at).unwrap();
                for (kind, plan) in explain_all(&store, &sql, &binds).await {
                    check(
                        &plan,
                        pg,
                        &set,
                        false,
                        &format!(
                            "{b:?} {kind} cases {sort:?} {set:?} cursor {with_cursor} range {with_range}"
                        ),
                    );
                }
            }
        }
    }
    // A debtor's cases: the parties index finds them; the few are then sorted.
    for sort in [Sort::Opened, Sort::Latest, Sort::Updated] {
        let q = CaseQuery {
            sort: Some(sort),
            equal: vec![("court_short", "KSPH".into()), ("debtor_kind", "P".into())],
            debtor: Some(("ico", vec!["12345678".into(), "87654321".into()])),
            updated_since: Some("2024-01-01".into()),
            limit: 51,
            ..CaseQuery::default()
        };
        let (sql, binds) = lists::case_list(&q, &at).unwrap();
        for (kind, plan) in explain_all(&store, &sql, &binds).await {
            check(
                &plan,
                pg,
                &[],
                true,
                &format!("{b:?} {kind} debtor's cases {sort:?}"),
            );
            assert!(
                plan.contains("parties_v1_ico"),
                "{b:?} {kind}: the IČO index drives\n{plan}"
            );
        }
    }
    // The events feed: by its key, a court, a type or several, a case.
    let cols = isir::read::queries::event_json_sql(pg, at.is_table());
    let feeds: Vec<(&str, EventQuery, Vec<&str>, bool)> = vec![
        (
            "all",
            EventQuery {
                after: 10,
                limit: 51,
                ..Default::default()
            },
            vec![],
            false,
        ),
        (
            "court",
            EventQuery {
                after: 10,
                court: Some("KSPH".into()),
                limit: 51,
                ..Default::default()
            },
            vec!["court"],
            false,
        ),
        (
            "one type",
            EventQuery {
                after: 10,
                types: vec!["63".into()],
                limit: 51,
                ..Default::default()
            },
            vec!["type_code"],
            false,
        ),
        (
            "court and type",
            EventQuery {
                after: 10,
                court: Some("KSPH".into()),
                types: vec!["63".into()],
                limit: 51,
                ..Default::default()
            },
            vec!["court", "type_code"],
            false,
        ),
        // Several types: one ordered walk each, the bounded union sorted.
        (
            "types",
            EventQuery {
                after: 10,
                types: vec!["63".into(), "1".into(), "5".into()],
                limit: 51,
                ..Default::default()
            },
            vec!["type_code"],
            true,
        ),
        (
            "case",
            EventQuery {
                after: 10,
                case: Some("INS 1/2020".into()),
                types: vec!["1".into(), "5".into()],
                published_from: Some("2024-01-01".into()),
                limit: 51,
                ..Default::default()
            },
            vec!["case_number"],
            true,
        ),
        (
            "cases",
            EventQuery {
                after: 10,
                cases: Some(vec!["INS 1/2020".into(), "INS 2/2020".into()]),
                limit: 51,
                ..Default::default()
            },
            vec!["case_number"],
            true,
        ),
    ];
    for (what, q, equal, sorted) in feeds {
        let (sql, binds) = lists::events(&q, &cols, &at).unwrap();
        for (kind, plan) in explain_all(&store, &sql, &binds).await {
            check(
                &plan,
                pg,
                &equal,
                sorted,
                &format!("{b:?} {kind} events {what}"),
            );
        }
    }
}

/// A name search reads each tier of matches in rank order off the name index (the
/// person's latest action) and stops at the page's end: no sort of every match, however
/// many match; the case joins for a court filter, the documents for the page alone.
async fn search_plan(b: Backend) {
    use isir::read::search::{Search, Tier};
    let (store, _db) = store(b).await;
    let mut tx = Tx::begin_read(&store).await.unwrap();
    let at = isir::read::search::Tables::of(&mut tx).await.unwrap();
    tx.commit().await.unwrap();
    let plain = Search {
        words: vec!["nov".into(), "ja".into()],
        ..Default::default()
    };
    let filtered = Search {
        court: Some("KSPH".into()),
        role: Some("DLUŽNÍK".into()),
        kinds: vec!["F".into()],
        birth_year: Some(1971),
        ..plain.clone()
    };
    for s in [&plain, &filtered] {
        for tier in [Tier::Exact, Tier::Prefix] {
            for before in [None, Some(1000)] {
                let (sql, binds) = isir::read::search::sql(s, tier, before, 51, at);
                // On PostgreSQL the plan for these values and the generic plan the
                // server keeps (`Plans::Kept`).
                for (kind, plan) in explain_all(&store, &sql, &binds).await {
                    let what = format!(
                        "{b:?} search {tier:?} (court: {}, after: {}) {kind}",
                        s.court.is_some(),
                        before.is_some()
                    );
                    if b == Backend::Postgres {
                        assert!(!plan.contains("Seq Scan"), "{what}\n{plan}");
                        match tier {
                            Tier::Exact => assert!(
                                plan.contains("using names_v1_exact"),
                                "{what}: the exact names by their index\n{plan}"
                            ),
                            // The walked term's rows newest first, each person's other
                            // word probed by the same key: no sort of every match. (With a
                            // court, the empty tables' plan starts from the court's cases.)
                            Tier::Prefix if s.court.is_some() => {}
                            Tier::Prefix => assert!(
                                plan.contains("Backward using name_terms_v1_pkey")
                                    && !plan.contains("Sort"),
                                "{what}: a walk of one term newest first\n{plan}"
                            ),
                        }
                    } else {
                        let first = plan
                            .lines()
                            .find(|l| l.contains("SCAN") || l.contains("SEARCH"))
                            .unwrap_or("");
                        assert!(
                            first.contains("SCAN n VIRTUAL TABLE INDEX") && first.contains('M'),
                            "{what}: the name index's matches first\n{plan}"
                        );
                        // FTS5's plan number: its rowid order taken (64), and forward,
                        // not descending (128): the rowid is the negated latest action.
                        let num: i64 = first
                            .split("INDEX ")
                            .nth(1)
                            .and_then(|r| r.split(':').next())
                            .and_then(|n| n.parse().ok())
                            .unwrap_or_else(|| panic!("{what}: FTS5's plan number\n{plan}"));
                        assert!(
                            num & 64 != 0 && num & 128 == 0,
                            "{what}: the name index walked forward in rowid order\n{plan}"
                        );
                        if s.court.is_some() {
                            assert!(
                                plan.contains("SEARCH c USING INDEX"),
                                "{what}: each match's case by key\n{plan}"
                            );
                        }
                        // The page's documents by rowid, the page outside.
                        assert!(
                            plan.contains("SCAN h")
                                && plan.contains("SEARCH p USING INTEGER PRIMARY KEY"),
                            "{what}: the page's documents by rowid\n{plan}"
                        );
                        // The index's order is the rank: nothing sorted but the page.
                        let walk = plan.split("SCAN h").next().unwrap();
                        assert!(
                            !walk.contains("TEMP B-TREE"),
                            "{what}: no sort of every match\n{plan}"
                        );
                    }
                }
            }
        }
    }
}

#[tokio::test]
async fn a_name_search_reads_its_index_in_rank_order() {
    for b in BOTH {
        search_plan(b).await;
    }
}

#[tokio::test]
async fn every_list_shape_is_an_index_walk() {
    for b in BOTH {
        plans(b).await;
    }
}

#[test]
fn unsupported_shapes_are_refused_with_reasons() {
    let refused = |q: CaseQuery, want: &str| {
        let e = lists::case_list(&q, &lists::Source::Views).unwrap_err();
        assert_eq!(e.status, 400);
        assert!(e.detail.contains(want), "{}", e.detail);
    };
    refused(
        CaseQuery {
            equal: vec![("court_short", "KSPH".into()), ("debtor_kind", "F".into())],
            limit: 10,
            ..Default::default()
        },
        "court + debtor_kind",
    );
    refused(
        CaseQuery {
            sort: Some(Sort::Updated),
            equal: vec![("state", "KONKURS".into())],
            limit: 10,
            ..Default::default()
        },
        "sort=updated",
    );
    refused(
        CaseQuery {
            sort: Some(Sort::Latest),
            opened_from: Some("2020-01-01".into()),
            limit: 10,
            ..Default::default()
        },
        "opened_from",
    );
    refused(
        CaseQuery {
            updated_since: Some("2020-01-01".into()),
            limit: 10,
            ..Default::default()
        },
        "updated_since",
    );
    let e = lists::events(
        &EventQuery {
            published_from: Some("2020-01-01".into()),
            limit: 10,
            ..Default::default()
        },
        "x",
        &lists::Source::Views,
    )
    .unwrap_err();
    assert!(e.detail.contains("published_from"), "{}", e.detail);
}

/// A statement of some seconds on either engine.
const SLOW: &str = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000000) \
                    SELECT CAST(COUNT(*) AS TEXT) FROM c";

async fn time_limit(b: Backend) {
    let (store, _db) = store(b).await;
    let state = isir::read::ReadState::new(
        store.clone(),
        isir::read::ReadOptions {
            statement_timeout: Duration::from_millis(300),
            max_connections: 1,
            acquire_timeout: Duration::from_millis(500),
            ..Default::default()
        },
    );
    // Each way a read opens its connection: one statement, a snapshot, many statements.
    for how in ["single", "begin", "many"] {
        let t = Instant::now();
        let mut tx = match how {
            "single" => isir::read::limit::single(&state, Plans::Kept).await,
            "begin" => isir::read::limit::begin(&state).await,
            _ => isir::read::limit::many(&state).await,
        }
        .unwrap();
        let e = tx.texts(SLOW, &[]).await.unwrap_err();
        let took = t.elapsed();
        assert!(isir::read::limit::timed_out(&e), "{b:?} {how}: {e}");
        assert!(
            took < Duration::from_secs(10),
            "{b:?} {how}: stopped after {took:?}"
        );
        drop(tx);
        let p = isir::read::limit::problem(e);
        assert_eq!(p.status, 503);
        assert_eq!(p.retry_after, Some(isir::read::limit::RETRY_AFTER_TIMEOUT));
        let resp = axum::response::IntoResponse::into_response(p);
        assert_eq!(resp.headers()["retry-after"], "5");
        assert_eq!(resp.headers()["content-type"], "application/problem+json");
        // The one connection is free again and answers.
        let mut tx = isir::read::limit::begin(&state).await.unwrap();
        assert_eq!(
            tx.texts("SELECT CAST(1 + 1 AS TEXT)", &[]).await.unwrap(),
            ["2"]
        );
        tx.commit().await.unwrap();
    }
    // A connection goes back to the pool without the limit a read armed on it: once that
    // read's deadline has passed, a reader that arms nothing (`/readyz`, the notifier) on
    // the same connection is not stopped by it (Schemathesis found `/readyz` answering
    // 503 "ran past this server's time limit" this way).
    let mut tx = isir::read::limit::begin(&state).await.unwrap();
    tx.texts("SELECT CAST(1 AS TEXT)", &[]).await.unwrap();
    tx.commit().await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut tx = Tx::begin_read(&state.store).await.unwrap();
    let n = tx
        .texts(
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000) SELECT CAST(COUNT(*) AS TEXT) FROM c",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(n, ["200000"], "{b:?}");
    tx.commit().await.unwrap();
    // A full pool: the second read waits `acquire_timeout`, then a 503 to retry.
    if b == Backend::Postgres {
        let held = isir::read::limit::begin(&state).await.unwrap();
        let e = match isir::read::limit::begin(&state).await {
            Err(p) => p,
            Ok(_) => panic!("a second connection from a pool of one"),
        };
        assert_eq!(e.status, 503);
        assert_eq!(e.retry_after, Some(isir::read::limit::RETRY_AFTER_BUSY));
        drop(held);
    }
    // The writer's pool has no such limit.
    let mut tx = Tx::begin(&store).await.unwrap();
    let n = tx
        .texts(
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 2000000) SELECT CAST(COUNT(*) AS TEXT) FROM c",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(n, ["2000000"]);
    tx.commit().await.unwrap();
}

#[tokio::test]
async fn a_read_past_its_time_limit_is_stopped_sqlite() {
    time_limit(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_read_past_its_time_limit_is_stopped_postgres() {
    time_limit(Backend::Postgres).await;
}

/// The backend process ID of a one-statement read connection.
async fn backend_pid(state: &isir::read::ReadState) -> String {
    let mut tx = isir::read::limit::single(state, Plans::Kept).await.unwrap();
    assert!(
        matches!(tx, Tx::PgRead(_)),
        "one-statement reads on PostgreSQL use the read side's own pool"
    );
    let pid = tx
        .texts("SELECT CAST(pg_backend_pid() AS TEXT)", &[])
        .await
        .unwrap();
    pid[0].clone()
}

/// The read side's own PostgreSQL pool for one-statement reads (`store::pgread`): a
/// connection goes back to the pool after an answer, also a database error; one whose
/// session the server ended is replaced and the read runs on the new one instead of
/// failing; one whose statement was cut off (the request dropped mid-statement) is
/// closed, not handed to the next read in the middle of another's answer; a full pool
/// is a 503 to retry.
#[tokio::test]
async fn the_postgres_read_pool_reuses_replaces_and_closes_connections() {
    let (store, _db) = store(Backend::Postgres).await;
    let state = pool_state(&store, 1, 500);
    let admin = async |sql: &str| {
        let mut tx = Tx::begin(&store).await.unwrap();
        let r = tx.texts(sql, &[]).await.unwrap();
        tx.commit().await.unwrap();
        r
    };
    let first = backend_pid(&state).await;
    assert_eq!(backend_pid(&state).await, first, "the connection is reused");

    // A database error leaves the connection ready: the next read has it.
    let mut tx = isir::read::limit::single(&state, Plans::Kept)
        .await
        .unwrap();
    let e = tx
        .texts("SELECT CAST(1 / 0 AS TEXT)", &[])
        .await
        .unwrap_err();
    assert!(matches!(e, sqlx::Error::Database(_)), "{e}");
    assert_eq!(
        tx.texts("SELECT CAST(2 AS TEXT)", &[]).await.unwrap(),
        ["2"]
    );
    drop(tx);
    assert_eq!(
        backend_pid(&state).await,
        first,
        "kept after a database error"
    );

    // The server ends the idle connection's session (a restart, an operator's
    // pg_terminate_backend): the next read runs on a new connection and answers.
    admin(&format!(
        "SELECT CAST(pg_terminate_backend({first}) AS TEXT)"
    ))
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = backend_pid(&state).await;
    assert_ne!(second, first, "a new connection replaced the ended one");
    assert_eq!(backend_pid(&state).await, second);

    // A read dropped mid-statement: its connection is closed, not reused.
    let mut tx = isir::read::limit::single(&state, Plans::Kept)
        .await
        .unwrap();
    let cut = tokio::time::timeout(
        Duration::from_millis(100),
        tx.texts("SELECT CAST(pg_sleep(2) AS TEXT)", &[]),
    )
    .await;
    assert!(cut.is_err(), "the statement was cut off");
    drop(tx);
    let third = backend_pid(&state).await;
    assert_ne!(
        third, second,
        "the cut-off connection was not handed out again"
    );
    let mut tx = isir::read::limit::single(&state, Plans::Kept)
        .await
        .unwrap();
    assert_eq!(
        tx.texts("SELECT CAST(3 AS TEXT)", &[]).await.unwrap(),
        ["3"],
        "the next read gets its own answer"
    );

    // A full pool (one connection, held): a 503 to retry, after `acquire_timeout`.
    let e = match isir::read::limit::single(&state, Plans::Kept).await {
        Err(p) => p,
        Ok(_) => panic!("a second connection from a pool of one"),
    };
    assert_eq!(e.status, 503);
    assert_eq!(e.retry_after, Some(isir::read::limit::RETRY_AFTER_BUSY));
    drop(tx);

    // A server that refuses connections: a 503 to retry, not a 500.
    let gone = isir::store::pgread::Pool::new(
        "postgres://postgres@127.0.0.1:1/none".parse().unwrap(),
        1,
        Duration::from_millis(500),
    );
    let e = gone.get(Plans::Kept).await.unwrap_err();
    let p = isir::read::limit::problem(e);
    assert_eq!(p.status, 503, "{}", p.detail);
    assert_eq!(p.retry_after, Some(isir::read::limit::RETRY_AFTER_BUSY));
}

/// How the read side's PostgreSQL statements are planned, read off the sessions that ran
/// them (`pg_prepared_statements` of the connection the pool hands out again): the
/// lookups, list pages, the feed and name search keep one plan per connection (generic
/// plans only; PostgreSQL's default planned each execution again); the two kinds of
/// connection share the pool's permits.
#[tokio::test]
async fn postgres_reads_keep_their_plans_and_the_kinds_share_permits() {
    let (store, _db) = store(Backend::Postgres).await;
    store.set_setting("phase", "serve").await.unwrap();
    // (Two for one-statement reads, one for transactions.)
    let state = pool_state(&store, 3, 300);
    let (base, _stop) = common::serve_api(state.clone()).await;
    let http = reqwest::Client::new();
    // The plans PostgreSQL made for the session's statements that read `table` in the
    // order `order`: (generic, custom), summed, on the idle connection of that kind (the
    // one that answered).
    let plans_of = async |plans: Plans, table: &str, order: &str| -> (i64, i64) {
        let mut tx = isir::read::limit::single(&state, plans).await.unwrap();
        let r = tx
            .texts(
                &format!(
                    "SELECT COALESCE(SUM(generic_plans), 0) || '|' || COALESCE(SUM(custom_plans), 0) \
                     FROM pg_prepared_statements WHERE statement LIKE '%FROM {table} %ORDER BY {order}%' \
                     AND statement NOT LIKE '%pg_prepared_statements%'"
                ),
                &[],
            )
            .await
            .unwrap();
        let (g, c) = r[0].split_once('|').unwrap();
        (g.parse().unwrap(), c.parse().unwrap())
    };
    for path in [
        "/v1/cases?court=KSPH&state=KONKURS",
        "/v1/cases?court=KSPH&state=KONKURS",
        "/v1/events?after=5",
    ] {
        let r = http.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}: {}", r.text().await.unwrap());
    }
    let (generic, custom) = plans_of(Plans::Kept, "cases", "opened").await;
    assert_eq!(
        (generic, custom),
        (2, 0),
        "the case list ran twice on one kept generic plan"
    );
    let (generic, custom) = plans_of(Plans::Kept, "timeline", "action_id").await;
    assert_eq!((generic, custom), (1, 0), "the feed's plan is generic");

    let r = http
        .get(format!("{base}/v1/search?q=novak%20ja"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let (generic, custom) = plans_of(Plans::Kept, "name_terms", "").await;
    assert!(
        generic >= 1 && custom == 0,
        "name search keeps its generic plan: generic {generic}, custom {custom}"
    );

    // The two kinds share the permits: with both connections out, a third waits and is
    // a 503 to retry.
    let a = isir::read::limit::single(&state, Plans::Kept)
        .await
        .unwrap();
    let b = isir::read::limit::single(&state, Plans::PerValue)
        .await
        .unwrap();
    for plans in [Plans::Kept, Plans::PerValue] {
        match isir::read::limit::single(&state, plans).await {
            Err(p) => assert_eq!(p.status, 503),
            Ok(_) => panic!("a third connection from a pool of two"),
        }
    }
    drop((a, b));
}

/// A store forced into phase `serve` before its projections are built (an operator's
/// `isir phase set serve --force` while a first rebuild runs): the tables a read needs
/// do not exist yet; every answer is a 503 to retry that says so, not a 500.
async fn unbuilt_projection(b: Backend) {
    let db = common::fresh_db(b).await;
    let store = common::store(&db).await;
    isir::projection::ensure(&store, "cases").await.unwrap();
    store.set_setting("phase", "serve").await.unwrap();
    let (base, _stop) = common::serve_api(isir::read::ReadState::new(
        store.clone(),
        isir::read::ReadOptions::default(),
    ))
    .await;
    let http = reqwest::Client::new();
    for path in [
        "/v1/cases/2008/1",
        "/v1/cases?court=KSPH",
        "/v1/events",
        "/v1/search?q=novak",
        "/v1/subjects?ico=12345678",
        "/readyz",
    ] {
        let r = http.get(format!("{base}{path}")).send().await.unwrap();
        let status = r.status().as_u16();
        let retry = r
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_string());
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(status, 503, "{b:?} {path}: {body}");
        assert_eq!(retry.as_deref(), Some("60"), "{b:?} {path}");
        let detail = body["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("not built yet"), "{b:?} {path}: {body}");
    }
}

#[tokio::test]
async fn a_projection_not_built_is_a_503_sqlite() {
    unbuilt_projection(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_projection_not_built_is_a_503_postgres() {
    unbuilt_projection(Backend::Postgres).await;
}

/// Behind a trusted proxy the rate limit keys on `X-Forwarded-For`'s client; from an
/// untrusted peer the header changes nothing.
#[tokio::test]
async fn the_rate_limit_keys_on_the_client_a_trusted_proxy_names() {
    let (store, _db) = store(Backend::Sqlite).await;
    for trusted in [true, false] {
        let opts = isir::read::ReadOptions {
            rate_per_second: 1,
            burst: 2,
            trusted_proxies: if trusted {
                vec!["127.0.0.0/8".parse().unwrap()]
            } else {
                vec![]
            },
            ..Default::default()
        };
        let (base, _stop) =
            common::serve_api(isir::read::ReadState::new(store.clone(), opts)).await;
        let http = reqwest::Client::new();
        let status = |xff: &'static str| {
            let http = http.clone();
            let url = format!("{base}/v1/stats");
            async move {
                http.get(url)
                    .header("X-Forwarded-For", xff)
                    .send()
                    .await
                    .unwrap()
                    .status()
                    .as_u16()
            }
        };
        // Client A spends its burst of two.
        assert_ne!(status("203.0.113.5").await, 429);
        assert_ne!(status("6.6.6.6, 203.0.113.5").await, 429);
        assert_eq!(status("203.0.113.5").await, 429, "A is limited");
        let b = status("203.0.113.6").await;
        if trusted {
            assert_ne!(b, 429, "B is another client");
        } else {
            assert_eq!(b, 429, "the header is not believed: one peer, one limit");
        }
    }
}

/// A statement of a few milliseconds: under the limit alone, even on a machine busy
/// many times over (it failed at 300 000 rows under a 300 ms limit while builds held
/// both cores), past it only when it starts after the deadline.
const SHORT: &str = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 30000) \
                     SELECT CAST(COUNT(*) AS TEXT) FROM c";

/// A long read (a whole-result stream runs a statement a page) gets the full limit again
/// before each statement (`limit::rearm`): once the limit armed at its start has passed,
/// a rearmed connection runs its next statement to the end, and one not rearmed is
/// stopped. Each kind of limited SQLite read connection: a snapshot (`begin`), a direct
/// connection on the file (`single`, `many`). (A pooled connection without a
/// transaction exists only on a store without a file, which the read side does not
/// limit.)
#[tokio::test]
async fn a_long_read_gets_the_full_limit_again_for_each_statement() {
    let (file, _db) = store(Backend::Sqlite).await;
    let opts = || isir::read::ReadOptions {
        statement_timeout: Duration::from_millis(1_500),
        max_connections: 1,
        acquire_timeout: Duration::from_millis(2_000),
        ..Default::default()
    };
    let on_file = isir::read::ReadState::new(file.clone(), opts());
    for (state, how, kind) in [
        (&on_file, "begin", "sqlite"),
        (&on_file, "single", "direct"),
        (&on_file, "many", "direct"),
    ] {
        for rearm in [true, false] {
            let mut tx = match how {
                "begin" => isir::read::limit::begin(state).await,
                "single" => isir::read::limit::single(state, Plans::Kept).await,
                _ => isir::read::limit::many(state).await,
            }
            .unwrap_or_else(|p| panic!("{kind} {how}: {p:?}"));
            let shape = match &tx {
                Tx::Sqlite(_) => "sqlite",
                Tx::SqliteSingle(_) => "sqlite single",
                Tx::Direct(_) => "direct",
                _ => "other",
            };
            assert_eq!(shape, kind, "{how}");
            // The first page within the limit, then a pause past it (the client reads
            // slowly), then the next page's statement.
            assert_eq!(tx.texts(SHORT, &[]).await.unwrap(), ["30000"]);
            tokio::time::sleep(Duration::from_millis(1_600)).await;
            if rearm {
                isir::read::limit::rearm(state, &mut tx).await.unwrap();
                assert_eq!(
                    tx.texts(SHORT, &[]).await.unwrap(),
                    ["30000"],
                    "{kind}: a rearmed read"
                );
            } else {
                let e = tx.texts(SHORT, &[]).await.unwrap_err();
                assert!(
                    isir::read::limit::timed_out(&e),
                    "{kind}: a read past its limit: {e}"
                );
            }
        }
    }
}
