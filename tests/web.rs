//! The server-rendered pages on port 0 with simulator data: the status page shows the
//! store's numbers in every phase; the search page finds by name (diacritics and case
//! ignored), IČO, birth number (only with the `pii` scope) and case number; the
//! case page shows states, parties and the timeline with document links; the operator
//! surfaces can be moved to `admin.bind` or put behind an admin key.

mod common;

use std::collections::BTreeSet;

use common::{BOTH, Backend};
use isir::projection;
use isir::readmodel::{CaseDoc, PartyDoc};
use sha2::Digest;

struct Web {
    base: String,
    http: reqwest::Client,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Web {
    async fn get(&self, path: &str) -> (u16, String) {
        self.get_with(path, &[]).await
    }
    async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
        let mut r = self.http.get(format!("{}{path}", self.base));
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        let r = r.send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }
}

fn start(state: isir::read::ReadState, admin: bool) -> (Web, std::net::TcpListener) {
    let std = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std.set_nonblocking(true).unwrap();
    let base = format!("http://{}", std.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let listener = tokio::net::TcpListener::from_std(std.try_clone().unwrap()).unwrap();
    let stop = async move {
        let _ = rx.await;
    };
    if admin {
        tokio::spawn(isir::http::run_admin(listener, state, stop));
    } else {
        tokio::spawn(isir::http::run(listener, state, stop));
    }
    (
        Web {
            base,
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            _stop: tx,
        },
        std,
    )
}

fn opts() -> isir::read::ReadOptions {
    isir::read::ReadOptions {
        rate_per_second: 10_000,
        burst: 10_000,
        keys: vec![isir::config::ApiKey {
            name: "analyst".into(),
            sha256: hex::encode(sha2::Sha256::digest(b"secret-pii")),
            scopes: vec!["pii".into()],
        }],
        ..Default::default()
    }
}

async fn fixture(
    b: Backend,
) -> (
    isir::sim::Simulator,
    isir::app::App,
    isir::sim::SimGuard,
    common::TestDb,
) {
    let (sim, url, g) = common::sim(20_000, 1000, 43).await;
    let db = common::fresh_db(b).await;
    let mut s = common::settings(&url, &db);
    s.poll.max_batches_per_tick = 1000;
    let app = common::app(s).await;
    app.poller().unwrap().poll_once().await;
    for n in projection::NAMES {
        projection::catch_up(&app.store, n, 5000).await.unwrap();
    }
    (sim, app, g, db)
}

fn text_of(html: &str, id: &str) -> String {
    let at = html
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id}"));
    let rest = &html[at..];
    let start = rest.find('>').unwrap() + 1;
    let end = rest[start..].find('<').unwrap();
    rest[start..start + end].to_string()
}

