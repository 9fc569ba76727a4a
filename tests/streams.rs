//! Whole results and counts on both back ends: `?stream=all` gives every row of a list
//! as one CSV or NDJSON answer (equal to the pages walked one by one, and for the feed
//! to the simulator's own actions), within `api.stream_max_rows` without the `stream`
//! scope and refused whole beyond it; `count=` and `Prefer: count=` count the whole
//! result; weak ETags stay while a case does not change and honour `If-None-Match`
//! lists.

mod common;

use common::Backend;
use isir::projection;
use isir::read::params::url_escape;
use serde_json::Value;

fn hash(k: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(k.as_bytes()))
}

async fn text(
    http: &reqwest::Client,
    url: &str,
    key: Option<&str>,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut r = http.get(url);
    if let Some(k) = key {
        r = r.header("X-API-Key", k);
    }
    let r = r.send().await.unwrap();
    let s = r.status().as_u16();
    let h = r.headers().clone();
    (s, h, r.text().await.unwrap())
}

/// The action IDs of an NDJSON stream of events, in order.
fn ndjson_ids(body: &str) -> Vec<i64> {
    body.lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["action_id"]
                .as_i64()
                .unwrap()
        })
        .collect()
}

/// Every page of a JSON list, by its `next` links.
async fn walk(http: &reqwest::Client, base: &str, first: &str, key: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut path = first.to_string();
    loop {
        let (s, _, body) = text(http, &format!("{base}{path}"), None).await;
        assert_eq!(s, 200, "{path}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        out.extend(v[key].as_array().unwrap().iter().cloned());
        match v["next"].as_str() {
            Some(n) => path = n.to_string(),
            None => return out,
        }
    }
}

async fn streams(b: Backend) {
    let (sim, url, _g) = common::sim(20_000, 1000, 47).await;
    let db = common::fresh_db(b).await;
    let mut s = common::settings(&url, &db);
    s.poll.max_batches_per_tick = 1000;
    let app = common::app(s).await;
    app.poller().unwrap().poll_once().await;
    for n in projection::NAMES {
        projection::catch_up(&app.store, n, 5000).await.unwrap();
    }
    app.store.set_setting("phase", "serve").await.unwrap();
    let opts = isir::read::ReadOptions {
        rate_per_second: 10_000,
        burst: 10_000,
        stream_max_rows: 5_000,
        // Streams read in many pages even where a result is short (a case's timeline).
        stream_page: 13,
        keys: vec![isir::config::ApiKey {
            name: "bulk".into(),
            sha256: hash("k-stream"),
            scopes: vec!["stream".into()],
        }],
        ..Default::default()
    };
    let (base, _stop) =
        common::serve_api(isir::read::ReadState::new(app.store.clone(), opts)).await;
    let http = reqwest::Client::new();

    // The whole feed as NDJSON for a key with the `stream` scope: the simulator's own
    // actions, in ID order.
    let (s, h, body) = text(
        &http,
        &format!("{base}/v1/events?format=ndjson&stream=all"),
        Some("k-stream"),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert!(
        h["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/x-ndjson")
    );
    assert!(h.contains_key("isir-watermark"));
    let ids = ndjson_ids(&body);
    // Equal to the feed's pages, and only the register's actions, in ID order (the
    // timeline leaves out the few actions without a case, as its own tests check).
    let paged: Vec<i64> = walk(&http, &base, "/v1/events?limit=1000", "events")
        .await
        .iter()
        .map(|e| e["action_id"].as_i64().unwrap())
        .collect();
    assert!(ids.len() > 5_000, "more rows than the cap: {}", ids.len());
    assert!(
        ids == paged,
        "the stream is the feed's pages: {} vs {} rows",
        ids.len(),
        paged.len()
    );
    // Exactly the register's actions of a case, in ID order: every one but the code-list
    // changes, which the protocol publishes under the case number `INS -1/-1`.
    let truth: Vec<i64> = sim
        .truth_all()
        .iter()
        .filter(|a| a.case_number != "INS -1/-1")
        .map(|a| a.id)
        .collect();
    assert!(
        truth.len() < sim.truth_all().len(),
        "the truth has code-list actions"
    );
    assert!(
        ids == truth,
        "the feed is the truth's actions: {} rows against {}",
        ids.len(),
        truth.len()
    );
    // Without the scope, over the cap: refused before any row, saying why.
    let (s, h, body) = text(
        &http,
        &format!("{base}/v1/events?format=ndjson&stream=all"),
        None,
    )
    .await;
    assert_eq!(s, 403, "{body}");
    assert_eq!(h["content-type"], "application/problem+json");
    assert!(
        body.contains("stream-scope") && body.contains("5000"),
        "{body}"
    );
    // A tool that asks with HEAD first (DuckDB's httpfs) gets the same refusal, and a
    // Range request (its next probe) too: a status, never a body cut short.
    for (method, range) in [("HEAD", None), ("GET", Some("bytes=0-1"))] {
        let mut r = http.request(
            method.parse().unwrap(),
            format!("{base}/v1/events?format=csv&stream=all"),
        );
        if let Some(v) = range {
            r = r.header("Range", v);
        }
        let r = r.send().await.unwrap();
        assert_eq!(r.status(), 403, "{method} {range:?}");
        assert_eq!(r.headers()["content-type"], "application/problem+json");
    }

    // A filtered feed under the cap, anonymously, equals its pages; CSV with one header.
    let court = common::texts(
        &app.store,
        "SELECT court FROM timeline WHERE court IS NOT NULL LIMIT 1",
        &[],
    )
    .await
    .remove(0);
    let paged = walk(
        &http,
        &base,
        &format!("/v1/events?court={court}&limit=333"),
        "events",
    )
    .await;
    let (s, _, body) = text(
        &http,
        &format!("{base}/v1/events?court={court}&format=csv&stream=all"),
        None,
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let mut r = csv::Reader::from_reader(body.as_bytes());
    let hdr = r.headers().unwrap().clone();
    let id_col = hdr.iter().position(|c| c == "action_id").unwrap();
    let got: Vec<i64> = r
        .records()
        .map(|x| x.unwrap()[id_col].parse().unwrap())
        .collect();
    let want: Vec<i64> = paged
        .iter()
        .map(|e| e["action_id"].as_i64().unwrap())
        .collect();
    assert!(!want.is_empty());
    assert_eq!(got, want);
    // The feed counted: the whole filtered feed, and what follows a position in it.
    let (s, h, body) = text(
        &http,
        &format!("{base}/v1/events?court={court}&count=exact&limit=3"),
        None,
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(h["isir-count"], want.len().to_string().as_str());
    assert_eq!(h["isir-count-kind"], "exact");
    // A JSON answer carries the count in its body too (issue 35).
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["count"]["value"], want.len() as i64, "{body}");
    assert_eq!(v["count"]["kind"], "exact");
    if want.len() > 10 {
        let r = http
            .get(format!("{base}/v1/events?court={court}&after={}", want[9]))
            .header("Prefer", "count=exact")
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.headers()["isir-count"],
            (want.len() - 10).to_string().as_str()
        );
    }

    // A case's timeline, streamed: its pages, and the truth's actions of that case.
    let mut by_case: std::collections::BTreeMap<String, Vec<i64>> = Default::default();
    for a in sim.truth_all() {
        by_case.entry(a.case_number.clone()).or_default().push(a.id);
    }
    let (case, mut truth_ids) = by_case.into_iter().max_by_key(|(_, v)| v.len()).unwrap();
    truth_ids.sort();
    let (number, year) = case
        .strip_prefix("INS ")
        .and_then(|r| r.split_once('/'))
        .unwrap();
    let path = format!("/v1/cases/{year}/{number}/events");
    let paged: Vec<i64> = walk(&http, &base, &format!("{path}?limit=7"), "events")
        .await
        .iter()
        .map(|e| e["action_id"].as_i64().unwrap())
        .collect();
    let (s, _, body) = text(
        &http,
        &format!("{base}{path}?format=ndjson&stream=all"),
        None,
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let got = ndjson_ids(&body);
    assert!(truth_ids.len() > 7, "{case}: {} actions", truth_ids.len());
    assert_eq!(got, paged, "{case}: the stream is the pages");
    assert_eq!(got, truth_ids, "{case}: the stream is the case's actions");
    let (s, _, body) = text(&http, &format!("{base}{path}?format=csv&stream=all"), None).await;
    assert_eq!(s, 200, "{body}");
    let rows = csv::Reader::from_reader(body.as_bytes()).records().count();
    assert_eq!(rows, truth_ids.len(), "a row each");
    let (s, _, body) = text(
        &http,
        &format!("{base}{path}?format=csv&stream=all&limit=5"),
        None,
    )
    .await;
    assert_eq!(s, 400, "{body}");

    // Cases: every case, as the pages give them, whichever sort.
    for sort in ["opened", "latest", "updated"] {
        let paged = walk(
            &http,
            &base,
            &format!("/v1/cases?sort={sort}&limit=457"),
            "cases",
        )
        .await;
        let (s, _, body) = text(
            &http,
            &format!("{base}/v1/cases?sort={sort}&format=ndjson&stream=all"),
            Some("k-stream"),
        )
        .await;
        assert_eq!(s, 200, "{body}");
        let got: Vec<String> = body
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["case_number"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        let want: Vec<String> = paged
            .iter()
            .map(|c| c["case_number"].as_str().unwrap().to_string())
            .collect();
        assert!(want.len() > 1000, "{}", want.len());
        assert_eq!(got, want, "sort={sort}");
    }
    // A name search, streamed.
    let probe = "nov";
    let paged = walk(
        &http,
        &base,
        &format!("/v1/search?q={probe}&limit=17"),
        "subjects",
    )
    .await;
    let (s, _, body) = text(
        &http,
        &format!("{base}/v1/search?q={probe}&format=ndjson&stream=all"),
        None,
    )
    .await;
    assert_eq!(s, 200, "{body}");
    // The same persons in the same order as the pages (the pages' completeness against
    // the truth is tests/search.rs's).
    let person = |v: &Value| {
        (
            v["case_number"].as_str().unwrap_or_default().to_string(),
            v["person_id"].as_str().unwrap_or_default().to_string(),
            v["role"].as_str().unwrap_or_default().to_string(),
            v["name"].as_str().unwrap_or_default().to_string(),
        )
    };
    let got: Vec<_> = body
        .lines()
        .map(|l| person(&serde_json::from_str::<Value>(l).unwrap()))
        .collect();
    let want: Vec<_> = paged.iter().map(person).collect();
    assert!(
        want.len() > 17 && want.iter().all(|p| !p.0.is_empty() && !p.1.is_empty()),
        "{} persons, more than a page",
        want.len()
    );
    assert_eq!(got, want, "the streamed search is its pages' persons");

    // Subjects, streamed: the persons of the commonest debtor surname in the truth (and
    // of twenty debtors' IČOs at once) equal their pages, in order, and hold every
    // debtor of the truth by that name or IČO who is not erased.
    // A debtor is a party once the register has published their person record (it
    // publishes a case's petition first).
    let published: std::collections::BTreeSet<(String, String)> = sim
        .truth_all()
        .iter()
        .filter_map(|a| {
            let n = a.note.as_deref()?;
            let i = n.find("<idOsoby>")? + "<idOsoby>".len();
            let j = n[i..].find("</idOsoby>")?;
            Some((a.case_number.clone(), n[i..i + j].trim().to_string()))
        })
        .collect();
    let debtors: Vec<isir::sim::TruthDebtor> = sim
        .truth_debtors()
        .into_iter()
        .filter(|d| {
            !d.erased
                && published.contains(&(d.case_number.clone(), d.person.id.trim().to_string()))
        })
        .collect();
    let fold = |s: &str| -> String {
        use unicode_normalization::UnicodeNormalization;
        s.nfd()
            .filter(|c| !unicode_normalization::char::is_combining_mark(*c))
            .collect::<String>()
            .to_lowercase()
    };
    let mut by_name: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for d in debtors.iter().filter(|d| !d.erased) {
        if let Some(n) = &d.person.name {
            by_name
                .entry(fold(n))
                .or_default()
                .insert(d.case_number.clone());
        }
    }
    let (name, cases) = by_name.into_iter().max_by_key(|(_, v)| v.len()).unwrap();
    let icos: Vec<&str> = debtors
        .iter()
        .filter(|d| !d.erased)
        .filter_map(|d| d.person.ico.as_deref())
        .take(20)
        .collect();
    let ico_query: String = icos.iter().map(|i| format!("ico={i}&")).collect();
    for (query, want_cases) in [
        (format!("name={}&", url_escape(&name)), cases.clone()),
        (
            ico_query.clone(),
            debtors
                .iter()
                .filter(|d| !d.erased && d.person.ico.as_deref().is_some_and(|i| icos.contains(&i)))
                .map(|d| d.case_number.clone())
                .collect(),
        ),
    ] {
        let paged = walk(
            &http,
            &base,
            &format!("/v1/subjects?{query}limit=7"),
            "subjects",
        )
        .await;
        let key = |v: &Value| {
            format!(
                "{}|{}|{}",
                v["case_number"].as_str().unwrap(),
                v["court"].as_str().unwrap_or(""),
                v["person_id"].as_str().unwrap()
            )
        };
        let (s, _, body) = text(
            &http,
            &format!("{base}/v1/subjects?{query}format=ndjson&stream=all"),
            None,
        )
        .await;
        assert_eq!(s, 200, "{body}");
        let got: Vec<String> = body
            .lines()
            .map(|l| key(&serde_json::from_str::<Value>(l).unwrap()))
            .collect();
        let want: Vec<String> = paged.iter().map(key).collect();
        assert!(want.len() > 7, "{query}: {} persons", want.len());
        assert_eq!(got, want, "{query}: the stream is the pages");
        let streamed: std::collections::BTreeSet<&str> =
            got.iter().map(|k| k.split('|').next().unwrap()).collect();
        for c in &want_cases {
            assert!(streamed.contains(c.as_str()), "{query}: {c} missing");
        }
        let (s, _, body) = text(
            &http,
            &format!("{base}/v1/subjects?{query}format=csv&stream=all"),
            None,
        )
        .await;
        assert_eq!(s, 200, "{body}");
        assert_eq!(
            csv::Reader::from_reader(body.as_bytes()).records().count(),
            want.len()
        );
    }

    // Bad streams.
    for bad in [
        "/v1/cases?stream=all",
        "/v1/cases?stream=all&format=json",
        "/v1/cases?stream=some&format=csv",
        "/v1/cases?stream=all&format=csv&limit=5",
        "/v1/events?stream=all&format=csv&published_from=2020-01-01",
        "/v1/subjects?name=novak&stream=all",
        "/v1/subjects?name=novak&stream=all&format=csv&limit=3",
    ] {
        let (s, _, body) = text(&http, &format!("{base}{bad}"), None).await;
        assert_eq!(s, 400, "{bad}: {body}");
    }

    // Counts: exact, by parameter or by Prefer.
    let court = common::texts(
        &app.store,
        "SELECT court_short FROM cases WHERE court_short IS NOT NULL LIMIT 1",
        &[],
    )
    .await
    .remove(0);
    let want = walk(
        &http,
        &base,
        &format!("/v1/cases?court={court}&limit=1000"),
        "cases",
    )
    .await
    .len();
    let (s, h, body) = text(
        &http,
        &format!("{base}/v1/cases?court={court}&count=exact&limit=3"),
        None,
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(h["isir-count"], want.to_string().as_str());
    assert_eq!(h["isir-count-kind"], "exact");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["count"]["value"], want as i64, "{body}");
    // Without `count`, no count.
    let (_, h, body) = text(
        &http,
        &format!("{base}/v1/cases?court={court}&limit=3"),
        None,
    )
    .await;
    assert!(h.get("isir-count").is_none());
    assert!(
        serde_json::from_str::<serde_json::Value>(&body)
            .unwrap()
            .get("count")
            .is_none()
    );

    // `/v1/subjects` takes `count` like the other lists: persons of the IČO with the
    // most cases in the truth, walked page by page against the count.
    let mut by_ico: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for (a, n) in sim.truth_models() {
        if let isir::sim::TruthNote::Model(d) = n
            && let Some(ico) = d.person.and_then(|p| p.ico)
        {
            by_ico.entry(ico).or_default().insert(a.case_number);
        }
    }
    let (ico, cases) = by_ico.iter().max_by_key(|(_, c)| c.len()).unwrap();
    let persons = walk(
        &http,
        &base,
        &format!("/v1/subjects?ico={ico}&limit=2"),
        "subjects",
    )
    .await;
    assert!(persons.len() >= cases.len().min(1), "{ico}");
    for (path, hdr) in [
        (format!("/v1/subjects?ico={ico}&limit=1&count=exact"), None),
        (
            format!("/v1/subjects?ico={ico}&limit=1"),
            Some("count=exact"),
        ),
    ] {
        let mut r = http.get(format!("{base}{path}"));
        if let Some(p) = hdr {
            r = r.header("Prefer", p);
        }
        let r = r.send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.headers()["isir-count"],
            persons.len().to_string().as_str(),
            "{path}"
        );
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["count"]["value"], persons.len() as i64, "{path}");
        assert_eq!(v["subjects"].as_array().unwrap().len(), 1);
    }
    let r = http
        .get(format!("{base}/v1/cases?court={court}&limit=3&format=csv"))
        .header("Prefer", "count=exact")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["isir-count"], want.to_string().as_str());
    assert_eq!(r.headers()["preference-applied"], "count=exact");
    let (_, h, _) = text(
        &http,
        &format!("{base}/v1/cases?court={court}&count=estimated"),
        None,
    )
    .await;
    let est: i64 = h["isir-count"].to_str().unwrap().parse().unwrap();
    match b {
        Backend::Sqlite => {
            assert_eq!(h["isir-count-kind"], "exact", "below the cap SQLite counts");
            assert_eq!(est, want as i64);
        }
        Backend::Postgres => {
            assert_eq!(h["isir-count-kind"], "estimated");
            assert!(est > 0);
        }
    }
    let (_, h, _) = text(
        &http,
        &format!("{base}/v1/search?q={probe}&count=exact"),
        None,
    )
    .await;
    assert_eq!(h["isir-count"], paged.len().to_string().as_str());
    let (s, _, _) = text(&http, &format!("{base}/v1/cases?count=all"), None).await;
    assert_eq!(s, 400);

    // Weak ETags: a case's tag stays while the case does not change, though the
    // watermark moves, and changes with it; If-None-Match lists; lists have tags too.
    let (_, h, _) = text(&http, &format!("{base}/v1/events?limit=5&format=csv"), None).await;
    let list_tag = h["etag"].to_str().unwrap().to_string();
    assert!(list_tag.starts_with("W/\""), "{list_tag}");
    let r = http
        .get(format!("{base}/v1/events?limit=5&format=csv"))
        .header("If-None-Match", format!("\"x\", {list_tag}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 304);
    let latest = |store: isir::store::Store| async move {
        common::texts(&store, "SELECT case_number || '|' || CAST(latest_action_id AS TEXT) FROM cases ORDER BY latest_action_id DESC LIMIT 60", &[])
            .await
            .iter()
            .map(|r| {
                let (c, id) = r.split_once('|').unwrap();
                (c.to_string(), id.to_string())
            })
            .collect::<std::collections::BTreeMap<String, String>>()
    };
    let path = |c: &str| {
        let (n, y) = c.trim_start_matches("INS ").split_once('/').unwrap();
        format!("{base}/v1/cases/{y}/{n}")
    };
    let before = latest(app.store.clone()).await;
    let mut tags = std::collections::BTreeMap::new();
    let mut wm0 = String::new();
    for c in before.keys() {
        let (s, h, _) = text(&http, &path(c), None).await;
        assert_eq!(s, 200);
        let tag = h["etag"].to_str().unwrap().to_string();
        assert!(tag.starts_with("W/\""), "{tag}");
        tags.insert(c.clone(), tag);
        wm0 = h["isir-watermark"].to_str().unwrap().to_string();
    }
    sim.publish(3_000);
    app.poller().unwrap().poll_once().await;
    for n in projection::NAMES {
        projection::catch_up(&app.store, n, 5000).await.unwrap();
    }
    let (mut same, mut changed) = (0, 0);
    for (c, tag) in &tags {
        let now = common::texts(
            &app.store,
            "SELECT CAST(latest_action_id AS TEXT) FROM cases WHERE case_number = $1",
            &[c.as_str().into()],
        )
        .await
        .remove(0);
        let (_, h, _) = text(&http, &path(c), None).await;
        assert_ne!(
            h["isir-watermark"].to_str().unwrap(),
            wm0,
            "the watermark moved"
        );
        if now == before[c] {
            same += 1;
            assert_eq!(
                h["etag"].to_str().unwrap(),
                tag,
                "{c} did not change: its tag stays"
            );
            let r = http
                .get(path(c))
                .header("If-None-Match", format!("W/\"nope\", {tag}"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 304);
        } else {
            changed += 1;
            assert_ne!(h["etag"].to_str().unwrap(), tag, "{c} changed: a new tag");
        }
    }
    assert!(
        same > 0 && changed > 0,
        "{same} unchanged, {changed} changed"
    );
}

#[tokio::test]
async fn whole_results_counts_and_etags_sqlite() {
    streams(Backend::Sqlite).await;
}

#[tokio::test]
async fn whole_results_counts_and_etags_postgres() {
    streams(Backend::Postgres).await;
}
