//! `isir project verify`: recomputes a random sample of cases from the replica, the same
//! way the builders do, and compares them with the live projections.
//!
//! Owns the comparison only; reads, never writes. What it reports goes to operators'
//! terminals and logs (a failed rebuild's error quotes it), so a difference names keys
//! (the case, a person's opaque reference, never an `idOsoby`), field paths and masked
//! values only: never a name, a birth number or an address ([`differing_fields`]).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::{ProjectionError, cases, metas, parties, timeline};
use crate::privacy::Privacy;
use crate::source::model::Record;
use crate::store::Store;
use crate::store::sql::Tx;

#[derive(Debug, Clone, Serialize, Default)]
pub struct Report {
    pub checked: usize,
    pub differences: Vec<String>,
}

impl Report {
    pub fn clean(&self) -> bool {
        self.differences.is_empty()
    }
}

async fn records(store: &Store, case: &str, upto: i64) -> Result<Vec<Record>, ProjectionError> {
    Ok(crate::source::parse::records(
        store.actions_of_case(case, upto).await?,
    ))
}

/// Checks `sample` random cases (or the given ones) of every live projection.
pub async fn verify(
    store: &Store,
    sample: usize,
    only: Option<Vec<String>>,
) -> Result<Report, ProjectionError> {
    let ms = metas(store).await?;
    let cursor = |n: &str| {
        ms.iter()
            .find(|m| m.name == n)
            .map(|m| m.cursor)
            .unwrap_or(-1)
    };
    let privacy = key(store).await?;
    let mut tx = Tx::begin_read(store).await?;
    let picked = match only {
        Some(v) => v,
        None => {
            tx.texts(
                "SELECT case_number FROM cases ORDER BY random() LIMIT $1",
                &[(sample as i64).into()],
            )
            .await?
        }
    };
    let mut rep = Report::default();
    for case in picked {
        rep.checked += 1;
        for name in super::NAMES {
            let at = (name, name, case.as_str(), cursor(name));
            check(&mut tx, store, &privacy, at, &mut rep).await?;
        }
    }
    tx.commit().await?;
    Ok(rep)
}

/// Checks `sample` cases of version `version` of builder `name` (its tables
/// `<table>_v<version>`, built up to `cursor`) before a rebuild swaps it in. The cases
/// are drawn at random action IDs of the replica up to the cursor (index look-ups: no
/// scan of a large table).
pub async fn verify_version(
    store: &Store,
    name: &str,
    version: i64,
    cursor: i64,
    sample: usize,
) -> Result<Report, ProjectionError> {
    use rand::Rng;
    let privacy = key(store).await?;
    let mut tx = Tx::begin_read(store).await?;
    let lo = tx
        .int("SELECT COALESCE(MIN(id), 0) FROM actions", &[])
        .await?
        .unwrap_or(0);
    let mut picked = std::collections::BTreeSet::new();
    if cursor >= lo {
        for _ in 0..sample {
            let at = rand::thread_rng().gen_range(lo..=cursor);
            if let Some(c) = tx
                .texts(
                    "SELECT case_number FROM actions WHERE id >= $1 AND id <= $2 ORDER BY id LIMIT 1",
                    &[at.into(), cursor.into()],
                )
                .await?
                .pop()
                .filter(|c| c != "INS -1/-1")
            {
                picked.insert(c);
            }
        }
    }
    let table = format!("{name}_v{version}");
    let mut rep = Report::default();
    for case in picked {
        rep.checked += 1;
        let at = (name, table.as_str(), case.as_str(), cursor);
        check(&mut tx, store, &privacy, at, &mut rep).await?;
    }
    tx.commit().await?;
    Ok(rep)
}

/// The replica's privacy key, for the person references a difference names.
async fn key(store: &Store) -> Result<Privacy, ProjectionError> {
    crate::store::key::load(store)
        .await
        .map_err(|e| ProjectionError::Key(format!("{e:#}")))
}