async fn pages(b: Backend) {
    let (sim, app, _g, _db) = fixture(b).await;
    let state =
        isir::read::ReadState::new(app.store.clone(), opts()).with_status(app.status_source());
    let (web, _l) = start(state, false);

    // The status page answers in phase ingest with the store's numbers.
    app.store.set_setting("phase", "ingest").await.unwrap();
    let (s, html) = web.get("/").await;
    assert_eq!(s, 200, "{html}");
    let ws = app.store.writer_state().await.unwrap();
    assert_eq!(text_of(&html, "phase"), "ingest");
    assert_eq!(
        text_of(&html, "checkpoint"),
        ws.checkpoint.unwrap().to_string()
    );
    assert_eq!(text_of(&html, "head"), sim.head_id().unwrap().to_string());
    assert_eq!(text_of(&html, "lag-ids"), "0");
    assert_eq!(text_of(&html, "stored"), "20000");
    let used = app.budget.usage().await.unwrap().used;
    assert_eq!(text_of(&html, "budget-used"), used.to_string());
    assert_eq!(text_of(&html, "proj-cases-lag"), "0");
    assert!(
        html.contains("data-total=\"20000\""),
        "the chart counts the stored actions"
    );
    // Before serve the reader pages say why, in HTML.
    let (s, html) = web.get("/search?q=novak").await;
    assert_eq!(s, 503);
    assert!(html.contains("phase `ingest`"));

    app.store.set_setting("phase", "serve").await.unwrap();
    let (s, html) = web.get("/").await;
    assert_eq!(s, 200);
    assert_eq!(text_of(&html, "api-state"), "ready");

    // Search by name: diacritics and case ignored; erased debtors never appear.
    let all: Vec<PartyDoc> = common::texts(&app.store, "SELECT doc FROM parties", &[])
        .await
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let p = all
        .iter()
        .find(|p| {
            p.role.as_deref() == Some("DLUŽNÍK")
                && p.birth_number.is_some()
                && p.name.as_deref().is_some_and(|n| !n.is_ascii())
        })
        .expect("a natural-person debtor with a diacritic in the name");
    let name = p.name.clone().unwrap();
    let plain: String = isir::readmodel::fold::name_key(&name);
    let (s, html) = web
        .get(&format!("/search?q={}", urlencode(&plain.to_uppercase())))
        .await;
    assert_eq!(s, 200, "{html}");
    assert!(
        html.contains(&name),
        "the page shows {name} with its diacritics"
    );
    let (_, html2) = web.get(&format!("/search?q={}", urlencode(&name))).await;
    let rows = |h: &str| h.matches("<td class=\"name\">").count();
    assert_eq!(rows(&html), rows(&html2));
    let same_key = all
        .iter()
        .filter(|x| x.name.as_deref().map(isir::readmodel::fold::name_key) == Some(plain.clone()))
        .count();
    assert_eq!(rows(&html), same_key.min(100));

    // An administrator is a row in each of their cases, but one person: the heading
    // counts persons and cases (issue 35), the administrator's cases from the truth.
    let mut admins: std::collections::BTreeMap<String, (String, BTreeSet<String>)> =
        Default::default();
    for (a, n) in sim.truth_models() {
        if let isir::sim::TruthNote::Model(d) = n
            && let Some(p) = d.person.filter(|p| p.role.as_deref() == Some("SPRÁVCE"))
        {
            let e = admins.entry(p.id.clone()).or_insert_with(|| {
                (
                    format!(
                        "{} {}",
                        p.first_name.unwrap_or_default(),
                        p.name.unwrap_or_default()
                    ),
                    BTreeSet::new(),
                )
            });
            e.1.insert(a.case_number.clone());
        }
    }
    let (full, theirs) = admins
        .values()
        .filter(|(_, c)| c.len() >= 3)
        .min_by_key(|(_, c)| c.len())
        .expect("an administrator of three cases or more")
        .clone();
    let (s, html) = web.get(&format!("/search?q={}", urlencode(&full))).await;
    assert_eq!(s, 200);
    if !html.contains("id=\"more\"") {
        let at = html.find("id=\"found\"").expect("the heading");
        let heading = &html[at..at + html[at..].find("</h2>").unwrap()];
        let nums: Vec<usize> = heading
            .split("<span class=\"num\">")
            .skip(1)
            .map(|x| x[..x.find('<').unwrap()].parse().unwrap())
            .collect();
        let rows = html.matches("<td class=\"name\">").count();
        let (persons, cases) = (nums[0], nums[1]);
        assert!(cases >= theirs.len(), "{heading}: {theirs:?}");
        assert!(
            persons + theirs.len() - 1 <= rows,
            "{heading}: the administrator counted once, not in each of {} cases ({rows} rows)",
            theirs.len()
        );
        assert!(heading.contains(" persons in ") || heading.contains(" person in "));
    }

    // By birth number: only with the pii key (a 403 page without it), then found and
    // shown.
    let rc = p.birth_number.clone().unwrap();
    let (s, html) = web.get(&format!("/search?q={}", urlencode(&rc))).await;
    assert_eq!(s, 403, "{html}");
    assert!(!html.contains(&rc), "the answer names no person");
    let (s, html) = web
        .get_with(
            &format!("/search?q={}", urlencode(&rc)),
            &[("x-api-key", "secret-pii")],
        )
        .await;
    assert_eq!(s, 200);
    let results = &html[html.find("id=\"results\"").unwrap()..];
    assert!(results.contains(&p.case_number), "{results}");
    assert!(results.contains(&rc));
    // Masked without the key on a name search.
    let (_, html) = web
        .get(&format!("/search?q={}", urlencode(&plain.to_uppercase())))
        .await;
    let results = &html[html.find("id=\"results\"").unwrap()..];
    assert!(
        !results.contains(&rc) && results.contains("***"),
        "{results}"
    );

    // By IČO.
    if let Some(c) = all.iter().find(|p| p.ico.is_some()) {
        let ico = c.ico.clone().unwrap();
        let (s, html) = web.get(&format!("/search?q={ico}")).await;
        assert_eq!(s, 200);
        assert!(html.contains(&c.case_number));
    }
    // A bad query is a clear 400, in HTML.
    let (s, html) = web.get("/search?q=%3Cscript%3E").await;
    assert!(s == 400 || s == 200, "{s}");
    assert!(!html.contains("<script>"), "input is escaped");

    // A case number redirects to the case page.
    let cases: Vec<CaseDoc> = common::texts(&app.store, "SELECT doc FROM cases", &[])
        .await
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let c = cases
        .iter()
        .filter(|c| !c.erased && c.states.len() >= 2 && c.documents > 0)
        .max_by_key(|c| c.documents)
        .unwrap();
    let (n, y) = c.case_number["INS ".len()..].split_once('/').unwrap();
    let (s, _) = web
        .get(&format!("/search?q={}", urlencode(&c.case_number)))
        .await;
    assert_eq!(s, 303);
    let (s, html) = web.get(&format!("/cases/{y}/{n}")).await;
    assert_eq!(s, 200, "{html}");
    assert_eq!(text_of(&html, "case-number"), c.case_number);
    assert_eq!(text_of(&html, "state"), c.state.clone().unwrap());
    assert!(html.matches("</tr>").count() > c.states.len());
    for st in &c.states {
        assert!(html.contains(&st.published));
    }
    let events = common::count(
        &app.store,
        "SELECT COUNT(*) FROM timeline WHERE case_number = $1",
        &c.case_number,
    )
    .await;
    let timeline = &html[html.find("id=\"timeline\"").unwrap()..];
    assert_eq!(timeline.matches("<tr>").count() as i64 - 1, events.min(500));
    assert_eq!(
        timeline.matches(">document</a>").count() as i64,
        c.documents.min(500)
    );
    // Erased debtors never appear on a case page.
    if let Some(e) = cases.iter().find(|c| c.erased) {
        let (n, y) = e.case_number["INS ".len()..].split_once('/').unwrap();
        let (s, html) = web.get(&format!("/cases/{y}/{n}")).await;
        assert_eq!(s, 200);
        assert!(
            html.contains("the debtor&#39;s data are not shown")
                || html.contains("data are not shown")
        );
        assert!(!html.contains(">DLUŽNÍK<"), "an erased debtor is listed");
    }
    let (s, _) = web.get("/cases/2008/999999").await;
    assert_eq!(s, 404);
    let (s, _) = web.get("/cases/abc/1").await;
    assert_eq!(s, 400);
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn pages_sqlite() {
    pages(Backend::Sqlite).await;
}

#[tokio::test]
async fn pages_postgres() {
    pages(Backend::Postgres).await;
}

/// With `admin.bind`, the status page and `/metrics` leave the public listener; with an
/// admin key they answer only to it.
#[tokio::test]
async fn operator_surfaces_apart_or_behind_a_key() {
    let _ = BOTH;
    let (_sim, app, _g, _db) = fixture(Backend::Sqlite).await;
    let key = hex::encode(sha2::Sha256::digest(b"ops-key"));
    let state = isir::read::ReadState::new(app.store.clone(), opts())
        .with_status(app.status_source())
        .with_admin(isir::read::AdminOptions {
            separate: true,
            key_sha256: Some(key),
            targets: Default::default(),
            read_only: false,
        });
    let (public, _l1) = start(state.clone(), false);
    let (admin, _l2) = start(state, true);
    assert_eq!(public.get("/").await.0, 404);
    assert_eq!(public.get("/metrics").await.0, 404);
    assert_eq!(public.get("/healthz").await.0, 200);
    assert_eq!(admin.get("/").await.0, 401);
    assert_eq!(admin.get("/metrics").await.0, 401);
    assert_eq!(
        admin.get_with("/", &[("x-admin-key", "wrong")]).await.0,
        401
    );
    let (s, html) = admin.get_with("/", &[("x-admin-key", "ops-key")]).await;
    assert_eq!(s, 200);
    assert!(html.contains("isir status"));
    assert_eq!(admin.get("/?admin_key=ops-key").await.0, 200);
    assert_eq!(
        admin
            .get_with("/metrics", &[("x-admin-key", "ops-key")])
            .await
            .0,
        200
    );
    assert_eq!(admin.get("/healthz").await.0, 200);
    // No route writes: anything but GET is refused.
    let r = reqwest::Client::new()
        .post(format!("{}/", admin.base))
        .header("x-admin-key", "ops-key")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
}

/// `isir status --json` (the real binary) gives the phase, each projection's cursor and
/// lag, and the API's state, probing `api.bind`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_json_shows_phase_projections_and_api() {
    let (_sim, app, _g, db) = fixture(Backend::Sqlite).await;
    app.store.set_setting("phase", "serve").await.unwrap();
    let state =
        isir::read::ReadState::new(app.store.clone(), opts()).with_status(app.status_source());
    let (web, _l) = start(state, false);
    let bind = web.base.trim_start_matches("http://").to_string();
    let run = |bind: String| {
        let url = db.url.clone();
        std::thread::spawn(move || {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_isir"))
                .args(["status", "--json"])
                .env("ISIR_DATABASE__URL", url)
                .env("ISIR_API__BIND", bind)
                .env("ISIR_LOG", "warn")
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
        })
        .join()
        .unwrap()
    };
    let s = run(bind);
    let cp = app.store.checkpoint().await.unwrap().unwrap();
    assert_eq!(s["phase"], "serve");
    assert_eq!(s["checkpoint"], cp);
    let projections = s["projections"].as_array().unwrap();
    assert_eq!(projections.len(), 3);
    for p in projections {
        assert_eq!(p["cursor"], cp, "{p}");
    }
    assert_eq!(s["api"]["serving"], true);
    assert_eq!(s["api"]["ready"], true);
    assert_eq!(s["api"]["lag_ids"], 0);
    assert_eq!(s["api"]["reachable"], true);
    // Nothing listening there: not reachable; phase project: not serving.
    app.store.set_setting("phase", "project").await.unwrap();
    let s = run("127.0.0.1:1".into());
    assert_eq!(s["api"]["reachable"], false);
    assert_eq!(s["api"]["serving"], false);
    assert_eq!(s["api"]["ready"], false);
}

