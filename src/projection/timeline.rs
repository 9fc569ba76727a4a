//! The timeline projection: every action of a case in ID order with its type code and
//! name (from the code list: the seeded list plus the feed's code-list actions), section,
//! number, document link, dates, and its document slot (case, section, number) with the
//! secondary documents, legal-force dates and corrections that attach to it.
//!
//! Owns `timeline_vN`, `slots_vN` and `event_types_vN`. Holds no personal data.

use std::collections::{BTreeMap, HashMap};

use super::{Builder, Counts, ProjectionError, upgrade};
use crate::readmodel::columns::timeline_sql;
use crate::readmodel::{Event, TIMELINE_COLUMNS as COLUMNS, TimelineCells};
use crate::source::model::{Flag, Note, Record};
use crate::store::sql::{Tx, Val};

fn t(f: &Option<Flag>) -> bool {
    f.as_ref().is_some_and(Flag::is_true)
}

type SlotKey = (String, String, i64);

/// Applies one action; `slots` maps a slot to its first action; `names` is the code list.
fn event_of(
    r: &Record,
    slots: &mut HashMap<SlotKey, i64>,
    names: &HashMap<String, String>,
    counts: &mut Counts,
) -> Event {
    let a = &r.action;
    let d = match &r.detail {
        Note::Parsed(d) => Some(d),
        Note::Unparsed { .. } => {
            counts.unparsed += 1;
            None
        }
        Note::Absent => None,
    };
    let type_name = match names.get(&a.type_code) {
        Some(n) => n.clone(),
        None => {
            counts.unknown_codes += 1;
            a.type_name.clone()
        }
    };
    let slot_action_id = match (&a.section, a.number_in_section) {
        (Some(s), Some(n)) => Some(
            *slots
                .entry((a.case_number.clone(), s.clone(), n))
                .or_insert(a.id),
        ),
        _ => None,
    };
    Event {
        action_id: a.id,
        case_number: a.case_number.clone(),
        court: d.and_then(|d| d.origin.clone()),
        type_code: a.type_code.clone(),
        type_name,
        source_type_name: a.type_name.clone(),
        section: a.section.clone(),
        number_in_section: a.number_in_section,
        document_url: a.document_url.clone(),
        published: a.published.clone(),
        created: a.created.clone(),
        slot_action_id,
        secondary_action: d.is_some_and(|d| t(&d.secondary_action)),
        secondary_document: d.is_some_and(|d| t(&d.secondary_document)),
        legal_force_date: d.and_then(|d| d.legal_force_date.clone()),
        corrected_published: d.and_then(|d| d.corrected_published.clone()),
        annulled: d.and_then(|d| d.annulled.clone()),
    }
}

/// Recomputes the timeline of whole cases (records in ID order), with the seeded names.
pub fn fold(recs: &[Record]) -> BTreeMap<i64, Event> {
    let names: HashMap<String, String> = crate::codes::event_types()
        .values()
        .map(|t| (t.id.clone(), t.name.clone()))
        .collect();
    let mut slots = HashMap::new();
    let mut c = Counts::default();
    recs.iter()
        .filter(|r| r.action.case_number != "INS -1/-1")
        .map(|r| (r.action.id, event_of(r, &mut slots, &names, &mut c)))
        .collect()
}

pub struct Timeline;

