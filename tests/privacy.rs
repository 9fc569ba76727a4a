//! Privacy and § 425 erasure on every path out, on both back ends, against the
//! simulator's ground truth (`Simulator::truth_debtors`: the debtors as the generator
//! made them, and which cases it erased), never against the builders' tables.
//!
//! The simulator erases with 636 and 637 actions with a note, without one, with a note
//! of an unknown schema and with a note that does not parse, republishes erased debtors
//! afterwards (with and without their role), gives natural persons an `idOsoby` that
//! embeds the birth date as the register does, and gives entrepreneurs a DIČ that is
//! `CZ` + the birth number.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::Backend;
use isir::projection;
use serde_json::Value;

const ANALYST: &str = "secret-analyst";
const PUBLIC: &str = "secret-public";
const WATCHER: &str = "secret-watcher";

struct Api {
    base: String,
    http: reqwest::Client,
    _stop: tokio::sync::oneshot::Sender<()>,
}

struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    text: String,
}

impl Api {
    async fn get(&self, path: &str, key: Option<&str>) -> Answer {
        let mut r = self.http.get(format!("{}{path}", self.base));
        if let Some(k) = key {
            r = r.header("X-API-Key", k);
        }
        let r = r.send().await.unwrap();
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        Answer {
            status,
            headers,
            text: r.text().await.unwrap(),
        }
    }

    /// Every page of a list, following `next` (in the body for JSON, in `Link` for CSV
    /// and NDJSON): the texts of all pages with their headers.
    async fn all_pages(&self, first: &str, key: Option<&str>) -> String {
        let mut out = String::new();
        let mut path = first.to_string();
        for _ in 0..500 {
            let a = self.get(&path, key).await;
            assert_eq!(a.status, 200, "{path}: {}", a.text);
            out.push_str(&a.text);
            for (k, v) in &a.headers {
                out.push_str(&format!("\n{k}: {}\n", v.to_str().unwrap_or("")));
            }
            let next = if a.headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json")
            {
                serde_json::from_str::<Value>(&a.text).unwrap()["next"]
                    .as_str()
                    .map(String::from)
            } else {
                a.headers.get("link").map(|l| {
                    let l = l.to_str().unwrap();
                    l[l.find('<').unwrap() + 1..l.find('>').unwrap()].to_string()
                })
            };
            match next {
                Some(n) => path = n,
                None => return out,
            }
        }
        panic!("more than 500 pages of {first}");
    }
}

async fn start(store: isir::store::Store) -> Api {
    use sha2::Digest;
    let hash = |k: &str| hex::encode(sha2::Sha256::digest(k.as_bytes()));
    let opts = isir::read::ReadOptions {
        rate_per_second: 100_000,
        burst: 100_000,
        keys: vec![
            isir::config::ApiKey {
                name: "analyst".into(),
                sha256: hash(ANALYST),
                scopes: vec!["pii".into()],
            },
            isir::config::ApiKey {
                name: "public".into(),
                sha256: hash(PUBLIC),
                scopes: vec![],
            },
            isir::config::ApiKey {
                name: "watcher".into(),
                sha256: hash(WATCHER),
                scopes: vec!["pii".into(), "watch:*".into()],
            },
        ],
        ..Default::default()
    };
    let (base, tx) = common::serve_api(isir::read::ReadState::new(store, opts)).await;
    Api {
        base,
        http: reqwest::Client::new(),
        _stop: tx,
    }
}

/// What identifies a natural person beyond the name, as the register writes it: the
/// birth number (with and without its slash), the birth date (ISO), the person ID
/// (which embeds the birth date as DDMMYY) and a DIČ made of the birth number.
fn secrets(p: &isir::source::model::Person) -> Vec<String> {
    let mut v = vec![p.id.trim().to_string()];
    if let Some(rc) = &p.birth_number {
        v.push(rc.clone());
        v.push(rc.replace('/', ""));
    }
    if let Some(b) = &p.birth_date {
        v.push(b[..10].to_string());
    }
    if let Some(d) = &p.dic {
        v.push(d.clone());
    }
    v
}

/// The street-level addresses of natural persons, as the register published them in
/// the truth's notes (read as text, not by the project's parser): each address's
/// register ID (`idAdresy`, one per address) as a JSON answer spells it (the bare number
/// recurs inside IČOs), keeping only those no person without a birth number (a company,
/// whose address is public) also has. (The simulator's streets, house numbers and
/// postcodes come from small lists that companies share, so as text they would prove
/// nothing; the mask hides an address's street, house number, postcode and ID together.)
fn natural_addresses(sim: &isir::sim::Simulator) -> Vec<String> {
    let tag = |block: &str, t: &str| -> Option<String> {
        let open = format!("<{t}>");
        let i = block.find(&open)? + open.len();
        let j = block[i..].find(&format!("</{t}>"))?;
        Some(block[i..i + j].to_string())
    };
    let (mut natural, mut public) = (BTreeSet::new(), BTreeSet::new());
    for a in sim.truth_all() {
        let Some(note) = a.note.as_deref() else {
            continue;
        };
        for person in note.split("<osoba>").skip(1) {
            let person = person.split("</osoba>").next().unwrap_or_default();
            let set = if person.contains("<rc>") {
                &mut natural
            } else {
                &mut public
            };
            for addr in person.split("<adresa>").skip(1) {
                let addr = addr.split("</adresa>").next().unwrap_or_default();
                if let Some(id) = tag(addr, "idAdresy") {
                    set.insert(format!("\"id\":\"{id}\""));
                }
            }
        }
    }
    natural.difference(&public).cloned().collect()
}

