//! The search page and the case page, rendered from the same projection queries as the
//! API (`read::queries`), behind the same phase gate, rate limit and masking: birth
//! numbers and dates only for a key with the `pii` scope, erased debtors never shown.

use std::collections::HashMap;
use std::fmt::Write;

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde_json::Value;

use super::html::{error_page, escape, page};
use crate::read::params::{SearchText, case_number, search_key, url_escape};
use crate::read::search::{self, After, Search};
use crate::read::watermark::open;
use crate::read::{Caller, Problem, ReadState, queries};

const PAGE: i64 = 100;
const EVENTS_PAGE: i64 = 500;

fn problem_page(p: Problem) -> Response {
    error_page(
        StatusCode::from_u16(p.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &p.detail,
    )
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str().unwrap_or("")
}

fn case_link(cn: &str) -> String {
    let rest = cn.strip_prefix("INS ").unwrap_or(cn);
    match rest.split_once('/') {
        Some((n, y)) => format!(
            "<a href=\"/cases/{}/{}\">{}</a>",
            escape(y),
            escape(n),
            escape(cn)
        ),
        None => escape(cn),
    }
}

/// A person's display name: titles, first name, name (or trade name).
fn person_name(p: &Value) -> String {
    let mut parts = Vec::new();
    for k in ["title_before", "first_name", "name"] {
        if !s(p, k).is_empty() {
            parts.push(s(p, k).to_string());
        }
    }
    if parts.is_empty() && !s(p, "trade_name").is_empty() {
        parts.push(s(p, "trade_name").to_string());
    }
    let mut n = parts.join(" ");
    if !s(p, "title_after").is_empty() {
        n.push_str(", ");
        n.push_str(s(p, "title_after"));
    }
    n
}

const SEARCH_FORM: &str = "<h1>Insolvenční rejstřík: hledání</h1>\
<form action=\"/search\" method=\"get\"><input type=\"search\" name=\"q\" value=\"{q}\" \
placeholder=\"IČO, rodné číslo, jméno nebo INS 123/2024\" autofocus> <button>Hledat</button></form>\
<p class=\"muted\">IČO, birth number (rodné číslo), a name (case and diacritics ignored) or a case number.</p>";

pub async fn search(
    State(state): State<ReadState>,
    Query(q): Query<HashMap<String, String>>,
    caller: Option<Extension<Caller>>,
) -> Response {
    let text = q.get("q").map(|s| s.trim().to_string()).unwrap_or_default();
    let form = SEARCH_FORM.replace("{q}", &escape(&text));
    if text.is_empty() {
        return page(StatusCode::OK, "isir: search", &form);
    }
    let pii = caller.is_some_and(|c| c.pii);
    let (param, what) = match SearchText::of(&text) {
        SearchText::Case { year, number } => {
            return Redirect::to(&format!("/cases/{year}/{number}")).into_response();
        }
        SearchText::Key(p, w) => (p, w),
    };
    if param == "rc" && !pii {
        return problem_page(Problem::needs_pii("a search by birth number"));
    }
    let privacy = match state.privacy().await {
        Ok(p) => p.clone(),
        Err(p) => return problem_page(p),
    };
    let (col, key) = match search_key("q", param, &text) {
        Ok(k) => k,
        Err(p) => {
            return page(
                StatusCode::BAD_REQUEST,
                "isir: search",
                &format!(
                    "{form}<p id=\"error\" class=\"bad\">{}</p>",
                    escape(&p.detail)
                ),
            );
        }
    };
    let name = col == "name_key";
    let r = async {
        let (mut tx, wm) = open(&state).await?;
        let rows = if name {
            // A name goes through the ranked name search (any order, prefixes).
            let s = Search {
                words: Search::words(&text)?,
                ..Search::default()
            };
            let after = q
                .get("after")
                .map(|a| After::unseal(&privacy, a))
                .transpose()?;
            let at = search::Tables::of(&mut tx).await?;
            let hits = search::search(&mut tx, at, &s, after.as_ref(), PAGE + 1).await?;
            let mut rows = Vec::with_capacity(hits.len());
            for h in &hits {
                rows.push(serde_json::from_str(&h.doc).map_err(Problem::internal)?);
            }
            (rows, hits)
        } else {
            let after: Vec<String> = match q.get("after") {
                Some(a) => privacy
                    .unseal(a, 3)
                    .ok_or_else(|| Problem::bad("after is malformed; use the `more` link"))?,
                None => vec![String::new(); 3],
            };
            let rows =
                queries::subjects(&mut tx, col, std::slice::from_ref(&key), &after, PAGE + 1)
                    .await?;
            (rows, Vec::new())
        };
        tx.commit().await?;
        Ok::<_, Problem>((rows, wm))
    }
    .await;
    let ((mut rows, hits), wm) = match r {
        Ok(x) => x,
        Err(p) if p.status == 400 => {
            return page(
                StatusCode::BAD_REQUEST,
                "isir: search",
                &format!(
                    "{form}<p id=\"error\" class=\"bad\">{}</p>",
                    escape(&p.detail)
                ),
            );
        }
        Err(p) => return problem_page(p),
    };
    let more = rows.len() as i64 > PAGE;
    rows.truncate(PAGE as usize);
    let mut o = form;
    // A row is a person in a case: one administrator is a row in each of their cases.
    // Persons are counted once (the register's person ID, with the name), cases once.
    let persons: std::collections::BTreeSet<(String, String)> = rows
        .iter()
        .map(|p| (s(p, "person_id").trim().to_string(), person_name(p)))
        .collect();
    let cases: std::collections::BTreeSet<&str> =
        rows.iter().map(|p| s(p, "case_number")).collect();
    let n = |k: usize, one: &str, many: &str| {
        format!(
            "<span class=\"num\">{k}</span> {}",
            if k == 1 { one } else { many }
        )
    };
    let _ = write!(
        o,
        "<h2 id=\"found\">{}{} in {} for “{}” by {what}</h2>",
        if more { "First page: " } else { "" },
        n(persons.len(), "person", "persons"),
        n(cases.len(), "case", "cases"),
        escape(&text)
    );
    o.push_str("<table id=\"results\"><tr><th>Name</th><th>Role</th><th>Case</th><th>IČO</th><th>Birth number</th><th>Birth date</th><th>Left the case</th></tr>");
    for p in &rows {
        let p = if pii {
            p.clone()
        } else {
            privacy.mask(p.clone())
        };
        let _ = write!(
            o,
            "<tr><td class=\"name\">{}</td><td>{}</td><td class=\"case\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&person_name(&p)),
            escape(s(&p, "role")),
            case_link(s(&p, "case_number")),
            escape(s(&p, "ico")),
            escape(s(&p, "birth_number")),
            escape(s(&p, "birth_date")),
            escape(s(&p, "left_case"))
        );
    }
    o.push_str("</table>");
    if more && let Some(l) = rows.last() {
        let cur = match hits.get(rows.len() - 1) {
            Some(h) => After::seal(&privacy, h),
            None => privacy.seal(&[
                s(l, "case_number").to_string(),
                s(l, "court").to_string(),
                s(l, "person_id").to_string(),
            ]),
        };
        let _ = write!(
            o,
            "<p><a id=\"more\" href=\"/search?q={}&amp;after={}\">more</a></p>",
            url_escape(&text),
            url_escape(&cur)
        );
    }
    let _ = write!(o, "<p class=\"muted\">As of action {}.</p>", wm.action_id);
    page(StatusCode::OK, &format!("isir: {text}"), &o)
}

pub async fn case(
    State(state): State<ReadState>,
    Path((year, number)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    caller: Option<Extension<Caller>>,
) -> Response {
    let pii = caller.is_some_and(|c| c.pii);
    let cn = match case_number(&year, &number) {
        Ok(c) => c,
        Err(p) => return problem_page(p),
    };
    let after: i64 = match q.get("after").map(|a| a.parse::<i64>()) {
        None => i64::MIN,
        Some(Ok(a)) => a,
        Some(Err(_)) => return problem_page(Problem::bad("after is not an action ID")),
    };
    let r = async {
        let (mut tx, wm) = open(&state).await?;
        let Some(doc) = queries::case_doc(&mut tx, &cn).await? else {
            return Err(Problem::not_found(format!(
                "no case {cn} in the replica (as of action {})",
                wm.action_id
            )));
        };
        let parties = queries::case_parties(&mut tx, &cn).await?;
        let events = queries::case_events(&mut tx, &cn, after, EVENTS_PAGE + 1).await?;
        tx.commit().await?;
        Ok((doc, parties, events, wm))
    }
    .await;
    let (doc, parties, mut events, wm) = match r {
        Ok(x) => x,
        Err(p) => return problem_page(p),
    };
    let privacy = match state.privacy().await {
        Ok(p) => p.clone(),
        Err(p) => return problem_page(p),
    };
    let mut o = String::new();
    let _ = write!(
        o,
        "<h1 id=\"case-number\">{}</h1><table>\
         <tr><th>Court</th><td id=\"court\">{}</td></tr>\
         <tr><th>State</th><td id=\"state\">{}</td></tr>\
         <tr><th>Opened</th><td>{}</td></tr>\
         <tr><th>Claims deadline</th><td>{}</td></tr>\
         <tr><th>Ended</th><td>{}</td></tr>\
         <tr><th>Administrator</th><td id=\"administrator\">{}</td></tr>\
         <tr><th>Documents</th><td>{}</td></tr>\
         <tr><th>Erased</th><td>{}</td></tr></table>",
        escape(s(&doc, "case_number")),
        escape(s(&doc, "court_name")),
        escape(s(&doc, "state")),
        escape(s(&doc, "opened")),
        escape(s(&doc, "claims_deadline")),
        escape(s(&doc, "ended")),
        escape(
            &doc.get("administrator")
                .map(person_name)
                .unwrap_or_default()
        ),
        doc["documents"],
        if doc["erased"].as_bool() == Some(true) {
            format!(
                "yes, {} (the debtor's data are not shown)",
                escape(s(&doc, "erased_at"))
            )
        } else {
            "no".into()
        }
    );
    o.push_str("<h2>State history</h2><table id=\"states\"><tr><th>State</th><th>Since</th><th>Action</th></tr>");
    for st in doc["states"].as_array().into_iter().flatten() {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td></tr>",
            escape(s(st, "state")),
            escape(s(st, "published")),
            st["action_id"]
        );
    }
    o.push_str("</table><h2>Parties</h2><table id=\"parties\"><tr><th>Role</th><th>Name</th><th>IČO</th><th>Birth number</th><th>Address</th><th>Left</th></tr>");
    for p in &parties {
        let p = if pii {
            p.clone()
        } else {
            privacy.mask(p.clone())
        };
        let addr = p["addresses"]
            .as_array()
            .and_then(|a| a.first())
            .map(|a| {
                [
                    s(a, "street"),
                    s(a, "house_number"),
                    s(a, "city"),
                    s(a, "postcode"),
                ]
                .iter()
                .filter(|x| !x.is_empty() && **x != crate::privacy::MASK)
                .copied()
                .collect::<Vec<_>>()
                .join(" ")
            })
            .unwrap_or_default();
        let _ = write!(
            o,
            "<tr><td>{}</td><td class=\"name\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(s(&p, "role")),
            escape(&person_name(&p)),
            escape(s(&p, "ico")),
            escape(s(&p, "birth_number")),
            escape(&addr),
            escape(s(&p, "left_case"))
        );
    }
    let more = events.len() as i64 > EVENTS_PAGE;
    events.truncate(EVENTS_PAGE as usize);
    o.push_str("</table><h2>Timeline</h2><table id=\"timeline\"><tr><th class=\"num\">Action</th><th>Published</th><th>Event</th><th>Section</th><th>Document</th></tr>");
    for e in &events {
        let doc_link = match e["document_url"].as_str() {
            Some(u) if u.starts_with("https://") || u.starts_with("http://") => {
                format!("<a href=\"{}\" rel=\"noopener\">document</a>", escape(u))
            }
            _ => String::new(),
        };
        let section = match (e["section"].as_str(), e["number_in_section"].as_i64()) {
            (Some(sec), Some(n)) => format!("{sec}-{n}"),
            (Some(sec), None) => sec.to_string(),
            _ => String::new(),
        };
        let _ = write!(
            o,
            "<tr><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{doc_link}</td></tr>",
            e["action_id"],
            escape(s(e, "published")),
            escape(s(e, "type_name")),
            escape(&section)
        );
    }
    o.push_str("</table>");
    if more && let Some(last) = events.last().and_then(|e| e["action_id"].as_i64()) {
        let _ = write!(
            o,
            "<p><a id=\"more\" href=\"/cases/{year}/{number}?after={last}\">more events</a></p>",
            year = escape(&year),
            number = escape(&number)
        );
    }
    let _ = write!(o, "<p class=\"muted\">As of action {}.</p>", wm.action_id);
    page(StatusCode::OK, &format!("isir: {cn}"), &o)
}
