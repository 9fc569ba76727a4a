//! The cases projection: one document per case (`INS n/yyyy`) with court, state and its
//! history, first and latest action, claims deadline, legal-force dates, debtors, the
//! current administrator, counts of documents and claims, and erasure status; and the
//! stats (cases by state, court and month opened), kept up incrementally.
//!
//! Owns `cases_vN` and `stats_vN`. Applies actions in ID order; `CaseDoc::apply` is pure
//! so that `verify` can recompute a case from the replica the same way.

use std::collections::{BTreeMap, HashMap};

use super::{Builder, Counts, ProjectionError, texts_in};
use crate::readmodel::keys::LIST_SHAPES;
use crate::readmodel::{CaseDoc, KNOWN_STATES, LegalForce, PartyRef, StateChange};
use crate::source::model::{Flag, Note, Record};
use crate::store::sql::{Tx, Val};

fn parse_case_number(s: &str) -> (Option<i64>, Option<i64>) {
    let rest = s.strip_prefix("INS ").unwrap_or(s);
    match rest.split_once('/') {
        Some((n, y)) => (n.trim().parse().ok(), y.trim().parse().ok()),
        None => (None, None),
    }
}

fn is_secondary(f: &Option<Flag>) -> bool {
    f.as_ref().is_some_and(Flag::is_true)
}

impl CaseDoc {
    pub fn new(r: &Record) -> CaseDoc {
        let a = &r.action;
        let (number, year) = parse_case_number(&a.case_number);
        CaseDoc {
            case_number: a.case_number.clone(),
            number,
            year,
            first_action_id: a.id,
            first_published: a.published.clone(),
            opened: a.published.get(..10).unwrap_or(&a.published).to_string(),
            ..Default::default()
        }
    }

    /// Applies one action of this case. Returns what was unusual.
    pub fn apply(&mut self, r: &Record, counts: &mut Counts) {
        let a = &r.action;
        self.latest_action_id = a.id;
        self.latest_published = a.published.clone();
        if a.document_url.is_some() {
            self.documents += 1;
        }
        let d = match &r.detail {
            Note::Parsed(d) => Some(d),
            Note::Unparsed { .. } => {
                counts.unparsed += 1;
                None
            }
            Note::Absent => None,
        };
        if a.type_code == "63"
            && !d.is_some_and(|d| {
                is_secondary(&d.secondary_document) || is_secondary(&d.secondary_action)
            })
        {
            self.claims += 1;
        }
        if crate::privacy::is_erasure(&a.type_code, &r.detail) {
            // The type alone decides, whatever the note (absent, of an unknown schema,
            // unparsable): the debtors go, the case keeps its non-personal history.
            if !self.erased {
                counts.erased += 1;
            }
            self.erased = true;
            self.erased_at = Some(
                d.and_then(|d| d.struck_out.clone())
                    .unwrap_or_else(|| a.published.get(..10).unwrap_or("").to_string()),
            );
            self.erased_action_id = Some(a.id);
            self.debtors.clear();
        }
        let Some(d) = d else {
            return;
        };
        if self.court_code.is_none()
            && let Some(o) = &d.origin
        {
            self.court_code = Some(o.clone());
            match crate::codes::court(o) {
                Some(c) => {
                    self.court_short = Some(c.short.into());
                    self.court_name = Some(c.name.into());
                }
                None => counts.unknown_other += 1,
            }
        }
        if let Some(c) = &d.case {
            if let Some(s) = &c.state
                && self.state.as_deref() != Some(s.as_str())
            {
                if !KNOWN_STATES.contains(&s.as_str()) {
                    counts.unknown_other += 1;
                }
                self.state = Some(s.clone());
                self.states.push(StateChange {
                    action_id: a.id,
                    state: s.clone(),
                    published: a.published.clone(),
                });
            }
            if c.claims_deadline.is_some() {
                self.claims_deadline = c.claims_deadline.clone();
            }
            if c.ended.is_some() {
                self.ended = c.ended.clone();
            }
        }
        if let Some(date) = &d.legal_force_date {
            self.legal_force.push(LegalForce {
                action_id: a.id,
                date: date.clone(),
                section: a.section.clone(),
                number: a.number_in_section,
            });
        }
        if let Some(p) = d
            .person
            .as_ref()
            .filter(|p| p.id == crate::privacy::REDACTED)
        {
            // A block the erasure redacted in the replica: only the debtor kind is left.
            if p.role.as_deref() == Some("DLUŽNÍK") && self.debtor_kind.is_none() {
                self.debtor_kind = p.kind.clone();
            }
        } else if let Some(p) = &d.person {
            let r = PartyRef {
                court: d.origin.clone(),
                person_id: p.id.clone(),
                kind: p.kind.clone(),
                name: p.name.clone(),
                first_name: p.first_name.clone(),
                title_before: p.title_before.clone(),
                ico: p.ico.clone(),
                appointed: None,
            };
            let same = |x: &PartyRef| x.person_id == r.person_id && x.court == r.court;
            match p.role.as_deref() {
                Some("DLUŽNÍK") => {
                    if self.debtor_kind.is_none() {
                        self.debtor_kind = p.kind.clone();
                    }
                    self.debtors.retain(|x| !same(x));
                    if p.left_case.is_none() && !self.erased {
                        self.debtors.push(r);
                    }
                }
                Some("SPRÁVCE") => {
                    if p.left_case.is_some() {
                        if self.administrator.as_ref().is_some_and(same) {
                            self.administrator = None;
                        }
                    } else {
                        let appointed = self.administrator_appointed.clone();
                        self.administrator = Some(PartyRef { appointed, ..r });
                    }
                }
                Some("VĚŘITEL") | Some("VĚŘIT-NAVR") => {}
                _ => counts.unknown_other += 1,
            }
        }
        if let Some(date) = &d.administrator_appointed {
            self.administrator_appointed = Some(date.clone());
            if let Some(adm) = &mut self.administrator {
                adm.appointed = Some(date.clone());
            }
        }
    }