/// The secrets of the erased debtors that no other debtor shares (two people may share
/// a birth date, or a name and a birth date).
fn erased_only(debtors: &[isir::sim::TruthDebtor]) -> Vec<String> {
    let kept: std::collections::HashSet<String> = debtors
        .iter()
        .filter(|d| !d.erased)
        .flat_map(|d| secrets(&d.person))
        .collect();
    debtors
        .iter()
        .filter(|d| d.erased)
        .flat_map(|d| secrets(&d.person))
        .filter(|s| !kept.contains(s))
        .collect()
}

fn natural(p: &isir::source::model::Person) -> bool {
    p.birth_number.is_some()
}

/// Every file below `dir` as text (gzip opened), with its path.
fn files_text(dir: &Path) -> Vec<(String, String)> {
    use std::io::Read;
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_text(&p));
            continue;
        }
        let bytes = std::fs::read(&p).unwrap();
        let text = if p.to_string_lossy().ends_with(".gz") {
            let mut s = String::new();
            flate2::read::MultiGzDecoder::new(&bytes[..])
                .read_to_string(&mut s)
                .unwrap();
            s
        } else {
            String::from_utf8_lossy(&bytes).to_string()
        };
        out.push((p.display().to_string(), text));
    }
    out
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn assert_absent(what: &str, text: &str, needles: &[String]) {
    // All needles in one pass (a few thousand people over megabytes of answers).
    let ac = aho_corasick::AhoCorasick::new(needles).unwrap();
    if let Some(m) = ac.find(text) {
        let at = m.start().saturating_sub(80);
        panic!(
            "{:?} found in {what}: …{}…",
            needles[m.pattern().as_usize()],
            &text[text.floor_char_boundary(at)
                ..text.floor_char_boundary((m.end() + 80).min(text.len()))]
        );
    }
}

fn path_of(case: &str) -> String {
    let (n, y) = case.strip_prefix("INS ").unwrap().split_once('/').unwrap();
    format!("{y}/{n}")
}

/// A replica of `n` simulated actions (seed 16) on `b`, ingested to the head (and its
/// projections built when `project`), in the `serve` phase.
struct Replica {
    sim: isir::sim::Simulator,
    app: isir::app::App,
    _g: isir::sim::SimGuard,
    _db: common::TestDb,
}

async fn replica(b: Backend, n: usize, redact: bool, project: bool) -> Replica {
    let (sim, url, g) = common::sim(n, 1000, 16).await;
    let db = common::fresh_db(b).await;
    let mut s = common::settings(&url, &db);
    s.poll.max_batches_per_tick = 1000;
    s.projection.redact_replica = redact;
    let app = common::app(s).await;
    to_head(&app, project).await;
    app.store.set_setting("phase", "serve").await.unwrap();
    Replica {
        sim,
        app,
        _g: g,
        _db: db,
    }
}

/// Polls to the source's head (a tick may end at the head it knew), then builds.
async fn to_head(app: &isir::app::App, project: bool) {
    while app.poller().unwrap().poll_once().await.actions > 0 {}
    if project {
        for n in projection::NAMES {
            projection::catch_up(&app.store, n, 3000).await.unwrap();
        }
    }
}

