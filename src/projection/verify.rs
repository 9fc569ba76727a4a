//! `isir project verify`: recomputes a random sample of cases from the replica, the same
//! way the builders do, and compares them with the live projections.
//!
//! Owns the comparison only; reads, never writes.

use std::collections::BTreeMap;

use serde::Serialize;

use super::sql::Tx;
use super::{ProjectionError, cases, metas, parties, timeline};
use crate::source::model::Record;
use crate::store::Store;

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
            check(&mut tx, store, name, name, &case, cursor(name), &mut rep).await?;
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
        check(&mut tx, store, name, &table, &case, cursor, &mut rep).await?;
    }
    tx.commit().await?;
    Ok(rep)
}

/// Recomputes `case` for builder `name` from the replica up to `upto` and compares it
/// with what `table` (its main table or view) holds.
async fn check(
    tx: &mut Tx,
    store: &Store,
    name: &str,
    table: &str,
    case: &str,
    upto: i64,
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
            let got: Option<cases::CaseDoc> =
                got.first().map(|d| serde_json::from_str(d)).transpose()?;
            if want != got {
                rep.differences.push(format!(
                    "cases {case}: projection {got:?} != recomputed {want:?}"
                ));
            }
        }
        "parties" => {
            let want = parties::fold(&records(store, case, upto).await?);
            let got: BTreeMap<_, _> = tx
                .texts(
                    &format!("SELECT doc FROM {table} WHERE case_number = $1"),
                    &[case.into()],
                )
                .await?
                .iter()
                .map(|d| {
                    serde_json::from_str::<parties::PartyDoc>(d).map(|p| {
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
                        rep.differences.push(format!(
                            "parties {case} person {:?}: projection {:?} != recomputed {:?}",
                            k.2,
                            got.get(k),
                            want.get(k)
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