/// Recomputes `case` for builder `name` from the replica up to `upto` and compares it
/// with what `table` (its main table or view) holds (`at`: name, table, case, upto).
async fn check(
    tx: &mut Tx,
    store: &Store,
    privacy: &Privacy,
    (name, table, case, upto): (&str, &str, &str, i64),
    rep: &mut Report,
) -> Result<(), ProjectionError> {
    match name {
        "cases" => {
            let want = cases::fold(&records(store, case, upto).await?).remove(case);
            let got = tx
                .texts(
                    &format!("SELECT doc FROM {table} WHERE case_number = $1"),
                    &[case.into()],
                )
                .await?;
            let got: Option<crate::readmodel::CaseDoc> =
                got.first().map(|d| serde_json::from_str(d)).transpose()?;
            if want != got {
                let (got, want) = (serde_json::to_value(&got)?, serde_json::to_value(&want)?);
                rep.differences.push(format!(
                    "cases {case}: {}",
                    differing_fields(&got, &want).join("; ")
                ));
            }
        }
        "parties" => {
            let want = parties::fold(&records(store, case, upto).await?);
            // The cells as the API reads them (the live version's through their view,
            // another version's from its table), the document put together in Rust.
            let from = if table == name {
                crate::readmodel::party_cells::VIEW
            } else {
                table
            };
            let got: BTreeMap<_, _> = tx
                .rows_with(
                    &format!(
                        "SELECT {} FROM {from} WHERE case_number = $1",
                        crate::readmodel::party_cells::read_columns("")
                    ),
                    &[case.into()],
                    |r| crate::readmodel::party_cells::doc_from(r, 0),
                )
                .await?
                .iter()
                .map(|d| {
                    serde_json::from_str::<crate::readmodel::PartyDoc>(d).map(|p| {
                        (
                            (p.case_number.clone(), p.court.clone(), p.person_id.clone()),
                            p,
                        )
                    })
                })
                .collect::<Result<_, _>>()?;
            if want != got {
                let keys: std::collections::BTreeSet<_> = want.keys().chain(got.keys()).collect();
                for k in keys {
                    if want.get(k) != got.get(k) {
                        let got = serde_json::to_value(got.get(k))?;
                        let want = serde_json::to_value(want.get(k))?;
                        rep.differences.push(format!(
                            "parties {case} person {}: {}",
                            privacy.person_ref(&k.2),
                            differing_fields(&got, &want).join("; ")
                        ));
                    }
                }
            }
        }
        _ => {
            // Timeline (names may have been renamed by later code-list actions: compared
            // apart).
            let want = timeline::fold(&records(store, case, upto).await?);
            let got = tx
                .texts(
                    &format!(
                        "SELECT CAST(action_id AS TEXT) || '|' || COALESCE(CAST(slot_action_id AS TEXT), '') || '|' || type_code || '|' || \
                         COALESCE(section, '') || '|' || COALESCE(legal_force_date, '') FROM {table} WHERE case_number = $1 ORDER BY action_id"
                    ),
                    &[case.into()],
                )
                .await?;
            let want: Vec<String> = want
                .values()
                .map(|e| {
                    format!(
                        "{}|{}|{}|{}|{}",
                        e.action_id,
                        e.slot_action_id.map(|s| s.to_string()).unwrap_or_default(),
                        e.type_code,
                        e.section.clone().unwrap_or_default(),
                        e.legal_force_date.clone().unwrap_or_default()
                    )
                })
                .collect();
            if want != got {
                rep.differences.push(format!(
                    "timeline {case}: projection {got:?} != recomputed {want:?}"
                ));
            }
        }
    }
    Ok(())
}

/// Leaf fields whose values are codes, states and keys of the register, never
/// personal: a difference shows them as they are.
const PLAIN_FIELDS: &[&str] = &[
    "case_number",
    "court",
    "court_short",
    "role",
    "kind",
    "state",
    "type_code",
    "section",
    "debtor_kind",
];

/// Where two documents differ: one `path: projection A != recomputed B` per differing
/// leaf, `absent` for a side without it. Values are masked (`masked`); object keys
/// are field names of our own documents, not data.
pub fn differing_fields(got: &Value, want: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff_at("", Some(got), Some(want), &mut out);
    if out.is_empty() {
        out.push("(equal as JSON, different as documents)".into());
    }
    out
}

fn diff_at(path: &str, got: Option<&Value>, want: Option<&Value>, out: &mut Vec<String>) {
    match (got, want) {
        (Some(Value::Object(g)), Some(Value::Object(w))) => {
            let keys: std::collections::BTreeSet<&String> = g.keys().chain(w.keys()).collect();
            for k in keys {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                diff_at(&p, g.get(k), w.get(k), out);
            }
        }
        (Some(Value::Array(g)), Some(Value::Array(w))) if g.len() == w.len() => {
            for (i, (a, b)) in g.iter().zip(w).enumerate() {
                diff_at(&format!("{path}[{i}]"), Some(a), Some(b), out);
            }
        }
        (g, w) if g != w => {
            let leaf = path.rsplit('.').next().unwrap_or(path);
            let show = |v: Option<&Value>| v.map_or("absent".to_string(), |v| masked(leaf, v));
            let path = if path.is_empty() { "(document)" } else { path };
            out.push(format!(
                "{path}: projection {} != recomputed {}",
                show(g),
                show(w)
            ));
        }
        _ => {}
    }
}

/// A value as a difference shows it: `null`, a boolean or a number as it is, a text of
/// a [`PLAIN_FIELDS`] field as it is, any other text as `***` and its length, an array or
/// object by its size.
fn masked(leaf: &str, v: &Value) -> String {
    match v {
        Value::String(s) if PLAIN_FIELDS.contains(&leaf) => format!("{s:?}"),
        Value::String(s) => format!("{}({} chars)", crate::privacy::MASK, s.chars().count()),
        Value::Array(a) => format!("[{} items]", a.len()),
        Value::Object(o) => format!("{{{} fields}}", o.len()),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_difference_names_fields_and_masks_personal_values() {
        let got = json!({"state": "KONKURS", "debtors": [{"name": "Nováková", "birth_number": "8551011234",
            "addresses": [{"street": "Dlouhá 5"}]}], "documents": 3});
        let want = json!({"state": "ODDLUŽENÍ", "debtors": [{"name": "Novák", "birth_number": "8501011234",
            "addresses": [{"street": "Dlouhá 7"}]}], "documents": 3, "ended": null});
        let d = differing_fields(&got, &want).join("\n");
        for secret in ["Novák", "8551011234", "8501011234", "Dlouhá"] {
            assert!(!d.contains(secret), "{secret} in {d}");
        }
        assert!(
            d.contains("state: projection \"KONKURS\" != recomputed \"ODDLUŽENÍ\""),
            "{d}"
        );
        assert!(
            d.contains("debtors[0].name: projection ***(8 chars) != recomputed ***(5 chars)"),
            "{d}"
        );
        assert!(
            d.contains("debtors[0].birth_number:") && d.contains("debtors[0].addresses[0].street:")
        );
        assert!(
            d.contains("ended: projection absent != recomputed null"),
            "{d}"
        );
        assert!(!d.contains("documents"), "{d}");
    }
}