async fn privacy_on_every_path(b: Backend) {
    let (sim, url, _g) = common::sim(40_000, 1000, 16).await;
    let db = common::fresh_db(b).await;
    let mut s = common::settings(&url, &db);
    s.poll.max_batches_per_tick = 1000;
    assert!(
        s.projection.redact_replica,
        "redaction of the replica is the default"
    );
    let app = common::app(s).await;
    // A creditor's watchlist, made before anything is read (so every action is after
    // its creation): the IČOs and birth numbers of every debtor the
    // truth erases (§ 425), and one debtor who stays, whose case must be in the feed.
    let debtors = sim.truth_debtors();
    let key_of = |d: &isir::sim::TruthDebtor| match (&d.person.ico, &d.person.birth_number) {
        (Some(i), _) => Some((isir::watchlist::Kind::Ico, i.clone())),
        (None, Some(rc)) => Some((isir::watchlist::Kind::Rc, rc.clone())),
        _ => None,
    };
    let erased_keys: BTreeSet<_> = debtors
        .iter()
        .filter(|d| d.erased)
        .filter_map(key_of)
        .collect();
    let erased_cases: BTreeSet<String> = debtors
        .iter()
        .filter(|d| d.erased)
        .map(|d| d.case_number.clone())
        .collect();
    let stays = debtors
        .iter()
        .find(|d| {
            !d.erased
                && d.person.birth_number.is_some()
                && !erased_cases.contains(&d.case_number)
                && key_of(d).is_some_and(|k| !erased_keys.contains(&k))
        })
        .expect("a debtor who stays");
    let watched: BTreeSet<isir::watchlist::Entry> = erased_keys
        .iter()
        .cloned()
        .chain(key_of(stays))
        .map(|(kind, key)| isir::watchlist::Entry { kind, key })
        .collect();
    assert!(watched.len() >= 6, "{} watched", watched.len());
    isir::watchlist::create(
        &app.store,
        isir::watchlist::NewList {
            name: "creditor".into(),
            roles: isir::watchlist::Roles::Debtor,
            webhook_url: None,
            secret: None,
            entries: watched,
        },
        &Default::default(),
    )
    .await
    .unwrap();
    app.poller().unwrap().poll_once().await;
    for n in projection::NAMES {
        projection::catch_up(&app.store, n, 3000).await.unwrap();
    }
    app.store.set_setting("phase", "serve").await.unwrap();

    // The truth: every erasure variant of the protocol is in the stream.
    let truth = sim.truth_all();
    let erasures: Vec<&isir::source::Action> = truth
        .iter()
        .filter(|a| a.type_code == "636" || a.type_code == "637")
        .collect();
    let variant = |f: &dyn Fn(&isir::source::Action) -> bool| erasures.iter().any(|a| f(a));
    assert!(variant(&|a| a.type_code == "636" && a.note.is_none()));
    assert!(variant(&|a| a.type_code == "637" && a.note.is_none()));
    assert!(variant(&|a| a
        .note
        .as_deref()
        .is_some_and(|n| n.contains("verzeXsd=\"2_0\""))));
    assert!(variant(&|a| a
        .note
        .as_deref()
        .is_some_and(|n| !n.ends_with('>'))));
    let erased: Vec<&isir::sim::TruthDebtor> = debtors.iter().filter(|d| d.erased).collect();
    assert!(erased.len() >= 5, "{} erased", erased.len());
    let erased_secrets = erased_only(&debtors);
    let all_secrets: Vec<String> = debtors
        .iter()
        .filter(|d| natural(&d.person))
        .flat_map(|d| secrets(&d.person))
        .collect();
    assert!(
        debtors
            .iter()
            .any(|d| d.person.kind.as_deref() == Some("PODNIKATEL") && d.person.dic.is_some()),
        "entrepreneurs with a personal DIČ"
    );

    let api = start(app.store.clone()).await;

    // ---- Without the pii scope, nothing of any natural person's identity leaves. ----
    let mut unscoped = String::new();
    for key in [None, Some(PUBLIC)] {
        for f in ["json", "csv", "ndjson"] {
            unscoped.push_str(
                &api.all_pages(&format!("/v1/cases?limit=1000&format={f}"), key)
                    .await,
            );
            unscoped.push_str(
                &api.all_pages(&format!("/v1/events?limit=1000&format={f}"), key)
                    .await,
            );
        }
    }
    // Every case with a natural debtor, and every erased case, one by one; their
    // persons by name (every format, every page); the HTML pages.
    let sample: Vec<&isir::sim::TruthDebtor> = debtors
        .iter()
        .filter(|d| natural(&d.person))
        .take(60)
        .chain(erased.iter().copied())
        .collect();
    let mut names = BTreeSet::new();
    for d in &sample {
        let a = api
            .get(&format!("/v1/cases/{}", path_of(&d.case_number)), None)
            .await;
        assert_eq!(a.status, 200, "{}", a.text);
        unscoped.push_str(&a.text);
        unscoped.push_str(&format!("{:?}", a.headers));
        let a = api
            .get(
                &format!("/v1/cases/{}/events?limit=1000", path_of(&d.case_number)),
                None,
            )
            .await;
        unscoped.push_str(&a.text);
        let page = api
            .get(&format!("/cases/{}", path_of(&d.case_number)), None)
            .await;
        assert_eq!(page.status, 200);
        unscoped.push_str(&page.text);
        names.insert(d.person.name.clone().unwrap());
    }
    let mut mores = 0;
    for n in names.iter().take(12) {
        for f in ["json", "csv", "ndjson"] {
            unscoped.push_str(
                &api.all_pages(&format!("/v1/subjects?name={n}&limit=7&format={f}"), None)
                    .await,
            );
            // The name search, paged and as a whole-result stream.
            unscoped.push_str(
                &api.all_pages(&format!("/v1/search?q={n}&limit=7&format={f}"), None)
                    .await,
            );
        }
        for f in ["csv", "ndjson"] {
            let a = api
                .get(&format!("/v1/search?q={n}&stream=all&format={f}"), None)
                .await;
            assert_eq!(a.status, 200, "{}", a.text);
            unscoped.push_str(&a.text);
        }
        let a = api.get(&format!("/search?q={n}"), None).await;
        assert_eq!(a.status, 200);
        unscoped.push_str(&a.text);
        // The search page's `more` link carries a sealed cursor, and it works.
        if let Some(at) = a.text.find("id=\"more\" href=\"") {
            let rest = &a.text[at + 16..];
            let link = rest[..rest.find('"').unwrap()].replace("&amp;", "&");
            let cursor = link
                .split(['?', '&'])
                .find_map(|kv| kv.strip_prefix("after="))
                .unwrap_or_else(|| panic!("the more link has a cursor: {link}"));
            // Sealed: its bytes hold neither the name nor any other text in clear (an
            // unsealed keyset cursor would carry the last row's name and case).
            use base64::Engine;
            let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(cursor)
                .unwrap_or_else(|e| panic!("{cursor}: {e}"));
            let clear = String::from_utf8_lossy(&bytes);
            assert!(
                bytes.len() > 24 && !clear.contains(n.as_str()) && !clear.contains("INS "),
                "the cursor is sealed, not the last row in clear: {clear}"
            );
            let more = api.get(&link, None).await;
            assert_eq!(more.status, 200, "{link}");
            assert!(
                more.text.contains("<table") || more.text.contains("<li"),
                "{link}: a next page"
            );
            unscoped.push_str(&more.text);
            mores += 1;
        }
    }
    assert!(
        mores > 0,
        "a search page with more results than a page shows its more link"
    );
    unscoped.push_str(&api.get("/metrics", None).await.text);
    assert!(
        unscoped.len() > 1_000_000,
        "a real sample: {} bytes",
        unscoped.len()
    );
    assert_absent("answers without the pii scope", &unscoped, &all_secrets);
    // Nor a natural person's street-level address (its register ID).
    let addresses = natural_addresses(&sim);
    assert!(
        addresses.len() > 50,
        "natural persons' addresses in the truth: {}",
        addresses.len()
    );
    assert_absent("answers without the pii scope", &unscoped, &addresses);

    // Searching or filtering by a birth number needs the scope: a 403 problem.
    let rc = debtors
        .iter()
        .find(|d| !d.erased && natural(&d.person))
        .unwrap();
    let rc_of = rc.person.birth_number.clone().unwrap();
    for key in [None, Some(PUBLIC)] {
        for path in [
            format!("/v1/subjects?rc={rc_of}"),
            format!("/v1/cases?debtor_rc={}", rc_of.replace('/', "")),
        ] {
            let a = api.get(&path, key).await;
            assert_eq!(a.status, 403, "{path}: {}", a.text);
            assert_eq!(a.headers["content-type"], "application/problem+json");
        }
        let a = api.get(&format!("/search?q={rc_of}"), key).await;
        assert_eq!(a.status, 403, "{}", a.text);
    }
    // A forged or foreign cursor is refused.
    let a = api
        .get(
            "/v1/subjects?name=novak&cursor=WyJJTlMgMS8yMDA4IiwiIiwiIl0",
            None,
        )
        .await;
    assert_eq!(a.status, 400);

    // ---- The pii scope sees the data: the mask does not just drop it. ----
    let a = api
        .get(&format!("/v1/subjects?rc={rc_of}"), Some(ANALYST))
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    let v: Value = serde_json::from_str(&a.text).unwrap();
    let hit = &v["subjects"].as_array().unwrap()[0];
    assert_eq!(hit["birth_number"], rc_of.as_str());
    assert_eq!(hit["person_id"], rc.person.id.as_str());
    assert_eq!(
        hit["birth_date"],
        rc.person.birth_date.clone().unwrap().as_str()
    );
    let csv = api
        .get(
            &format!("/v1/subjects?rc={rc_of}&format=csv"),
            Some(ANALYST),
        )
        .await;
    assert!(csv.text.contains(&rc_of));
    let ndjson = api
        .get(
            &format!("/v1/subjects?rc={rc_of}&format=ndjson"),
            Some(ANALYST),
        )
        .await;
    assert!(ndjson.text.contains(&rc_of));
    let case = api
        .get(
            &format!("/v1/cases/{}", path_of(&rc.case_number)),
            Some(ANALYST),
        )
        .await;
    assert!(
        case.text.contains(&rc.person.id),
        "the case names the debtor by idOsoby"
    );
    let list = api
        .get(
            &format!("/v1/cases?debtor_rc={}", rc_of.replace('/', "")),
            Some(ANALYST),
        )
        .await;
    assert!(list.text.contains(&rc.case_number), "{}", list.text);
    let page = api.get(&format!("/search?q={rc_of}"), Some(ANALYST)).await;
    assert!(page.text.contains(&rc_of));
    let page = api
        .get(
            &format!("/cases/{}", path_of(&rc.case_number)),
            Some(ANALYST),
        )
        .await;
    assert!(page.text.contains(&rc_of));
    // Without the scope the same person is addressable by one stable reference: in the
    // case and among the subjects.
    let case: Value = serde_json::from_str(
        &api.get(&format!("/v1/cases/{}", path_of(&rc.case_number)), None)
            .await
            .text,
    )
    .unwrap();
    let reference = case["case"]["debtors"][0]["person_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(reference.starts_with("p_"));
    let subjects: Value = serde_json::from_str(
        &api.get(
            &format!(
                "/v1/subjects?name={}&limit=1000",
                rc.person.name.clone().unwrap()
            ),
            None,
        )
        .await
        .text,
    )
    .unwrap();
    assert!(
        subjects["subjects"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["person_id"] == reference.as_str()
                && p["case_number"] == rc.case_number.as_str())
    );

    // ---- Erased debtors: in nothing, whatever the key. ----
    let mut scoped = String::new();
    for d in &erased {
        let a = api
            .get(
                &format!("/v1/cases/{}", path_of(&d.case_number)),
                Some(ANALYST),
            )
            .await;
        let v: Value = serde_json::from_str(&a.text).unwrap();
        assert_eq!(v["case"]["erased"], true, "{} is erased", d.case_number);
        assert_eq!(v["case"]["debtors"], serde_json::json!([]));
        assert!(
            v["case"]["court_short"].is_string(),
            "the case keeps its history"
        );
        scoped.push_str(&a.text);
        scoped.push_str(
            &api.get(
                &format!("/cases/{}", path_of(&d.case_number)),
                Some(ANALYST),
            )
            .await
            .text,
        );
        let rc = d.person.birth_number.clone();
        if let Some(rc) = rc {
            scoped.push_str(
                &api.get(&format!("/v1/subjects?rc={rc}"), Some(ANALYST))
                    .await
                    .text,
            );
            // The page repeats the query in its form; its results name nobody.
            let page = api.get(&format!("/search?q={rc}"), Some(ANALYST)).await;
            assert!(
                page.text
                    .contains(">0</span> persons in <span class=\"num\">0</span> cases"),
                "{}",
                page.text
            );
        }
        if let Some(ico) = &d.person.ico {
            let a = api
                .get(&format!("/v1/subjects?ico={ico}"), Some(ANALYST))
                .await;
            let v: Value = serde_json::from_str(&a.text).unwrap();
            assert!(
                v["subjects"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|p| p["case_number"] != d.case_number.as_str()),
                "an erased debtor found by IČO in {}",
                d.case_number
            );
        }
    }
    scoped.push_str(
        &api.all_pages("/v1/cases?limit=1000&format=ndjson", Some(ANALYST))
            .await,
    );
    // An erased debtor is found by no name search, whole or by prefixes.
    for d in &erased {
        let words = format!(
            "{} {}",
            d.person.first_name.clone().unwrap_or_default(),
            d.person.name.clone().unwrap_or_default()
        );
        let prefixes: String = words
            .split_whitespace()
            .map(|w| w.chars().take(3).collect::<String>() + " ")
            .collect();
        for q in [words.trim().to_string(), prefixes.trim().to_string()] {
            let a = api
                .get(
                    &format!("/v1/search?q={q}&limit=1000&format=ndjson"),
                    Some(ANALYST),
                )
                .await;
            assert_eq!(a.status, 200, "{}", a.text);
            assert!(
                !a.text.lines().any(|l| {
                    let v: Value = serde_json::from_str(l).unwrap();
                    v["case_number"] == d.case_number.as_str() && v["role"] == "DLUŽNÍK"
                }),
                "the erased debtor of {} found by {q:?}",
                d.case_number
            );
            scoped.push_str(&a.text);
        }
    }
    // A watched debtor erased: the list's feed has nothing of their cases (even to a key
    // with `pii`), in every format, while the debtor who stays is there.
    for f in ["json", "csv", "ndjson"] {
        let feed = api
            .all_pages(
                &format!("/v1/watchlists/creditor/events?limit=1000&format={f}"),
                Some(WATCHER),
            )
            .await;
        assert!(
            feed.contains(stays.case_number.as_str()),
            "the watched debtor who stays is in the {f} feed"
        );
        for c in &erased_cases {
            assert!(
                !feed.contains(&format!("{c}\"")) && !feed.contains(&format!("{c},")),
                "the {f} feed holds the erased case {c}"
            );
        }
        scoped.push_str(&feed);
    }
    let streamed = api
        .get(
            "/v1/watchlists/creditor/events?stream=all&format=ndjson",
            Some(WATCHER),
        )
        .await;
    assert_eq!(streamed.status, 200, "{}", streamed.text);
    for l in streamed.text.lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        let case = v["case_number"].as_str().unwrap();
        assert!(
            !erased_cases.contains(case),
            "streamed: the erased case {case}"
        );
    }
    scoped.push_str(&streamed.text);
    assert_absent("answers to the pii scope", &scoped, &erased_secrets);
    // The replica itself is redacted (projection.redact_replica, on by default), every
    // row of the erased cases, whatever their note.
    // The notes as stored, decoded (compressed ones too: `store::notes`).
    let notes: Vec<String> = common::all_actions(&app.store)
        .await
        .into_iter()
        .filter_map(|a| a.note)
        .collect();
    for n in &erased_secrets {
        assert!(
            !notes.iter().any(|x| x.contains(n.as_str())),
            "{n} left in the replica"
        );
    }
    for d in &erased {
        let rows = common::count(
            &app.store,
            "SELECT COUNT(*) FROM actions WHERE case_number = $1",
            &d.case_number,
        )
        .await;
        assert!(rows > 3, "the erased case keeps its actions");
    }

    // ---- Headers: answers differ by key, pages are locked down. ----
    let a = api.get("/v1/stats", None).await;
    assert_eq!(a.headers["cache-control"], "private");
    assert!(a.headers["vary"].to_str().unwrap().contains("X-API-Key"));
    assert_eq!(a.headers["x-content-type-options"], "nosniff");
    let p = api.get("/search", None).await;
    let csp = p.headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("frame-ancestors 'none'") && csp.contains("default-src 'none'"));
    assert_eq!(p.headers["x-content-type-options"], "nosniff");

    // ---- Exports: masked without --include-pii, erased debtors never; files of the
    // PII export are their owner's only. ----
    let dir = tempfile::tempdir().unwrap();
    let mut o = common::export_opts(&dir.path().join("plain"));
    o.gzip = true;
    isir::export::export(&app.store, &o).await.unwrap();
    let plain: String = files_text(&dir.path().join("plain"))
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    assert_absent("an export without --include-pii", &plain, &all_secrets);
    o.out = dir.path().join("pii");
    o.include_pii = true;
    isir::export::export(&app.store, &o).await.unwrap();
    let pii: String = files_text(&dir.path().join("pii"))
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    assert!(pii.contains(&rc_of), "--include-pii holds birth numbers");
    assert_absent("an export with --include-pii", &pii, &erased_secrets);
    assert_eq!(mode(&dir.path().join("pii")), 0o700);
    for e in std::fs::read_dir(dir.path().join("pii")).unwrap().flatten() {
        assert_eq!(mode(&e.path()), 0o600, "{}", e.path().display());
    }

    // ---- Snapshots: erased debtors out (the replica is redacted already), files the
    // owner's only. ----
    let snap = dir.path().join("snap");
    isir::snapshot::create(&app.store, &snap, -1, 10_000, false, false)
        .await
        .unwrap();
    let text: String = files_text(&snap).into_iter().map(|(_, t)| t).collect();
    assert!(
        text.contains(&rc_of),
        "a snapshot is the replica, with its personal data"
    );
    assert_absent("a snapshot", &text, &erased_secrets);
    assert_eq!(mode(&snap), 0o700);
    for e in std::fs::read_dir(&snap).unwrap().flatten() {
        assert_eq!(mode(&e.path()), 0o600, "{}", e.path().display());
    }
}