    fn month(&self) -> String {
        self.opened.get(..7).unwrap_or("").to_string()
    }
}

/// The list indexes of `cases_v{v}` ([`LIST_SHAPES`]; the two unfiltered sorts by date
/// opened and latest action use the table's `_opened` and `_latest`).
fn list_indexes(v: i64) -> Vec<String> {
    LIST_SHAPES
        .iter()
        .filter(|(sort, set)| !(set.is_empty() && *sort != "updated"))
        .map(|(sort, set)| {
            let keys = match *sort {
                "opened" => "opened, case_number",
                "latest" => "latest_action_id",
                _ => "latest_published, case_number",
            };
            let name = if set.is_empty() {
                "all".to_string()
            } else {
                set.join("_")
            };
            let mut cols: Vec<&str> = set.to_vec();
            cols.push(keys);
            format!(
                "CREATE INDEX cases_v{v}_{sort}_{name} ON cases_v{v} ({})",
                cols.join(", ")
            )
        })
        .collect()
}

/// Recomputes cases from their actions (in ID order), as the builder does.
pub fn fold(recs: &[Record]) -> BTreeMap<String, CaseDoc> {
    let mut out: BTreeMap<String, CaseDoc> = BTreeMap::new();
    let mut c = Counts::default();
    for r in recs {
        if r.action.case_number == "INS -1/-1" {
            continue;
        }
        out.entry(r.action.case_number.clone())
            .or_insert_with(|| CaseDoc::new(r))
            .apply(r, &mut c);
    }
    out
}

pub struct Cases;