#[async_trait::async_trait]
impl Builder for Timeline {
    fn name(&self) -> &'static str {
        "timeline"
    }

    fn tables(&self, _pg: bool) -> &'static [&'static str] {
        &["timeline", "slots", "event_types"]
    }

    fn ddl(&self, v: i64, pg: bool) -> Vec<String> {
        let b = if pg { "BOOLEAN" } else { "INTEGER" };
        // On SQLite only `INTEGER PRIMARY KEY` makes the action ID the rowid; `BIGINT`
        // would keep a hidden rowid and a second b-tree (the key's index) to write for
        // every event.
        let key = if pg { "BIGINT" } else { "INTEGER" };
        // An SQLite index ends with the rowid (here the action ID) and is ordered by it:
        // naming the column again would store it twice in every entry.
        let id = if pg { ", action_id" } else { "" };
        vec![
            // `type_name`, `document_url` and `document_id` hold the short cells
            // (`TimelineCells`); the view serves them whole.
            format!(
                "CREATE TABLE timeline_v{v} (action_id {key} PRIMARY KEY, case_number TEXT NOT NULL, court TEXT, \
                 type_code TEXT NOT NULL, type_name TEXT, source_type_name TEXT NOT NULL, section TEXT, \
                 number_in_section BIGINT, document_url TEXT, published TEXT NOT NULL, created TEXT NOT NULL, \
                 slot_action_id BIGINT, secondary_action {b} NOT NULL, secondary_document {b} NOT NULL, \
                 legal_force_date TEXT, corrected_published TEXT, annulled TEXT, document_id TEXT)"
            ),
            format!("CREATE INDEX timeline_v{v}_case ON timeline_v{v} (case_number{id})"),
            format!("CREATE INDEX timeline_v{v}_type ON timeline_v{v} (type_code{id})"),
            // The events feed by court, and by court and type (`read::lists`).
            format!("CREATE INDEX timeline_v{v}_court ON timeline_v{v} (court{id})"),
            format!(
                "CREATE INDEX timeline_v{v}_court_type ON timeline_v{v} (court, type_code{id})"
            ),
            // On SQLite the table is its key's b-tree (a rowid table would keep the key
            // a second time, in its index).
            format!(
                "CREATE TABLE slots_v{v} (case_number TEXT NOT NULL, section TEXT NOT NULL, number BIGINT NOT NULL, \
                 first_action_id BIGINT NOT NULL, PRIMARY KEY (case_number, section, number)){}",
                if pg { "" } else { " WITHOUT ROWID" }
            ),
            format!(
                "CREATE TABLE event_types_v{v} (code TEXT PRIMARY KEY, name TEXT NOT NULL, source TEXT NOT NULL, \
                 created TEXT, cancelled TEXT, action_id BIGINT)"
            ),
        ]
    }

    fn view_sql(&self, t: &str, v: i64, _pg: bool) -> String {
        if t != "timeline" {
            return format!("SELECT * FROM {t}_v{v}");
        }
        // Every column whole, under its own name: the published shape, whatever the
        // stored form.
        let cols: Vec<String> = COLUMNS
            .iter()
            .map(|c| match timeline_sql(c) {
                e if e == *c => e,
                e => format!("{e} AS {c}"),
            })
            .collect();
        format!("SELECT {} FROM timeline_v{v}", cols.join(", "))
    }

    async fn upgrade(&self, tx: &mut Tx, v: i64) -> Result<bool, ProjectionError> {
        upgrade::timeline_short_cells(tx, v).await
    }

    async fn seed(&self, tx: &mut Tx, v: i64) -> Result<(), ProjectionError> {
        let rows: Vec<Vec<Val>> = crate::codes::event_types()
            .values()
            .map(|t| vec![t.id.as_str().into(), t.name.as_str().into(), "seed".into()])
            .collect();
        tx.insert_with(
            &format!("event_types_v{v}"),
            &["code", "name", "source"],
            &rows,
            "",
        )
        .await?;
        Ok(())
    }

    async fn apply(
        &self,
        tx: &mut Tx,
        v: i64,
        recs: &[Record],
        counts: &mut Counts,
    ) -> Result<(), ProjectionError> {
        // The code list, in one query (codes are digits: the first `|` separates).
        let mut names: HashMap<String, String> = tx
            .texts(
                &format!("SELECT code || '|' || name FROM event_types_v{v}"),
                &[],
            )
            .await?
            .into_iter()
            .filter_map(|r| {
                r.split_once('|')
                    .map(|(c, n)| (c.to_string(), n.to_string()))
            })
            .collect();
        // The slots this chunk's actions name that are already open: looked up by their
        // key, not every slot of every case touched (a case has ten on average, and an
        // ID-ordered chunk touches thousands of cases).
        let mut keys: Vec<SlotKey> = recs
            .iter()
            .filter_map(|r| {
                let a = &r.action;
                Some((
                    a.case_number.clone(),
                    a.section.clone()?,
                    a.number_in_section?,
                ))
            })
            .collect();
        keys.sort();
        keys.dedup();
        let mut slots: HashMap<SlotKey, i64> = HashMap::new();
        for chunk in keys.chunks(300) {
            let sql = format!(
                "SELECT s.case_number || '|' || s.section || '|' || CAST(s.number AS TEXT) || '|' || CAST(s.first_action_id AS TEXT) \
                 FROM (VALUES {}) AS k JOIN slots_v{v} s \
                 ON s.case_number = k.column1 AND s.section = k.column2 AND s.number = k.column3",
                tx.tuples(chunk.len(), 3)
            );
            let binds: Vec<Val> = chunk
                .iter()
                .flat_map(|(c, s, n)| [c.as_str().into(), s.as_str().into(), (*n).into()])
                .collect();
            for row in tx.texts(&sql, &binds).await? {
                let f: Vec<&str> = row.rsplitn(4, '|').collect();
                if let [first, number, section, case] = f[..]
                    && let (Ok(n), Ok(id)) = (number.parse(), first.parse())
                {
                    slots.insert((case.to_string(), section.to_string(), n), id);
                }
            }
        }
        let known: HashMap<SlotKey, i64> = slots.clone();
        let mut events = Vec::with_capacity(recs.len());
        let mut code_rows = Vec::new();
        for r in recs {
            if r.action.case_number == "INS -1/-1" {
                // A change of the code list, not an action of a case.
                if let Note::Parsed(d) = &r.detail {
                    if let Some(c) = d.code_list.as_ref().filter(|c| c.id.is_some()) {
                        let code = c.id.clone().unwrap_or_default();
                        let name = c.name.clone().unwrap_or_default();
                        names.insert(code.clone(), name.clone());
                        code_rows.push(vec![
                            code.into(),
                            name.into(),
                            "feed".into(),
                            c.created.clone().into(),
                            c.cancelled.clone().into(),
                            r.action.id.into(),
                        ]);
                    }
                } else if let Note::Unparsed { .. } = &r.detail {
                    counts.unparsed += 1;
                }
                continue;
            }
            events.push(event_of(r, &mut slots, &names, counts));
        }
        tx.upsert(
            &format!("event_types_v{v}"),
            &[
                "code",
                "name",
                "source",
                "created",
                "cancelled",
                "action_id",
            ],
            &["code"],
            &code_rows,
        )
        .await?;
        // A version made before the short cells may still have `type_name NOT NULL`
        // (SQLite cannot drop a constraint in place): its names are stored whole.
        let whole_names = upgrade::timeline_names_required(tx, v).await?;
        let rows: Vec<Vec<Val>> = events
            .iter()
            .map(|e| {
                let short = TimelineCells::of(e);
                let type_name = match whole_names {
                    true => Some(e.type_name.as_str()),
                    false => short.type_name,
                };
                vec![
                    e.action_id.into(),
                    e.case_number.as_str().into(),
                    e.court.clone().into(),
                    e.type_code.as_str().into(),
                    type_name.into(),
                    e.source_type_name.as_str().into(),
                    e.section.clone().into(),
                    e.number_in_section.into(),
                    short.document_url.into(),
                    e.published.as_str().into(),
                    e.created.as_str().into(),
                    e.slot_action_id.into(),
                    e.secondary_action.into(),
                    e.secondary_document.into(),
                    e.legal_force_date.clone().into(),
                    e.corrected_published.clone().into(),
                    e.annulled.clone().into(),
                    short.document_id.into(),
                ]
            })
            .collect();
        let stored: Vec<&str> = COLUMNS.iter().copied().chain(["document_id"]).collect();
        tx.insert_with(
            &format!("timeline_v{v}"),
            &stored,
            &rows,
            " ON CONFLICT (action_id) DO NOTHING",
        )
        .await?;
        let new_slots: Vec<Vec<Val>> = slots
            .iter()
            .filter(|(k, _)| !known.contains_key(*k))
            .map(|((c, s, n), id)| {
                vec![
                    c.as_str().into(),
                    s.as_str().into(),
                    (*n).into(),
                    (*id).into(),
                ]
            })
            .collect();
        tx.insert_with(
            &format!("slots_v{v}"),
            &["case_number", "section", "number", "first_action_id"],
            &new_slots,
            " ON CONFLICT (case_number, section, number) DO NOTHING",
        )
        .await?;
        Ok(())
    }
}