#[tokio::test]
async fn privacy_on_every_path_sqlite() {
    privacy_on_every_path(Backend::Sqlite).await;
}

#[tokio::test]
async fn privacy_on_every_path_postgres() {
    privacy_on_every_path(Backend::Postgres).await;
}

/// Without `redact_replica`, the replica keeps the source's text, but a snapshot still
/// leaves the erased debtors' data out, with `--include-pii` too: erasure is the law,
/// not a scope.
async fn snapshot_leaves_erased_debtors_out(b: Backend) {
    let Replica { sim, app, _g, _db } = replica(b, 40_000, false, false).await;
    let erased: Vec<String> = erased_only(&sim.truth_debtors());
    assert!(!erased.is_empty());
    let dir = tempfile::tempdir().unwrap();
    let (plain, pii) = (dir.path().join("plain"), dir.path().join("pii"));
    let m = isir::snapshot::create(&app.store, &plain, -1, 10_000, false, false)
        .await
        .unwrap();
    assert!(!m.include_pii && m.redacted_cases > 0);
    let text: String = files_text(&plain).into_iter().map(|(_, t)| t).collect();
    assert_absent("a snapshot without --include-pii", &text, &erased);
    let with_pii = isir::snapshot::create(&app.store, &pii, -1, 10_000, false, true)
        .await
        .unwrap();
    assert!(with_pii.include_pii && with_pii.redacted_cases == m.redacted_cases);
    let text: String = files_text(&pii).into_iter().map(|(_, t)| t).collect();
    assert_absent("a snapshot with --include-pii", &text, &erased);
    let kept = kept_birth_numbers(&sim.truth_debtors());
    assert!(
        kept.iter().any(|rc| text.contains(rc.as_str())),
        "a snapshot is the raw replica: the debtors who stay are in it"
    );
    // The redacted snapshot restores, and its replica builds the same projections of
    // the erased cases (they hold no debtor either way).
    let db2 = common::fresh_db(b).await;
    let app2 = common::app(common::settings("http://127.0.0.1:9/", &db2)).await;
    isir::snapshot::restore(&app2.store, &app2.lease, &plain, false, false)
        .await
        .unwrap();
    assert_eq!(
        common::count(
            &app2.store,
            "SELECT COUNT(*) FROM actions WHERE case_number <> $1",
            ""
        )
        .await,
        m.actions
    );
}