/// `/metrics` carries the shared state read at scrape time (checkpoint, projection
/// cursors and lag, today's budget), so that a read replica without a poller reports it.
#[tokio::test]
async fn metrics_report_projections_and_budget() {
    let (_sim, app, _g, _db) = fixture(Backend::Sqlite).await;
    let state =
        isir::read::ReadState::new(app.store.clone(), opts()).with_status(app.status_source());
    let (web, _l) = start(state, false);
    let (s, text) = web.get("/metrics").await;
    assert_eq!(s, 200);
    let cp = app.store.checkpoint().await.unwrap().unwrap();
    let usage = app.budget.usage().await.unwrap();
    let value = |name: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!(value("isir_checkpoint_action_id ") as i64, cp);
    for b in ["cases", "parties", "timeline"] {
        assert_eq!(
            value(&format!(
                "isir_projection_cursor_action_id{{builder=\"{b}\"}}"
            )) as i64,
            cp
        );
        assert_eq!(
            value(&format!("isir_projection_lag_ids{{builder=\"{b}\"}}")),
            0.0
        );
    }
    assert_eq!(value("isir_budget_used_requests ") as u64, usage.used);
    assert_eq!(value("isir_budget_remaining_requests ") as u64, usage.left);
    assert!(text.contains("isir_lease_held"), "the poller's gauges too");
    for b in ["cases", "parties", "timeline"] {
        assert_eq!(
            value(&format!("isir_projection_stopped{{builder=\"{b}\"}}")),
            0.0
        );
    }
    // The fixture's ticks reached the head: the time to alert on is the store's.
    let ticked = app.store.last_successful_tick().await.unwrap().unwrap();
    assert_eq!(
        (value("isir_last_successful_tick_timestamp_seconds ") * 1000.0).round() as i64,
        ticked
    );
}