#[async_trait::async_trait]
impl Builder for Cases {
    fn name(&self) -> &'static str {
        "cases"
    }

    fn tables(&self, _pg: bool) -> &'static [&'static str] {
        &["cases", "stats"]
    }

    fn per_case(&self) -> bool {
        true
    }

    fn ddl(&self, v: i64, pg: bool) -> Vec<String> {
        let b = if pg { "BOOLEAN" } else { "INTEGER" };
        vec![
            format!(
                "CREATE TABLE cases_v{v} (case_number TEXT PRIMARY KEY, year BIGINT, number BIGINT, court_short TEXT, \
                 state TEXT, opened TEXT NOT NULL, first_action_id BIGINT NOT NULL, latest_action_id BIGINT NOT NULL, \
                 latest_published TEXT NOT NULL, debtor_kind TEXT, erased {b} NOT NULL, doc TEXT NOT NULL)"
            ),
            format!("CREATE INDEX cases_v{v}_opened ON cases_v{v} (opened, case_number)"),
            format!("CREATE INDEX cases_v{v}_latest ON cases_v{v} (latest_action_id)"),
            format!(
                "CREATE TABLE stats_v{v} (dim TEXT NOT NULL, key TEXT NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (dim, key))"
            ),
        ]
        .into_iter()
        // Every filter and sort of the case list in keyset order (`read::lists`).
        .chain(list_indexes(v))
        .collect()
    }

    async fn apply(
        &self,
        tx: &mut Tx,
        v: i64,
        recs: &[Record],
        counts: &mut Counts,
    ) -> Result<(), ProjectionError> {
        let mut keys: Vec<String> = recs
            .iter()
            .map(|r| r.action.case_number.clone())
            .filter(|c| c != "INS -1/-1")
            .collect();
        keys.sort();
        keys.dedup();
        let mut docs: HashMap<String, CaseDoc> = HashMap::with_capacity(keys.len());
        for chunk in keys.chunks(500) {
            let sql = format!(
                "SELECT doc FROM cases_v{v} WHERE case_number IN ({})",
                tx.list(chunk.len())
            );
            for d in tx.texts(&sql, &texts_in(chunk)).await? {
                let doc: CaseDoc = serde_json::from_str(&d)?;
                docs.insert(doc.case_number.clone(), doc);
            }
        }
        let before: HashMap<String, (Option<String>, Option<String>, String)> = docs
            .iter()
            .map(|(k, d)| {
                (
                    k.clone(),
                    (d.state.clone(), d.court_short.clone(), d.month()),
                )
            })
            .collect();
        for r in recs {
            if r.action.case_number == "INS -1/-1" {
                continue;
            }
            docs.entry(r.action.case_number.clone())
                .or_insert_with(|| CaseDoc::new(r))
                .apply(r, counts);
        }
        // Stats deltas.
        let mut delta: BTreeMap<(&'static str, String), i64> = BTreeMap::new();
        let unknown = || "?".to_string();
        for (k, d) in &docs {
            let now = (
                d.state.clone().unwrap_or_else(unknown),
                d.court_short
                    .clone()
                    .or(d.court_code.clone())
                    .unwrap_or_else(unknown),
                d.month(),
            );
            match before.get(k) {
                None => {
                    *delta.entry(("state", now.0)).or_default() += 1;
                    *delta.entry(("court", now.1)).or_default() += 1;
                    *delta.entry(("month", now.2)).or_default() += 1;
                }
                Some((s, c, m)) => {
                    let s = s.clone().unwrap_or_else(unknown);
                    if s != now.0 {
                        *delta.entry(("state", s)).or_default() -= 1;
                        *delta.entry(("state", now.0)).or_default() += 1;
                    }
                    let c = c.clone().unwrap_or_else(unknown);
                    if c != now.1 {
                        // A court learnt later than the case's first action.
                        *delta.entry(("court", c)).or_default() -= 1;
                        *delta.entry(("court", now.1)).or_default() += 1;
                    }
                    let _ = m;
                }
            }
        }
        let rows: Vec<Vec<Val>> = docs
            .values()
            .map(|d| {
                Ok(vec![
                    d.case_number.as_str().into(),
                    d.year.into(),
                    d.number.into(),
                    d.court_short.clone().into(),
                    d.state.clone().into(),
                    d.opened.as_str().into(),
                    d.first_action_id.into(),
                    d.latest_action_id.into(),
                    d.latest_published.as_str().into(),
                    d.debtor_kind.clone().into(),
                    d.erased.into(),
                    serde_json::to_string(d)?.into(),
                ])
            })
            .collect::<Result<_, serde_json::Error>>()?;
        tx.upsert(
            &format!("cases_v{v}"),
            &[
                "case_number",
                "year",
                "number",
                "court_short",
                "state",
                "opened",
                "first_action_id",
                "latest_action_id",
                "latest_published",
                "debtor_kind",
                "erased",
                "doc",
            ],
            &["case_number"],
            &rows,
        )
        .await?;
        let stats: Vec<Vec<Val>> = delta
            .into_iter()
            .filter(|(_, n)| *n != 0)
            .map(|((dim, key), n)| vec![dim.into(), key.into(), n.into()])
            .collect();
        let t = format!("stats_v{v}");
        tx.insert_with(
            &t,
            &["dim", "key", "count"],
            &stats,
            &format!(" ON CONFLICT (dim, key) DO UPDATE SET count = {t}.count + excluded.count"),
        )
        .await?;
        Ok(())
    }
}
