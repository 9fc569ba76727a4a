//! The read API (first part) on port 0 over both back ends with simulator data: cases,
//! events with pagination to the end, subjects by IČO, birth number and name, masking,
//! erasure, 400s for bad input, 503 before the serve phase, watermark and ETag.

mod common;

use std::collections::BTreeSet;

use common::{BOTH, Backend};
use isir::projection;
use isir::readmodel::CaseDoc;
use isir::readmodel::fold::name_key;
use serde_json::Value;

struct Api {
    base: String,
    http: reqwest::Client,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Api {
    async fn get(&self, path: &str) -> (u16, reqwest::header::HeaderMap, Value) {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let h = r.headers().clone();
        let body = r.json().await.unwrap_or(Value::Null);
        (status, h, body)
    }
}

async fn start(store: isir::store::Store) -> Api {
    start_with(
        store,
        isir::read::ReadOptions {
            rate_per_second: 10_000,
            burst: 10_000,
            ..Default::default()
        },
    )
    .await
}

async fn start_with(store: isir::store::Store, opts: isir::read::ReadOptions) -> Api {
    let (base, tx) = common::serve_api(isir::read::ReadState::new(store, opts)).await;
    Api {
        base,
        http: reqwest::Client::new(),
        _stop: tx,
    }
}

async fn served(
    b: Backend,
) -> (
    isir::sim::Simulator,
    isir::app::App,
    Api,
    isir::sim::SimGuard,
    common::TestDb,
) {
    let (sim, url, g) = common::sim(20_000, 1000, 41).await;
    let db = common::fresh_db(b).await;
    let mut s = common::settings(&url, &db);
    s.poll.max_batches_per_tick = 1000;
    let app = common::app(s).await;
    app.poller().unwrap().poll_once().await;
    for n in projection::NAMES {
        projection::catch_up(&app.store, n, 5000).await.unwrap();
    }
    let api = start(app.store.clone()).await;
    (sim, app, api, g, db)
}

async fn cases(store: &isir::store::Store) -> Vec<CaseDoc> {
    common::texts(store, "SELECT doc FROM cases ORDER BY case_number", &[])
        .await
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// A query value, URL-escaped.
fn q(s: &str) -> String {
    isir::read::params::url_escape(s)
}

fn path_of(case_number: &str) -> String {
    let (n, y) = case_number
        .trim_start_matches("INS ")
        .split_once('/')
        .unwrap();
    format!("/v1/cases/{y}/{n}")
}

#[tokio::test]
async fn phases_gate_the_v1_routes() {
    let (_sim, app, api, _g, _db) = served(Backend::Sqlite).await;
    assert_eq!(api.get("/healthz").await.0, 200);
    let (s, _, body) = api.get("/readyz").await;
    assert_eq!(s, 503, "{body}");
    let (s, h, body) = api.get("/v1/cases/2008/1").await;
    assert_eq!(s, 503);
    assert_eq!(h["content-type"], "application/problem+json");
    assert!(
        body["detail"].as_str().unwrap().contains("ingest"),
        "{body}"
    );
    app.store.set_setting("phase", "serve").await.unwrap();
    assert_eq!(api.get("/readyz").await.0, 200);
    // An unknown parameter is named with what the endpoint takes, or that it takes none
    // (the stats and one case take none).
    for path in ["/v1/stats?court=KSPH", "/v1/cases/2008/1?x=1"] {
        let (s, _, body) = api.get(path).await;
        assert_eq!(s, 400, "{path}: {body}");
        let detail = body["detail"].as_str().unwrap();
        assert!(
            detail.ends_with("this endpoint takes no parameters"),
            "{path}: {detail}"
        );
    }
    let (s, _, body) = api.get("/v1/cases?x=1").await;
    assert_eq!(s, 400);
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("takes") && detail.contains("limit"),
        "{detail}"
    );
}

async fn endpoints(b: Backend) {
    let (sim, app, api, _g, _db) = served(b).await;
    app.store.set_setting("phase", "serve").await.unwrap();
    let docs = cases(&app.store).await;
    let head = sim.head_id().unwrap();

    // One case, with the watermark in headers and body, and an ETag.
    let c = docs
        .iter()
        .find(|d| !d.erased && d.administrator.is_some())
        .unwrap();
    let (s, h, body) = api.get(&path_of(&c.case_number)).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["case"]["case_number"], c.case_number.as_str());
    assert_eq!(body["case"]["state"], c.state.clone().unwrap().as_str());
    assert_eq!(body["watermark"]["action_id"], head);
    assert_eq!(h["isir-watermark"], head.to_string().as_str());
    assert_eq!(h["isir-lag-seconds"], "0");
    let etag = h["etag"].to_str().unwrap().to_string();
    let r = api
        .http
        .get(format!("{}{}", api.base, path_of(&c.case_number)))
        .header("If-None-Match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 304);

    // Not found, bad input.
    let (s, _, body) = api.get("/v1/cases/2008/999999").await;
    assert_eq!(s, 404, "{body}");
    for bad in [
        "/v1/cases/20x8/1",
        "/v1/cases/1999/1",
        "/v1/cases/2008/-3",
        "/v1/cases/2008/1?x=1",
    ] {
        let (s, h, body) = api.get(bad).await;
        assert_eq!(s, 400, "{bad}: {body}");
        assert_eq!(h["content-type"], "application/problem+json");
        assert!(!body["detail"].as_str().unwrap().is_empty());
    }

    // Events: pages to the end equal the timeline.
    let big = docs.iter().max_by_key(|d| d.documents).unwrap();
    let mut path = format!("{}/events?limit=3", path_of(&big.case_number));
    let mut got = Vec::new();
    loop {
        let (s, _, body) = api.get(&path).await;
        assert_eq!(s, 200, "{body}");
        got.extend(
            body["events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["action_id"].as_i64().unwrap()),
        );
        match body["next"].as_str() {
            Some(n) => path = n.to_string(),
            None => break,
        }
    }
    let want: Vec<i64> = sim
        .truth_all()
        .iter()
        .filter(|a| a.case_number == big.case_number)
        .map(|a| a.id)
        .collect();
    assert_eq!(got, want);
    let (_, _, unpaged) = api
        .get(&format!("{}/events?limit=1000", path_of(&big.case_number)))
        .await;
    assert_eq!(unpaged["events"].as_array().unwrap().len(), want.len());
    assert!(unpaged["events"][0]["secondary_action"].is_boolean());
    for bad in [
        "?limit=0",
        "?limit=5000",
        "?limit=x",
        "?cursor=!!",
        "?cursor=WyJ4Il0",
    ] {
        let (s, _, body) = api
            .get(&format!("{}/events{bad}", path_of(&big.case_number)))
            .await;
        assert_eq!(s, 400, "{bad}: {body}");
    }

    // Subjects by IČO, birth number (only with the `pii` scope) and name without
    // diacritics. Without the scope a person ID is its opaque reference.
    let privacy = isir::store::key::load(&app.store).await.unwrap();
    let reff = |id: &str| privacy.person_ref(id);
    let company = docs
        .iter()
        .flat_map(|d| d.debtors.iter())
        .find(|p| p.ico.is_some())
        .unwrap();
    let (s, _, body) = api
        .get(&format!(
            "/v1/subjects?ico={}",
            company.ico.as_ref().unwrap()
        ))
        .await;
    assert_eq!(s, 200, "{body}");
    assert!(
        body["subjects"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["person_id"] == reff(&company.person_id).as_str())
    );
    let person = docs
        .iter()
        .flat_map(|d| d.debtors.iter())
        .find(|p| p.kind.as_deref() == Some("F"))
        .unwrap();
    let full: isir::readmodel::PartyDoc = serde_json::from_str(
        &common::texts(
            &app.store,
            "SELECT doc FROM parties WHERE person_id = $1",
            &[person.person_id.as_str().into()],
        )
        .await[0],
    )
    .unwrap();
    let rc = full.birth_number.clone().unwrap();
    let (s, _, body) = api
        .get(&format!("/v1/subjects?rc={}", rc.replace('/', "")))
        .await;
    assert_eq!(s, 403, "a birth number search needs the pii scope: {body}");
    assert_eq!(body["status"], 403);
    let surname = person.name.clone().unwrap();
    let ascii = name_key(&surname).to_uppercase();
    let (s, _, body) = api.get(&format!("/v1/subjects?name={ascii}&limit=2")).await;
    assert_eq!(s, 200, "{body}");
    // Pages through all namesakes.
    let mut seen = BTreeSet::new();
    let mut page = body;
    loop {
        for p in page["subjects"].as_array().unwrap() {
            assert_eq!(name_key(p["name"].as_str().unwrap()), name_key(&surname));
            assert!(seen.insert(
                p["person_id"].as_str().unwrap().to_string() + p["case_number"].as_str().unwrap()
            ));
        }
        match page["next"].as_str() {
            Some(n) => page = api.get(n).await.2,
            None => break,
        }
    }
    assert!(seen.iter().any(|k| k.starts_with(&reff(&person.person_id))));
    let hit = common::texts(
        &app.store,
        "SELECT case_number FROM parties WHERE person_id = $1",
        &[person.person_id.as_str().into()],
    )
    .await;
    let (_, _, body) = api
        .get(&format!("/v1/subjects?name={ascii}&limit=1000"))
        .await;
    let hit = body["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| {
            p["person_id"] == reff(&person.person_id).as_str()
                && p["case_number"] == hit[0].as_str()
        })
        .unwrap()
        .clone();
    assert_eq!(hit["birth_number"], "***", "birth numbers are masked");
    assert_eq!(hit["birth_date"], "***");
    for bad in [
        "/v1/subjects",
        "/v1/subjects?ico=12&rc=1",
        "/v1/subjects?ico=abc",
        "/v1/subjects?color=red",
    ] {
        assert_eq!(api.get(bad).await.0, 400, "{bad}");
    }

    // Erased debtors never appear; the case does, with its erasure status. Which debtors
    // are erased comes from the truth (the generator's own cases), and each is looked up
    // with the `pii` scope by birth number, IČO and full name, so that nothing but the
    // erasure can hide them.
    let erased = docs.iter().find(|d| d.erased).expect("an erased case");
    let (_, _, body) = api.get(&path_of(&erased.case_number)).await;
    assert_eq!(body["case"]["erased"], true);
    assert_eq!(body["case"]["debtors"].as_array().unwrap().len(), 0);
    let pii = {
        use sha2::Digest;
        start_with(
            app.store.clone(),
            isir::read::ReadOptions {
                rate_per_second: 10_000,
                burst: 10_000,
                keys: vec![isir::config::ApiKey {
                    name: "analyst".into(),
                    sha256: hex::encode(sha2::Sha256::digest(b"k-pii")),
                    scopes: vec!["pii".into()],
                }],
                ..Default::default()
            },
        )
        .await
    };
    let get_pii = |path: String| {
        let r = pii
            .http
            .get(format!("{}{path}", pii.base))
            .header("x-api-key", "k-pii");
        async move {
            let r = r.send().await.unwrap();
            assert_eq!(r.status(), 200, "{path}");
            r.json::<Value>().await.unwrap()
        }
    };
    let truth = sim.truth_debtors();
    let gone: Vec<_> = truth.iter().filter(|d| d.erased).collect();
    assert!(!gone.is_empty(), "the truth has erased debtors");
    let (mut by_rc, mut by_ico) = (0, 0);
    for d in &gone {
        let p = &d.person;
        let mut lookups = Vec::new();
        if let Some(rc) = &p.birth_number {
            by_rc += 1;
            lookups.push(format!("/v1/subjects?rc={}", q(rc)));
        }
        if let Some(ico) = &p.ico {
            by_ico += 1;
            lookups.push(format!("/v1/subjects?ico={}", q(ico)));
        }
        let full = [p.first_name.as_deref(), p.name.as_deref()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(" ");
        lookups.push(format!("/v1/subjects?name={}", q(&full)));
        lookups.push(format!("/v1/search?q={}&limit=1000", q(&full)));
        for path in lookups {
            let body = get_pii(path.clone()).await;
            let rows = body["subjects"].as_array().cloned().unwrap_or_default();
            assert!(
                !rows
                    .iter()
                    .any(|r| r["case_number"] == d.case_number.as_str() && r["role"] == "DLUŽNÍK"),
                "{path}: the erased debtor of {} appears",
                d.case_number
            );
        }
        // Not even by the case: its answer holds no debtor.
        let (s, _, body) = api.get(&path_of(&d.case_number)).await;
        if s == 200 {
            assert_eq!(body["case"]["erased"], true, "{}", d.case_number);
            assert_eq!(
                body["case"]["debtors"],
                serde_json::json!([]),
                "{}",
                d.case_number
            );
        }
    }
    assert!(
        by_rc > 0 && by_ico > 0,
        "erased debtors with a birth number ({by_rc}) and an IČO ({by_ico})"
    );
}

#[tokio::test]
async fn endpoints_sqlite() {
    endpoints(Backend::Sqlite).await;
}

#[tokio::test]
async fn endpoints_postgres() {
    endpoints(Backend::Postgres).await;
}

/// The read path does not depend on the writer: no poller, no Redis, still served.
#[tokio::test]
async fn serves_without_the_writer() {
    let mut redis = common::OwnRedis::start();
    for b in BOTH {
        let (sim, url, g) = common::sim(5_000, 1000, 41).await;
        let db = common::fresh_db(b).await;
        let settings = common::with_redis(common::settings(&url, &db), &redis.url());
        let app = common::app(settings.clone()).await;
        app.poller().unwrap().poll_once().await;
        for n in projection::NAMES {
            projection::catch_up(&app.store, n, 5000).await.unwrap();
        }
        app.store.set_setting("phase", "serve").await.unwrap();
        let case = cases(&app.store).await.remove(0).case_number;
        // The writer's Redis and source go away.
        g.stop().await;
        drop(app);
        redis.stop();
        // As `isir serve` does, with `redis.url` still configured: a read-only pool,
        // the lease and budget only shown on the status page.
        let store = isir::store::Store::connect_read_only(&db.url, 4)
            .await
            .unwrap();
        assert!(
            store.set_setting("phase", "off").await.is_err(),
            "the read path cannot write"
        );
        let (lease, _, _) = isir::app::App::lease_and_budget(&settings, &store).unwrap();
        let state = isir::read::ReadState::new(
            store.clone(),
            isir::read::ReadOptions {
                rate_per_second: 10_000,
                burst: 10_000,
                ..Default::default()
            },
        )
        .with_status(isir::status::StatusSource {
            settings: settings.clone(),
            store,
            lease: std::sync::Arc::new(lease),
        });
        let (base, tx) = common::serve_api(state).await;
        let api = Api {
            base,
            http: reqwest::Client::new(),
            _stop: tx,
        };
        let (s, _, body) = api.get(&path_of(&case)).await;
        assert_eq!(s, 200, "{b:?}: {body}");
        assert_eq!(body["case"]["case_number"], case.as_str());
        assert_eq!(api.get("/readyz").await.0, 200, "{b:?}");
        assert_eq!(api.get("/v1/stats").await.0, 200, "{b:?}");
        // The status page answers too, saying what it cannot read.
        let r = api.http.get(format!("{}/", api.base)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{b:?}");
        drop(sim);
        redis = common::OwnRedis::start();
    }
}

async fn walk(api: &Api, first: &str, key: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut path = first.to_string();
    loop {
        let (s, _, body) = api.get(&path).await;
        assert_eq!(s, 200, "{path}: {body}");
        out.extend(body[key].as_array().unwrap().iter().cloned());
        match body["next"].as_str() {
            Some(n) => path = n.to_string(),
            None => return out,
        }
    }
}

async fn lists(b: Backend) {
    let (sim, app, api, _g, _db) = served(b).await;
    app.store.set_setting("phase", "serve").await.unwrap();
    let docs = cases(&app.store).await;

    // All cases by opening, paged, equal the projection; by latest action, newest first.
    let all = walk(&api, "/v1/cases?limit=97", "cases").await;
    assert_eq!(all.len(), docs.len());
    let mut by_opened: Vec<(String, String)> = docs
        .iter()
        .map(|d| (d.opened.clone(), d.case_number.clone()))
        .collect();
    by_opened.sort();
    let got: Vec<(String, String)> = all
        .iter()
        .map(|c| {
            (
                c["opened"].as_str().unwrap().to_string(),
                c["case_number"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(got, by_opened);
    let latest = walk(&api, "/v1/cases?sort=latest&limit=250", "cases").await;
    assert_eq!(latest.len(), docs.len());
    assert!(
        latest
            .windows(2)
            .all(|w| w[0]["latest_action_id"].as_i64() >= w[1]["latest_action_id"].as_i64())
    );

    // Filters.
    let court = docs[0].court_short.clone().unwrap();
    let state = docs[0].state.clone().unwrap();
    let want = docs
        .iter()
        .filter(|d| d.court_short.as_deref() == Some(&court) && d.state.as_deref() == Some(&state))
        .count();
    let got = walk(
        &api,
        &format!("/v1/cases?court={court}&state={}&limit=1000", url(&state)),
        "cases",
    )
    .await;
    assert_eq!(got.len(), want);
    let from = &docs[docs.len() / 2].opened;
    let got = walk(
        &api,
        &format!("/v1/cases?opened_from={from}&limit=1000"),
        "cases",
    )
    .await;
    assert_eq!(got.len(), docs.iter().filter(|d| &d.opened >= from).count());
    let debtor = docs
        .iter()
        .flat_map(|d| d.debtors.iter().map(move |p| (d, p)))
        .find(|(_, p)| p.ico.is_some())
        .unwrap();
    let got = walk(
        &api,
        &format!("/v1/cases?debtor_ico={}", debtor.1.ico.as_ref().unwrap()),
        "cases",
    )
    .await;
    assert!(
        got.iter()
            .any(|c| c["case_number"] == debtor.0.case_number.as_str())
    );
    let f = docs
        .iter()
        .filter(|d| d.debtor_kind.as_deref() == Some("F"))
        .count();
    assert_eq!(
        walk(&api, "/v1/cases?debtor_kind=F&limit=1000", "cases")
            .await
            .len(),
        f
    );
    // Updated since a date, newest publication first, in pages.
    let mut by_pub: Vec<&CaseDoc> = docs.iter().collect();
    by_pub.sort_by(|a, b| {
        (&b.latest_published, &b.case_number).cmp(&(&a.latest_published, &a.case_number))
    });
    let since = by_pub[by_pub.len() / 3].latest_published[..10].to_string();
    let want: Vec<&str> = by_pub
        .iter()
        .filter(|d| d.latest_published[..10] >= *since)
        .map(|d| d.case_number.as_str())
        .collect();
    let got = walk(
        &api,
        &format!("/v1/cases?sort=updated&updated_since={since}&limit=13"),
        "cases",
    )
    .await;
    let got: Vec<&str> = got
        .iter()
        .map(|c| c["case_number"].as_str().unwrap())
        .collect();
    assert_eq!(got, want);
    let got = walk(
        &api,
        &format!("/v1/cases?sort=updated&court={court}&limit=1000"),
        "cases",
    )
    .await;
    assert_eq!(
        got.len(),
        docs.iter()
            .filter(|d| d.court_short.as_deref() == Some(&court))
            .count()
    );
    // Shapes no index serves in order are refused, saying what is supported.
    for bad in [
        "/v1/cases?court=KSPH&debtor_kind=F",
        "/v1/cases?sort=latest&opened_from=2020-01-01",
        "/v1/cases?updated_since=2020-01-01",
        "/v1/cases?sort=updated&state=KONKURS",
        "/v1/events?published_from=2020-01-01",
    ] {
        let (s, _, body) = api.get(bad).await;
        assert_eq!(s, 400, "{bad}: {body}");
        assert!(
            body["detail"].as_str().unwrap().contains("not"),
            "{bad}: {body}"
        );
    }
    for bad in [
        "/v1/cases?court=XX",
        "/v1/cases?opened_from=2020-13-01",
        "/v1/cases?sort=name",
        "/v1/cases?debtor_ico=x",
        "/v1/cases?cursor=abc",
        "/v1/cases?limit=1001",
    ] {
        assert_eq!(api.get(bad).await.0, 400, "{bad}");
    }

    // The change feed from an action ID, paged, equals the timeline after it.
    let truth = sim.truth_all();
    let from = truth[truth.len() - 2500].id;
    let evs = walk(
        &api,
        &format!("/v1/events?after={from}&limit=1000"),
        "events",
    )
    .await;
    let want: Vec<i64> = truth
        .iter()
        .filter(|a| a.id > from && a.case_number != "INS -1/-1")
        .map(|a| a.id)
        .collect();
    assert_eq!(
        evs.iter()
            .map(|e| e["action_id"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        want
    );
    let t63 = walk(&api, "/v1/events?type=63&limit=1000", "events").await;
    assert_eq!(
        t63.len(),
        truth.iter().filter(|a| a.type_code == "63").count()
    );
    let one = walk(
        &api,
        &format!("/v1/events?case={}", url(&docs[3].case_number)),
        "events",
    )
    .await;
    assert_eq!(
        one.len(),
        truth
            .iter()
            .filter(|a| a.case_number == docs[3].case_number)
            .count()
    );
    for bad in [
        "/v1/events?after=x",
        "/v1/events?type=abc",
        "/v1/events?case=4711",
        "/v1/events?court=??",
    ] {
        assert_eq!(api.get(bad).await.0, 400, "{bad}");
    }

    // Stats add up.
    let (s, _, st) = api.get("/v1/stats").await;
    assert_eq!(s, 200);
    for dim in ["by_state", "by_court", "by_month"] {
        let sum: i64 = st[dim]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_i64().unwrap())
            .sum();
        assert_eq!(sum as usize, docs.len(), "{dim}");
    }
}

fn url(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn lists_feed_and_stats_sqlite() {
    lists(Backend::Sqlite).await;
}

#[tokio::test]
async fn lists_feed_and_stats_postgres() {
    lists(Backend::Postgres).await;
}

#[tokio::test]
async fn answers_are_compressed_and_bodies_refused() {
    let (_sim, app, api, _g, _db) = served(Backend::Sqlite).await;
    app.store.set_setting("phase", "serve").await.unwrap();
    let raw = reqwest::Client::builder().no_gzip().build().unwrap();
    let r = raw
        .get(format!("{}/v1/cases?limit=200", api.base))
        .header("Accept-Encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-encoding"], "gzip");
    let r = raw
        .post(format!("{}/v1/cases", api.base))
        .body(vec![b'x'; 100_000])
        .send()
        .await
        .unwrap();
    assert!(r.status() == 405 || r.status() == 413, "{}", r.status());
}

/// Every list also answers as CSV and NDJSON, with the same filters and pages.
#[tokio::test]
async fn csv_and_ndjson_equal_json() {
    for b in BOTH {
        let (_sim, app, api, _g, _db) = served(b).await;
        app.store.set_setting("phase", "serve").await.unwrap();
        for (path, key, id) in [
            ("/v1/cases?sort=latest&limit=40", "cases", "case_number"),
            (
                "/v1/events?after=0&limit=300&type=63",
                "events",
                "action_id",
            ),
            ("/v1/subjects?name=novak&limit=7", "subjects", "person_id"),
        ] {
            let json: Vec<String> = walk(&api, path, key)
                .await
                .iter()
                .map(|v| match &v[id] {
                    Value::String(s) => s.clone(),
                    o => o.to_string(),
                })
                .collect();
            assert!(json.len() > 5, "{path}");
            for fmt in ["csv", "ndjson"] {
                let mut ids = Vec::new();
                let mut next = Some(format!("{path}&format={fmt}"));
                while let Some(p) = next.take() {
                    let r = api
                        .http
                        .get(format!("{}{p}", api.base))
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(r.status(), 200);
                    assert!(r.headers().contains_key("isir-watermark"));
                    next = r.headers().get("link").map(|l| {
                        let l = l.to_str().unwrap();
                        l[1..l.find('>').unwrap()].to_string()
                    });
                    let text = r.text().await.unwrap();
                    if fmt == "csv" {
                        let mut rd = csv::Reader::from_reader(text.as_bytes());
                        let col = rd.headers().unwrap().iter().position(|h| h == id).unwrap();
                        ids.extend(rd.records().map(|r| r.unwrap()[col].to_string()));
                    } else {
                        ids.extend(text.lines().map(|l| {
                            let v: Value = serde_json::from_str(l).unwrap();
                            match &v[id] {
                                Value::String(s) => s.clone(),
                                o => o.to_string(),
                            }
                        }));
                    }
                }
                assert_eq!(ids, json, "{fmt} of {path} on {b:?}");
            }
            // Accept works too.
            let r = api
                .http
                .get(format!("{}{path}", api.base))
                .header("Accept", "text/csv")
                .send()
                .await
                .unwrap();
            assert!(
                r.headers()["content-type"]
                    .to_str()
                    .unwrap()
                    .starts_with("text/csv")
            );
        }
        assert_eq!(api.get("/v1/cases?format=xml").await.0, 400);
    }
}

#[tokio::test]
async fn pii_scope_and_rate_limit() {
    use sha2::Digest;
    let (_sim, app, _api, _g, _db) = served(Backend::Sqlite).await;
    app.store.set_setting("phase", "serve").await.unwrap();
    let hash = |k: &str| hex::encode(sha2::Sha256::digest(k.as_bytes()));
    let keys = vec![
        isir::config::ApiKey {
            name: "analyst".into(),
            sha256: hash("secret-analyst"),
            scopes: vec!["pii".into()],
        },
        isir::config::ApiKey {
            name: "public".into(),
            sha256: hash("secret-public"),
            scopes: vec![],
        },
    ];
    let api = start_with(
        app.store.clone(),
        isir::read::ReadOptions {
            rate_per_second: 1,
            burst: 5,
            keys,
            ..Default::default()
        },
    )
    .await;
    let rc = common::texts(
        &app.store,
        "SELECT rc FROM parties WHERE rc IS NOT NULL LIMIT 1",
        &[],
    )
    .await
    .remove(0);
    let ask = |key: Option<&'static str>| {
        let mut r = api.http.get(format!("{}/v1/subjects?rc={rc}", api.base));
        if let Some(k) = key {
            r = r.header("X-API-Key", k);
        }
        r.send()
    };
    let body: Value = ask(Some("secret-analyst"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        body["subjects"][0]["birth_number"],
        rc.as_str(),
        "pii scope sees birth numbers"
    );
    let body: Value = ask(Some("secret-public"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        body["status"], 403,
        "a key without the pii scope cannot search by it"
    );
    // Unknown keys count against the client address like anonymous requests: 5 in a
    // burst, then 429 with Retry-After (guessing keys is limited too).
    let mut codes = Vec::new();
    for _ in 0..8 {
        let r = ask(Some("wrong")).await.unwrap();
        codes.push(r.status().as_u16());
        if r.status() == 429 {
            assert!(
                r.headers()["retry-after"]
                    .to_str()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
                    >= 1
            );
        }
    }
    // The burst of 5 passes (to a 401); after it, at most one token refills per second.
    assert!(codes[..5].iter().all(|c| *c == 401), "{codes:?}");
    assert!(
        codes.iter().filter(|c| **c == 429).count() >= 2,
        "{codes:?}"
    );
}

#[tokio::test]
async fn metrics_in_prometheus_text() {
    let (_sim, app, api, _g, _db) = served(Backend::Sqlite).await;
    app.store.set_setting("phase", "serve").await.unwrap();
    assert_eq!(api.get("/v1/stats").await.0, 200);
    let text = api
        .http
        .get(format!("{}/metrics", api.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // Prometheus conventions: HELP and TYPE for each metric, units in the names, the
    // request outcome as a label, the build.
    assert!(
        text.contains("isir_http_request_duration_seconds_bucket"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("isir_http_requests_total{")
                && l.contains("route=\"/v1/stats\"")
                && l.contains("status=\"200\"")),
        "{text}"
    );
    assert!(text.contains("isir_build_info{version=\""), "{text}");
    assert!(
        text.contains("isir_last_successful_tick_timestamp_seconds "),
        "{text}"
    );
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name = line.split(['{', ' ']).next().unwrap();
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .filter(|b| text.contains(&format!("# TYPE {b} histogram")))
            .unwrap_or(name);
        assert!(
            text.contains(&format!("# HELP {base} ")),
            "no HELP for {base}:\n{text}"
        );
    }
    assert!(
        text.contains("isir_actions_stored_total"),
        "the poller's counters too: {text}"
    );
}

/// `/openapi.json` is OpenAPI 3.1, describes every served route with the parameters the
/// handlers accept, and its schemas describe what the handlers answer.
#[tokio::test]
async fn openapi_describes_every_route() {
    let (_sim, app, api, _g, _db) = served(Backend::Sqlite).await;
    app.store.set_setting("phase", "serve").await.unwrap();
    let (status, h, spec) = api.get("/openapi.json").await;
    assert_eq!(status, 200);
    assert!(
        h["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    assert!(spec["openapi"].as_str().unwrap().starts_with("3.1"));
    let paths: BTreeSet<String> = spec["paths"].as_object().unwrap().keys().cloned().collect();
    for p in [
        "/v1/cases/{year}/{number}",
        "/v1/cases/{year}/{number}/events",
        "/v1/cases",
        "/v1/subjects",
        "/v1/subjects/lookup",
        "/v1/search",
        "/v1/events",
        "/v1/stats",
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
    ] {
        assert!(paths.contains(p), "{p} is not described");
    }
    let params = |p: &str| -> BTreeSet<String> {
        spec["paths"][p]["get"]["parameters"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|x| x["name"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(
        params("/v1/events"),
        [
            "after",
            "type",
            "ico",
            "published_from",
            "published_to",
            "court",
            "case",
            "limit",
            "count",
            "format",
            "stream"
        ]
        .map(String::from)
        .into()
    );
    assert!(params("/v1/cases/{year}/{number}/events").contains("stream"));
    // List parameters are arrays, repeated (`?ico=a&ico=b`).
    let ico = spec["paths"]["/v1/subjects"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "ico")
        .unwrap();
    assert_eq!(ico["schema"]["type"], "array", "{ico}");
    assert_eq!(ico["style"], "form");
    assert_eq!(ico["explode"], true);
    // The bulk lookup is a POST with a JSON body.
    assert!(
        spec["paths"]["/v1/subjects/lookup"]["post"]["requestBody"]["content"]["application/json"]
            .is_object()
    );
    assert!(params("/v1/cases").contains("debtor_name"));
    assert!(params("/v1/subjects").contains("rc"));
    // A parameter the description does not name is refused.
    let (status, _, body) = api.get("/v1/events?bogus=1").await;
    assert_eq!(status, 400);
    assert!(body["detail"].as_str().unwrap().contains("bogus"));
    // Every /v1 operation documents its error answers.
    for p in paths.iter().filter(|p| p.starts_with("/v1")) {
        let op = if p.ends_with("/lookup") {
            "post"
        } else {
            "get"
        };
        let rs = &spec["paths"][p][op]["responses"];
        for code in ["200", "400", "429", "503"] {
            assert!(rs.get(code).is_some(), "{p} does not document {code}");
        }
    }
    // The case schema names the fields a case answer has.
    let (_, _, list) = api.get("/v1/cases?limit=1000").await;
    let props = spec["components"]["schemas"]["CaseDoc"]["properties"]
        .as_object()
        .unwrap();
    let cases = list["cases"].as_array().unwrap();
    assert!(cases.len() > 100);
    for case in cases {
        for k in case.as_object().unwrap().keys() {
            assert!(props.contains_key(k), "CaseDoc schema lacks {k}");
        }
    }
}

/// Bulk lookups, list parameters and the feed's new filters, against the simulator's
/// truth: the debtors it generated (with their IČOs and birth numbers) and the actions
/// it published.
async fn lookups_and_lists(b: Backend) {
    use sha2::Digest;
    use std::collections::{BTreeMap, HashSet};
    let (sim, app, _api, _g, _db) = served(b).await;
    app.store.set_setting("phase", "serve").await.unwrap();
    let hash = |k: &str| hex::encode(sha2::Sha256::digest(k.as_bytes()));
    let api = start_with(
        app.store.clone(),
        isir::read::ReadOptions {
            rate_per_second: 10_000,
            burst: 10_000,
            keys: vec![isir::config::ApiKey {
                name: "analyst".into(),
                sha256: hash("secret-analyst"),
                scopes: vec!["pii".into()],
            }],
            ..Default::default()
        },
    )
    .await;
    let post = |body: Value, key: Option<&'static str>| {
        let mut r = api
            .http
            .post(format!("{}/v1/subjects/lookup", api.base))
            .json(&body);
        if let Some(k) = key {
            r = r.header("X-API-Key", k);
        }
        async move {
            let r = r.send().await.unwrap();
            let s = r.status().as_u16();
            (s, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    // The truth: each debtor IČO and birth number with its cases (not erased ones),
    // where an action of the case has published the debtor (its note names the person).
    let truth = sim.truth_all();
    let mut notes: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for x in &truth {
        if let Some(n) = &x.note {
            notes.entry(x.case_number.as_str()).or_default().push(n);
        }
    }
    let published = |case: &str, id: &str| {
        notes
            .get(case)
            .is_some_and(|ns| ns.iter().any(|n| n.contains(id)))
    };
    let mut by_ico: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut by_rc: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for d in sim
        .truth_debtors()
        .into_iter()
        .filter(|d| !d.erased && published(&d.case_number, d.person.id.trim()))
    {
        if let Some(i) = &d.person.ico {
            by_ico
                .entry(i.clone())
                .or_default()
                .insert(d.case_number.clone());
        }
        if let Some(rc) = &d.person.birth_number {
            by_rc
                .entry(rc.clone())
                .or_default()
                .insert(d.case_number.clone());
        }
    }
    assert!(by_ico.len() >= 50, "the fixture has company debtors");
    let known: Vec<String> = by_ico.keys().take(300).cloned().collect();
    let unknown = ["99999901", "99999902"];
    let mut asked: Vec<String> = known.clone();
    asked.insert(3, unknown[0].to_string());
    asked.push(unknown[1].to_string());
    asked.push(known[0].clone()); // a repeat answers once
    let (s, body) = post(serde_json::json!({ "ico": asked }), None).await;
    assert_eq!(s, 200, "{body}");
    // Without the pii scope nothing personal of a natural debtor leaves (traders have
    // an IČO and a birth number): not the birth number, not the register's person ID.
    let text = body.to_string();
    for d in sim.truth_debtors() {
        if let Some(rc) = &d.person.birth_number {
            assert!(
                !text.contains(rc.as_str()),
                "birth number {rc} in an unscoped lookup"
            );
            assert!(
                !text.contains(d.person.id.trim()),
                "person ID {} in an unscoped lookup",
                d.person.id.trim()
            );
        }
    }
    let results = body["results"].as_array().unwrap();
    assert_eq!(results.len(), known.len() + unknown.len());
    assert_eq!(results[3]["value"], unknown[0], "in the order given");
    assert!(body["watermark"]["action_id"].is_i64());
    for r in results {
        let v = r["value"].as_str().unwrap();
        let subjects = r["subjects"].as_array().unwrap();
        match by_ico.get(v) {
            None => {
                assert_eq!(r["found"], false, "{v}");
                assert!(subjects.is_empty());
            }
            Some(cases) => {
                assert_eq!(r["found"], true, "{v}");
                let got: BTreeSet<String> = subjects
                    .iter()
                    .filter(|p| p["role"] == "DLUŽNÍK")
                    .map(|p| p["case_number"].as_str().unwrap().to_string())
                    .collect();
                assert_eq!(&got, cases, "debtor cases of IČO {v}");
                for p in subjects {
                    assert!(
                        p["person_id"].as_str().unwrap().starts_with("p_"),
                        "masked without the pii scope: {p}"
                    );
                }
            }
        }
    }
    // Debtors erased under § 425 stay gone from a lookup, for every key.
    let erased: Vec<(String, String)> = sim
        .truth_debtors()
        .into_iter()
        .filter(|d| d.erased)
        .filter_map(|d| Some((d.person.ico.clone()?, d.case_number)))
        .collect();
    assert!(
        !erased.is_empty(),
        "the fixture erases some company debtors"
    );
    let icos: Vec<&String> = erased.iter().map(|(i, _)| i).collect();
    let (s, body) = post(serde_json::json!({ "ico": icos }), Some("secret-analyst")).await;
    assert_eq!(s, 200, "{body}");
    for r in body["results"].as_array().unwrap() {
        for p in r["subjects"].as_array().unwrap() {
            let case = p["case_number"].as_str().unwrap();
            assert!(
                !(p["role"] == "DLUŽNÍK"
                    && erased
                        .iter()
                        .any(|(i, c)| c == case && r["value"] == i.as_str())),
                "erased debtor {} of {case} in a lookup",
                r["value"]
            );
        }
    }
    // Birth numbers: only with the scope, and then answered from the truth.
    let rcs: Vec<String> = by_rc.keys().take(20).cloned().collect();
    let (s, _) = post(serde_json::json!({ "rc": rcs }), None).await;
    assert_eq!(s, 403);
    let (s, body) = post(serde_json::json!({ "rc": rcs }), Some("secret-analyst")).await;
    assert_eq!(s, 200, "{body}");
    for r in body["results"].as_array().unwrap() {
        let got: BTreeSet<String> = r["subjects"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["role"] == "DLUŽNÍK")
            .map(|p| p["case_number"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(&got, &by_rc[r["value"].as_str().unwrap()]);
    }
    // Bad lookups are refused whole, naming the key.
    let (s, body) = post(serde_json::json!({ "ico": ["12345678", "12ab"] }), None).await;
    assert_eq!(s, 400);
    assert!(
        body["detail"].as_str().unwrap().contains("ico[1]"),
        "{body}"
    );
    let many: Vec<String> = (0..1001)
        .map(|i| format!("{:08}", 10_000_000 + i))
        .collect();
    assert_eq!(post(serde_json::json!({ "ico": many }), None).await.0, 400);
    let most: Vec<String> = (0..1000)
        .map(|i| format!("{:08}", 10_000_000 + i))
        .collect();
    assert_eq!(
        post(serde_json::json!({ "ico": most }), None).await.0,
        200,
        "the largest lookup fits the body limit"
    );
    assert_eq!(post(serde_json::json!({}), None).await.0, 400);
    assert_eq!(
        post(serde_json::json!({ "ico": [], "x": 1 }), None).await.0,
        400
    );

    // Repeated IČOs on /v1/subjects: the union, paged to the end.
    let (a, b2) = (&known[0], &known[1]);
    let walked = walk(
        &api,
        &format!("/v1/subjects?ico={a}&ico={b2}&limit=2"),
        "subjects",
    )
    .await;
    let got: BTreeSet<(String, String)> = walked
        .iter()
        .filter(|p| p["role"] == "DLUŽNÍK")
        .map(|p| {
            (
                p["ico"].as_str().unwrap().to_string(),
                p["case_number"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: BTreeSet<(String, String)> = [a, b2]
        .iter()
        .flat_map(|i| by_ico[*i].iter().map(|c| (i.to_string(), c.clone())))
        .collect();
    assert_eq!(got, want);
    let walked = walk(
        &api,
        &format!("/v1/cases?debtor_ico={a}&debtor_ico={b2}&limit=1"),
        "cases",
    )
    .await;
    let got: BTreeSet<String> = walked
        .iter()
        .map(|c| c["case_number"].as_str().unwrap().to_string())
        .collect();
    let want: BTreeSet<String> = by_ico[a].union(&by_ico[b2]).cloned().collect();
    assert_eq!(got, want);
    // A single-valued parameter given twice is refused, named.
    let (s, _, body) = api.get("/v1/cases?court=KSPH&court=KSBR").await;
    assert_eq!(s, 400);
    assert!(body["detail"].as_str().unwrap().contains("court"), "{body}");

    // The feed by IČO, type list and publication dates, against the published actions.
    let cases_of: HashSet<&String> = by_ico[a].iter().chain(by_ico[b2].iter()).collect();
    let mut types: Vec<&str> = truth
        .iter()
        .filter(|x| cases_of.contains(&x.case_number))
        .map(|x| x.type_code.as_str())
        .collect();
    types.sort();
    types.dedup();
    // Every type but one, so that the type list filters something out.
    assert!(types.len() >= 2, "{types:?}");
    let types = &types[..types.len() - 1];
    let candidates: Vec<&isir::source::Action> = truth
        .iter()
        .filter(|x| cases_of.contains(&x.case_number) && types.contains(&x.type_code.as_str()))
        .collect();
    let mut days: Vec<&str> = candidates.iter().map(|x| &x.published[..10]).collect();
    days.sort();
    days.dedup();
    assert!(days.len() >= 3, "{days:?}");
    // Both bounds are days with matching actions, and days outside them have some too.
    let (from, to) = (days[1], days[days.len() - 2]);
    let want: Vec<i64> = candidates
        .iter()
        .filter(|x| &x.published[..10] >= from && &x.published[..10] <= to)
        .map(|x| x.id)
        .collect();
    assert!(want.len() < candidates.len());
    let qs: Vec<String> = types.iter().map(|t| format!("type={t}")).collect();
    let walked = walk(
        &api,
        &format!(
            "/v1/events?ico={a}&ico={b2}&{}&published_from={from}&published_to={to}&limit=3",
            qs.join("&")
        ),
        "events",
    )
    .await;
    let got: Vec<i64> = walked
        .iter()
        .map(|e| e["action_id"].as_i64().unwrap())
        .collect();
    assert_eq!(got, want, "in ID order, exactly the matching actions");
}

#[tokio::test]
async fn lookups_and_lists_sqlite() {
    lookups_and_lists(Backend::Sqlite).await;
}

#[tokio::test]
async fn lookups_and_lists_postgres() {
    lookups_and_lists(Backend::Postgres).await;
}

/// The test's own folding of a code to what a user types: lower case, no diacritics.
fn ascii_lower(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            'Á' | 'á' => 'a',
            'Č' | 'č' => 'c',
            'Ď' | 'ď' => 'd',
            'É' | 'é' | 'Ě' | 'ě' => 'e',
            'Í' | 'í' => 'i',
            'Ň' | 'ň' => 'n',
            'Ó' | 'ó' => 'o',
            'Ř' | 'ř' => 'r',
            'Š' | 'š' => 's',
            'Ť' | 'ť' => 't',
            'Ú' | 'ú' | 'Ů' | 'ů' => 'u',
            'Ý' | 'ý' => 'y',
            'Ž' | 'ž' => 'z',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

/// Filter values are checked (issue 35): `state`, `debtor_kind`, `role` and `type` take
/// the register's codes whatever their case and diacritics (`konkurs`, `ODDLUZENI`), and
/// a value that is no code answers 400 naming the valid ones, not 200 with no rows. The
/// codes come from the simulator's truth (the states and kinds of its notes, the type
/// codes of its actions) and PROTOCOL.md's lists.
#[tokio::test]
async fn filter_values_are_codes_in_any_case() {
    use isir::sim::TruthNote;
    let (sim, app, api, _g, _db) = served(Backend::Sqlite).await;
    app.store.set_setting("phase", "serve").await.unwrap();
    let truth = sim.truth_models();
    // Each case's last state, as the feed spells it.
    let mut last_state = std::collections::BTreeMap::new();
    for (a, n) in &truth {
        if let TruthNote::Model(d) = n
            && let Some(s) = d.case.as_ref().and_then(|c| c.state.clone())
        {
            last_state.insert(a.case_number.clone(), s);
        }
    }
    let states: BTreeSet<&String> = last_state.values().collect();
    assert!(states.len() >= 3, "{states:?}");
    for s in states {
        let exact = walk(
            &api,
            &format!("/v1/cases?state={}&limit=1000", q(s)),
            "cases",
        )
        .await;
        assert!(!exact.is_empty(), "{s}");
        assert!(exact.iter().all(|c| c["state"] == s.as_str()));
        for typed in [ascii_lower(s), ascii_lower(s).to_uppercase()] {
            let got = walk(
                &api,
                &format!("/v1/cases?state={}&limit=1000", q(&typed)),
                "cases",
            )
            .await;
            assert_eq!(got, exact, "state={typed} is state={s}");
        }
    }
    let (st, _, body) = api.get("/v1/cases?state=bankrot").await;
    assert_eq!(st, 400, "{body}");
    let detail = body["detail"].as_str().unwrap();
    for code in ["KONKURS", "ODDLUŽENÍ", "NEVYRIZENA", "MORATORIUM"] {
        assert!(detail.contains(code), "{detail}");
    }

    // Debtor kinds: `f` is `F` (PROTOCOL.md: natural person).
    let upper = walk(&api, "/v1/cases?debtor_kind=F&limit=1000", "cases").await;
    assert!(!upper.is_empty());
    assert_eq!(
        walk(&api, "/v1/cases?debtor_kind=f&limit=1000", "cases").await,
        upper
    );
    let (st, _, body) = api.get("/v1/cases?debtor_kind=human").await;
    assert_eq!(st, 400, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("PODNIKATEL"));

    // Roles of the name search: `spravce` is `SPRÁVCE`.
    let admin = truth
        .iter()
        .find_map(|(_, n)| match n {
            TruthNote::Model(d) => d
                .person
                .as_ref()
                .filter(|p| p.role.as_deref() == Some("SPRÁVCE"))
                .and_then(|p| p.name.clone()),
            _ => None,
        })
        .expect("the truth names an administrator");
    let exact = api
        .get(&format!(
            "/v1/search?q={}&role={}&limit=1000",
            q(&admin),
            q("SPRÁVCE")
        ))
        .await;
    assert_eq!(exact.0, 200, "{}", exact.2);
    assert!(!exact.2["subjects"].as_array().unwrap().is_empty());
    let typed = api
        .get(&format!(
            "/v1/search?q={}&role=spravce&limit=1000",
            q(&admin)
        ))
        .await;
    assert_eq!(typed.2["subjects"], exact.2["subjects"]);
    let (st, _, body) = api
        .get(&format!("/v1/search?q={}&role=boss", q(&admin)))
        .await;
    assert_eq!(st, 400, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("VĚŘITEL"));

    // Action types: a code of the data answers its events; a code neither in the code
    // list nor in the data is a 400.
    let code = &truth[truth.len() / 2].0.type_code;
    let (st, _, body) = api.get(&format!("/v1/events?type={code}&limit=5")).await;
    assert_eq!(st, 200, "{body}");
    assert!(!body["events"].as_array().unwrap().is_empty());
    let used: BTreeSet<&str> = truth.iter().map(|(a, _)| a.type_code.as_str()).collect();
    assert!(!used.contains("987654"));
    let (st, _, body) = api.get("/v1/events?type=987654").await;
    assert_eq!(st, 400, "{body}");
}