/// Every problem type the API answers with is a page that says what it means, found by
/// resolving the problem's `type` against the request's URL (RFC 9457 §3.1.1); the page
/// gives the same status as the answer.
#[tokio::test]
async fn problem_types_resolve_to_pages() {
    let (_sim, app, _g, _db) = fixture(Backend::Sqlite).await;
    let state = isir::read::ReadState::new(app.store.clone(), opts());
    let (web, _l) = start(state, false);
    let answer = |path: &'static str, key: Option<&'static str>| {
        let web = &web;
        async move {
            let (s, body) = match key {
                Some(k) => web.get_with(path, &[("X-API-Key", k)]).await,
                None => web.get(path).await,
            };
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            (s, v["type"].as_str().unwrap().to_string())
        }
    };
    let mut seen = Vec::new();
    app.store.set_setting("phase", "ingest").await.unwrap();
    seen.push(answer("/v1/stats", None).await);
    app.store.set_setting("phase", "serve").await.unwrap();
    seen.push(answer("/v1/cases?limit=0", None).await);
    seen.push(answer("/v1/cases/2008/999999", None).await);
    seen.push(answer("/v1/subjects?rc=4711180123", None).await);
    seen.push(answer("/v1/stats", Some("no-such-key")).await);
    let kinds: Vec<&str> = seen.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "/problems/unavailable",
            "/problems/bad-parameter",
            "/problems/not-found",
            "/problems/pii-scope",
            "/problems/unknown-key"
        ]
    );
    for (status, kind) in &seen {
        // A reference without a scheme or host: resolved against the request's URL,
        // it is this server's page.
        let (s, html) = web.get(kind).await;
        assert_eq!(s, 200, "{kind}");
        assert_eq!(text_of(&html, "status"), status.to_string(), "{kind}");
    }
    // Every kind the sources answer with has its page.
    let mut stack = vec![std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src"
    ))];
    let mut found = 0;
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        for m in ["Problem::new(", "Self::new("] {
            for (i, _) in text.match_indices(m) {
                let rest = &text[i..];
                if !rest[..rest.find(')').unwrap_or(0).max(1)].contains("StatusCode")
                    && !rest[..200.min(rest.len())].contains("StatusCode")
                {
                    continue;
                }
                let q = rest.find('"').unwrap();
                let kind = &rest[q + 1..q + 1 + rest[q + 1..].find('"').unwrap()];
                found += 1;
                let (s, _) = web.get(&format!("/problems/{kind}")).await;
                assert_eq!(s, 200, "{kind} ({}) has no page", p.display());
            }
        }
    }
    assert!(found >= 8, "the scan found the problem kinds ({found})");
    assert_eq!(web.get("/problems/no-such-thing").await.0, 404);
}
