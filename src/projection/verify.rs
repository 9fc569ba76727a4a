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

/// Checks `sample` random cases (or the given ones).
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
    let (cc, pc, tc) = (cursor("cases"), cursor("parties"), cursor("timeline"));
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
        // Cases.
        let want = cases::fold(&records(store, &case, cc).await?).remove(&case);
        let got = tx
            .texts(
                "SELECT doc FROM cases WHERE case_number = $1",
                &[case.as_str().into()],
            )
            .await?;
        let got: Option<cases::CaseDoc> =
            got.first().map(|d| serde_json::from_str(d)).transpose()?;
        if want != got {
            rep.differences.push(format!(
                "cases {case}: projection {got:?} != recomputed {want:?}"
            ));
        }
        // Parties.
        let want = parties::fold(&records(store, &case, pc).await?);
        let got: BTreeMap<_, _> = tx
            .texts(
                "SELECT doc FROM parties WHERE case_number = $1",
                &[case.as_str().into()],
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
            let keys: Vec<_> = want
                .keys()
                .chain(got.keys())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
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
        // Timeline (names may have been renamed by later code-list actions: compared apart).
        let want = timeline::fold(&records(store, &case, tc).await?);
        let got = tx
            .texts(
                "SELECT CAST(action_id AS TEXT) || '|' || COALESCE(CAST(slot_action_id AS TEXT), '') || '|' || type_code || '|' || \
                 COALESCE(section, '') || '|' || COALESCE(legal_force_date, '') FROM timeline WHERE case_number = $1 ORDER BY action_id",
                &[case.as_str().into()],
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
    tx.commit().await?;
    Ok(rep)
}