/// The birth numbers of debtors the truth does not erase.
fn kept_birth_numbers(debtors: &[isir::sim::TruthDebtor]) -> Vec<String> {
    debtors
        .iter()
        .filter(|d| !d.erased)
        .filter_map(|d| d.person.birth_number.clone())
        .collect()
}

/// The register may spell a type code with surrounding whitespace
/// (`<typUdalosti> 636 </typUdalosti>`; the parser keeps a code as it came). An erasure
/// so spelled is one for the projections and for a snapshot alike, `--include-pii` or
/// not: both decide it with `privacy::is_erasure`, and the erased cases the truth names
/// are those both find.
async fn a_spaced_erasure_code_erases_on_every_path(b: Backend) {
    let Replica { sim, app, _g, _db } = replica(b, 40_000, false, false).await;
    let truth = sim.truth_debtors();
    let erased = erased_only(&truth);
    let erased_cases: BTreeSet<String> = truth
        .iter()
        .filter(|d| d.erased)
        .map(|d| d.case_number.clone())
        .collect();
    assert!(!erased.is_empty());
    // Every erasure type code of the stream, respelled with whitespace around it.
    let mut tx = isir::store::sql::Tx::begin(&app.store).await.unwrap();
    let n = tx
        .exec(
            "UPDATE actions SET type_code = ' ' || type_code || '  ' WHERE type_code IN ('636', '637')",
            &[],
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(n as usize >= erased_cases.len(), "{n} erasures respelled");
    // Projections: the erased cases are those the truth erases.
    for p in projection::NAMES {
        projection::catch_up(&app.store, p, 3000).await.unwrap();
    }
    let mut tx = isir::store::sql::Tx::begin_read(&app.store).await.unwrap();
    let projected: BTreeSet<String> = tx
        .texts("SELECT case_number FROM erasures", &[])
        .await
        .unwrap()
        .into_iter()
        .collect();
    tx.commit().await.unwrap();
    assert_eq!(projected, erased_cases);
    // Snapshots, with and without --include-pii: the same cases redacted, none of the
    // erased debtors' data.
    let dir = tempfile::tempdir().unwrap();
    for pii in [false, true] {
        let out = dir.path().join(format!("snap-{pii}"));
        let m = isir::snapshot::create(&app.store, &out, -1, 10_000, false, pii)
            .await
            .unwrap();
        assert_eq!(m.redacted_cases as usize, erased_cases.len());
        let text: String = files_text(&out).into_iter().map(|(_, t)| t).collect();
        assert_absent(&format!("a snapshot (include_pii {pii})"), &text, &erased);
    }
    // An export with --include-pii: the debtors who stay, the erased ones not.
    let mut o = common::export_opts(&dir.path().join("pii"));
    o.include_pii = true;
    isir::export::export(&app.store, &o).await.unwrap();
    let text: String = files_text(&dir.path().join("pii"))
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    assert_absent("an export with --include-pii", &text, &erased);
    assert!(
        kept_birth_numbers(&truth)
            .iter()
            .any(|rc| text.contains(rc.as_str()))
    );
}

#[tokio::test]
async fn a_spaced_erasure_code_erases_on_every_path_sqlite() {
    a_spaced_erasure_code_erases_on_every_path(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_spaced_erasure_code_erases_on_every_path_postgres() {
    a_spaced_erasure_code_erases_on_every_path(Backend::Postgres).await;
}

#[tokio::test]
async fn snapshot_leaves_erased_debtors_out_sqlite() {
    snapshot_leaves_erased_debtors_out(Backend::Sqlite).await;
}

#[tokio::test]
async fn snapshot_leaves_erased_debtors_out_postgres() {
    snapshot_leaves_erased_debtors_out(Backend::Postgres).await;
}

/// Names from filings are written as they are in JSON and NDJSON, and through the CSV
/// formula guard in every CSV (API answers and exports): no cell starts with `=`, `+`,
/// `-`, `@`, a tab or a carriage return unless the guard is switched off.
async fn csv_cells_cannot_be_formulas(b: Backend) {
    let Replica { sim, app, _g, _db } = replica(b, 20_000, true, true).await;
    // A hostile name, as the truth publishes it.
    let evil = sim
        .truth_all()
        .iter()
        .filter_map(|a| match isir::source::parse::note_of(a.note.as_deref()) {
            isir::source::Note::Parsed(d) => d.person.and_then(|p| p.name),
            _ => None,
        })
        .find(|n| n.starts_with('='))
        .expect("a name starting with =");
    let api = start(app.store.clone()).await;
    let q = format!(
        "/v1/subjects?name={}&limit=1000",
        evil.replace('"', "%22")
            .replace(' ', "%20")
            .replace(';', "%3B")
    );
    let json = api.get(&q, None).await;
    assert_eq!(json.status, 200, "{}", json.text);
    let v: Value = serde_json::from_str(&json.text).unwrap();
    assert_eq!(v["subjects"][0]["name"], evil.as_str(), "JSON stays exact");
    let nd = api.get(&format!("{q}&format=ndjson"), None).await;
    assert!(nd.text.contains(&serde_json::to_string(&evil).unwrap()));
    let csv = api.get(&format!("{q}&format=csv"), None).await;
    let cells = |t: &str| -> Vec<String> {
        csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(t.as_bytes())
            .records()
            .flat_map(|r| r.unwrap().iter().map(String::from).collect::<Vec<_>>())
            .collect()
    };
    let dangerous = |c: &String| c.starts_with(['=', '+', '-', '@', '\t', '\r']);
    let api_cells = cells(&csv.text);
    assert!(api_cells.contains(&format!("'{evil}")), "{}", csv.text);
    assert!(!api_cells.iter().any(dangerous));
    let dir = tempfile::tempdir().unwrap();
    let mut o = common::export_opts(&dir.path().join("guarded"));
    let m = isir::export::export(&app.store, &o).await.unwrap();
    assert!(m.formula_guard, "the manifest says so");
    let mut seen = false;
    for (path, text) in files_text(&o.out) {
        if path.ends_with(".csv") {
            let c = cells(&text);
            assert!(!c.iter().any(dangerous), "{path}");
            seen |= c.contains(&format!("'{evil}"));
        }
    }
    assert!(seen, "the guarded name is in the export");
    o.out = dir.path().join("raw");
    o.formula_guard = false;
    let m = isir::export::export(&app.store, &o).await.unwrap();
    assert!(!m.formula_guard);
    let parties = std::fs::read_to_string(o.out.join("parties.csv")).unwrap();
    assert!(
        cells(&parties).contains(&evil),
        "switched off, cells are as stored"
    );
}

#[tokio::test]
async fn csv_cells_cannot_be_formulas_sqlite() {
    csv_cells_cannot_be_formulas(Backend::Sqlite).await;
}

#[tokio::test]
async fn csv_cells_cannot_be_formulas_postgres() {
    csv_cells_cannot_be_formulas(Backend::Postgres).await;
}

/// An erasure reaches exports already on disk: the next nightly run rewrites every kept
/// export that holds a debtor erased after its watermark, and both manifests say so.
async fn erasure_reaches_kept_exports(b: Backend) {
    let Replica { sim, app, _g, _db } = replica(b, 20_000, true, true).await;
    let dir = tempfile::tempdir().unwrap();
    let n = common::nightly(dir.path(), 5, true);
    let first = isir::export::nightly_once(&app.store, &n).await.unwrap();
    let before: std::collections::HashSet<String> = sim
        .truth_debtors()
        .iter()
        .filter(|d| d.erased)
        .map(|d| d.case_number.clone())
        .collect();
    // The register goes on: more cases are erased, among them debtors of the first export.
    sim.publish(40_000);
    to_head(&app, true).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let second = isir::export::nightly_once(&app.store, &n).await.unwrap();
    let newly: Vec<isir::sim::TruthDebtor> = sim
        .truth_debtors()
        .into_iter()
        .filter(|d| d.erased && !before.contains(&d.case_number))
        .collect();
    let exports = isir::export::list_exports(dir.path());
    assert_eq!(exports.len(), 2);
    let old = &exports[0];
    let old_text: String = files_text(old).into_iter().map(|(_, t)| t).collect();
    // Debtors whose case was opened before the first export's watermark.
    let opened: std::collections::HashSet<String> = sim
        .truth_after(-1, usize::MAX)
        .into_iter()
        .filter(|a| a.id <= first.watermark.action_id)
        .map(|a| a.case_number)
        .collect();
    let in_first: Vec<&isir::sim::TruthDebtor> = newly
        .iter()
        .filter(|d| d.person.birth_number.is_some() && opened.contains(&d.case_number))
        .collect();
    assert!(
        !in_first.is_empty(),
        "a debtor of the first export was erased since"
    );
    for d in &in_first {
        assert_absent(
            &format!("an export kept on disk ({})", d.case_number),
            &old_text,
            &secrets(&d.person),
        );
    }
    // Its cases keep their rows, with the erased debtor's cells emptied: no name, no
    // IČO, a count of 0, erased. Read as CSV, by the columns docs/EXPORTS.md names.
    let (_, cases_text) = files_text(old)
        .into_iter()
        .find(|(p, _)| p.ends_with("cases.csv.gz"))
        .expect("the kept export has cases.csv.gz");
    let mut rd = csv::Reader::from_reader(cases_text.as_bytes());
    let head = rd.headers().unwrap().clone();
    let at = |n: &str| head.iter().position(|h| h == n).unwrap();
    let rows: Vec<csv::StringRecord> = rd.records().map(|r| r.unwrap()).collect();
    for d in &in_first {
        let r = rows
            .iter()
            .find(|r| r[at("case_number")] == d.case_number)
            .unwrap_or_else(|| panic!("{} keeps its row", d.case_number));
        for c in [
            "debtor.name",
            "debtor.first_name",
            "debtor.ico",
            "debtor.kind",
        ] {
            assert_eq!(&r[at(c)], "", "{c} of erased {}", d.case_number);
        }
        assert_eq!(&r[at("debtor_count")], "0", "{}", d.case_number);
        assert_eq!(&r[at("erased")], "true", "{}", d.case_number);
        if let Some(name) = &d.person.name {
            assert!(
                !r.iter().any(|c| c == name),
                "{}'s name is gone from its row",
                d.case_number
            );
        }
    }
    // The other cases keep their debtors.
    assert!(
        rows.iter()
            .filter(|r| !r[at("debtor.name")].is_empty())
            .count()
            > 100,
        "the other cases keep their debtors' names"
    );
    // The kept export is still whole for everyone else, and says what was done.
    assert!(old_text.contains("DLUŽNÍK"));
    let m = isir::export::read_manifest(old).unwrap();
    assert_eq!(m.rewritten.len(), 1);
    assert!(m.rewritten[0].rows_removed > 0);
    for d in &in_first {
        assert!(m.rewritten[0].cases.contains(&d.case_number));
    }
    assert_eq!(second.purged.len(), 1);
    assert_eq!(second.purged[0].action, "rewritten");
    assert_eq!(
        isir::export::read_manifest(&exports[1]).unwrap().purged,
        second.purged
    );
    // The rewritten files match their manifest's sizes and checksums.
    for f in &m.files {
        let bytes = std::fs::read(old.join(&f.name)).unwrap();
        assert_eq!(bytes.len() as u64, f.bytes, "{}", f.name);
        use sha2::Digest;
        assert_eq!(
            hex::encode(sha2::Sha256::digest(&bytes)),
            f.sha256,
            "{}",
            f.name
        );
        assert_eq!(mode(&old.join(&f.name)), 0o600, "{}", f.name);
    }
}

#[tokio::test]
async fn erasure_reaches_kept_exports_sqlite() {
    erasure_reaches_kept_exports(Backend::Sqlite).await;
}

#[tokio::test]
async fn erasure_reaches_kept_exports_postgres() {
    erasure_reaches_kept_exports(Backend::Postgres).await;
}
