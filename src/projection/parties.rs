//! The parties projection: every person of every case, keyed by (case, origin court,
//! person ID), the latest action winning for each field, with the first action that
//! named the person, and the search keys (IČO, birth number, a name key without case
//! and diacritics).
//!
//! Owns `parties_vN`, `erasures_vN` and, through [`super::names`], the name-search index
//! `names_vN` (with `name_terms_vN` on PostgreSQL). On a § 425 erasure it deletes the
//! debtors' rows and their index entries (their person ID itself is built from name and
//! birth date) in the same step, records the erasure, and keeps every later debtor
//! action of that case out.
//!
//! It keeps no per-action copy of a person block: each one is in the replica's note,
//! which is where a person's history is read from (releases before 2026-12-06 kept a
//! `party_history_vN` table of them, which `projection/upgrade.rs` drops).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::{Builder, Counts, ProjectionError, texts_in};
use crate::readmodel::fold::{ico_key, name_key, rc_key};
use crate::readmodel::party_cells::{
    CELL_COLUMNS, cells, doc_from, doc_sql, no_cells, read_columns,
};
use crate::readmodel::{KNOWN_ROLES, PartyDoc};
use crate::source::model::{Note, Person, Record};
use crate::store::sql::{Tx, Val};

fn win(slot: &mut Option<String>, v: &Option<String>) {
    if v.is_some() {
        *slot = v.clone();
    }
}

impl PartyDoc {
    fn key(&self) -> (String, String, String) {
        (
            self.case_number.clone(),
            self.court.clone(),
            self.person_id.clone(),
        )
    }

    pub fn is_debtor(&self) -> bool {
        self.role.as_deref() == Some("DLUŽNÍK")
    }

    fn merge(&mut self, p: &Person, action_id: i64) {
        win(&mut self.role, &p.role);
        win(&mut self.administrator_kind, &p.administrator_kind);
        win(&mut self.kind, &p.kind);
        win(&mut self.name, &p.name);
        win(&mut self.trade_name, &p.trade_name);
        win(&mut self.first_name, &p.first_name);
        win(&mut self.title_before, &p.title_before);
        win(&mut self.title_after, &p.title_after);
        win(&mut self.legal_form, &p.legal_form);
        win(&mut self.ico, &p.ico);
        win(&mut self.dic, &p.dic);
        win(&mut self.birth_number, &p.birth_number);
        win(&mut self.birth_date, &p.birth_date);
        win(&mut self.left_case, &p.left_case);
        if !p.addresses.is_empty() {
            self.addresses = p.addresses.clone();
        }
        self.latest_action_id = action_id;
    }
}

/// Recomputes the parties of the given records (one or more whole cases, in ID order).
pub fn fold(recs: &[Record]) -> BTreeMap<(String, String, String), PartyDoc> {
    let mut docs = BTreeMap::new();
    let mut erased = HashSet::new();
    let mut c = Counts::default();
    for r in recs {
        apply_one(
            r,
            &mut docs,
            &mut erased,
            &mut c,
            &mut Vec::new(),
            &mut Vec::new(),
        );
    }
    docs
}

type Key = (String, String, String);

fn apply_one(
    r: &Record,
    docs: &mut BTreeMap<Key, PartyDoc>,
    erased: &mut HashSet<String>,
    counts: &mut Counts,
    new_erasures: &mut Vec<(String, i64, String)>,
    deleted: &mut Vec<Key>,
) {
    let a = &r.action;
    let erases = crate::privacy::is_erasure(&a.type_code, &r.detail);
    match &r.detail {
        Note::Parsed(d) => {
            if let Some(p) = d
                .person
                .as_ref()
                .filter(|p| p.id != crate::privacy::REDACTED)
            {
                let court = d.origin.clone().unwrap_or_default();
                let key = (a.case_number.clone(), court.clone(), p.id.clone());
                if p.role.as_deref().is_some_and(|r| !KNOWN_ROLES.contains(&r)) {
                    counts.unknown_other += 1;
                }
                let known = docs.get(&key);
                let was_debtor = known.is_some_and(PartyDoc::is_debtor);
                // In an erased case a debtor never comes back: neither by a later debtor
                // block nor by a block without a role for a person not known otherwise.
                let debtor = was_debtor
                    || p.role.as_deref() == Some("DLUŽNÍK")
                    || (p.role.is_none() && known.is_none());
                if erased.contains(&a.case_number) && debtor {
                    if docs.remove(&key).is_some() {
                        deleted.push(key);
                    }
                } else {
                    let doc = docs.entry(key.clone()).or_insert_with(|| PartyDoc {
                        case_number: a.case_number.clone(),
                        court,
                        person_id: p.id.clone(),
                        first_action_id: a.id,
                        ..Default::default()
                    });
                    doc.merge(p, a.id);
                }
            }
        }
        Note::Unparsed { .. } => counts.unparsed += 1,
        Note::Absent => {}
    }
    if erases {
        let struck = match &r.detail {
            Note::Parsed(d) => d.struck_out.clone(),
            _ => None,
        };
        if erased.insert(a.case_number.clone()) {
            counts.erased += 1;
            new_erasures.push((a.case_number.clone(), a.id, struck.unwrap_or_default()));
        }
        // Debtors, and persons without a role (who may be the debtor), go.
        let gone: Vec<Key> = docs
            .iter()
            .filter(|(_, x)| x.case_number == a.case_number && (x.is_debtor() || x.role.is_none()))
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            docs.remove(&k);
            deleted.push(k);
        }
    }
}

pub struct Parties;

#[async_trait::async_trait]
impl Builder for Parties {
    fn name(&self) -> &'static str {
        "parties"
    }

    fn tables(&self, pg: bool) -> &'static [&'static str] {
        // PostgreSQL's name index is a table of persons and a table of their terms
        // (`super::names`); SQLite's one FTS5 table holds both.
        if pg {
            &["parties", "erasures", "names", "name_terms"]
        } else {
            &["parties", "erasures", "names"]
        }
    }

    fn retired_tables(&self) -> &'static [&'static str] {
        &[super::upgrade::HISTORY]
    }

    fn per_case(&self) -> bool {
        true
    }

    fn ddl(&self, v: i64, pg: bool) -> Vec<String> {
        // The document is kept as cells (`readmodel::party_cells`; `doc` is set only in
        // versions made before them), served whole by the view.
        let cells: String = CELL_COLUMNS
            .iter()
            .map(|(c, t)| format!(", {c} {t}"))
            .collect();
        let mut ddl = vec![
            format!(
                "CREATE TABLE parties_v{v} (case_number TEXT NOT NULL, court TEXT NOT NULL, person_id TEXT NOT NULL, \
                 role TEXT, kind TEXT, ico TEXT, rc TEXT, name_key TEXT, latest_action_id BIGINT NOT NULL, \
                 doc TEXT, first_action_id BIGINT NOT NULL{cells}, PRIMARY KEY (case_number, court, person_id))"
            ),
            // Each search key with the table's key after it: a lookup reads its persons
            // in the keyset order of `/v1/subjects` and stops at the page's end, however
            // many cases share the key (a bank's IČO is in thousands).
            format!(
                "CREATE INDEX parties_v{v}_ico ON parties_v{v} (ico, case_number, court, person_id)"
            ),
            // Most persons have no birth number (companies, administrators): on SQLite
            // the index leaves them out, which every lookup by a birth number allows (an
            // equality implies NOT NULL). (PostgreSQL cannot prove that from `= ANY` of
            // a parameter, so it keeps them.)
            format!(
                "CREATE INDEX parties_v{v}_rc ON parties_v{v} (rc, case_number, court, person_id){}",
                if pg { "" } else { " WHERE rc IS NOT NULL" }
            ),
            format!(
                "CREATE INDEX parties_v{v}_name ON parties_v{v} (name_key, case_number, court, person_id)"
            ),
            format!(
                "CREATE TABLE erasures_v{v} (case_number TEXT PRIMARY KEY, action_id BIGINT NOT NULL, struck_out TEXT NOT NULL)"
            ),
        ];
        ddl.extend(super::names::ddl(v, pg));
        ddl
    }

    fn view_sql(&self, t: &str, v: i64, pg: bool) -> String {
        if t != "parties" {
            return format!("SELECT * FROM {t}_v{v}");
        }
        // The columns of the table before its cells, the document whole.
        format!(
            "SELECT case_number, court, person_id, role, kind, ico, rc, name_key, latest_action_id, \
             {} AS doc, first_action_id FROM parties_v{v}",
            doc_sql(pg, "")
        )
    }

    fn extra_views(&self, v: i64) -> Vec<(&'static str, String)> {
        vec![(
            crate::readmodel::party_cells::VIEW,
            format!("SELECT * FROM parties_v{v}"),
        )]
    }

    async fn before_indexes(&self, tx: &mut Tx, v: i64) -> Result<(), ProjectionError> {
        // A rebuild's term table, filled from its persons' rows before its key is built.
        let n = super::names::fill_terms(tx, v).await?;
        if n > 0 {
            tracing::info!(version = v, terms = n, "parties: name terms filled");
        }
        Ok(())
    }

    fn retired_indexes(&self, v: i64, pg: bool) -> Vec<String> {
        // (The name index's latest action before it was unique.)
        if pg {
            vec![format!("names_v{v}_latest")]
        } else {
            Vec::new()
        }
    }

    async fn upgrade(&self, tx: &mut Tx, v: i64) -> Result<bool, ProjectionError> {
        let first = super::upgrade::first_action_column(tx, v).await?;
        let cells = super::upgrade::party_cells(tx, v).await?;
        Ok(super::upgrade::names_index(tx, v).await? || first || cells)
    }

    async fn apply(
        &self,
        tx: &mut Tx,
        v: i64,
        recs: &[Record],
        counts: &mut Counts,
    ) -> Result<(), ProjectionError> {
        // The cases this chunk touches, and which of them are already erased.
        let mut cases: Vec<String> = recs.iter().map(|r| r.action.case_number.clone()).collect();
        cases.sort();
        cases.dedup();
        let mut erased: HashSet<String> = HashSet::new();
        let mut docs: BTreeMap<Key, PartyDoc> = BTreeMap::new();
        // Load only what this chunk concerns: the persons its actions name, and the
        // debtors of the cases it erases.
        let mut person_keys: Vec<Key> = Vec::new();
        let mut erasing: Vec<String> = Vec::new();
        for r in recs {
            if let Note::Parsed(d) = &r.detail
                && let Some(p) = &d.person
            {
                person_keys.push((
                    r.action.case_number.clone(),
                    d.origin.clone().unwrap_or_default(),
                    p.id.clone(),
                ));
            }
            if crate::privacy::is_erasure(&r.action.type_code, &r.detail) {
                erasing.push(r.action.case_number.clone());
            }
        }
        person_keys.sort();
        person_keys.dedup();
        erasing.sort();
        erasing.dedup();
        for chunk in cases.chunks(500) {
            let sql = format!(
                "SELECT case_number FROM erasures_v{v} WHERE case_number IN ({})",
                tx.list(chunk.len())
            );
            erased.extend(tx.texts(&sql, &texts_in(chunk)).await?);
        }
        let pg = tx.is_postgres();
        let doc = read_columns("");
        for chunk in person_keys.chunks(300) {
            let tuples: Vec<String> = (0..chunk.len())
                .map(|i| {
                    if pg {
                        format!("(${},${},${})", 3 * i + 1, 3 * i + 2, 3 * i + 3)
                    } else {
                        "(?,?,?)".to_string()
                    }
                })
                .collect();
            let sql = format!(
                "SELECT {doc} FROM parties_v{v} WHERE (case_number, court, person_id) IN (VALUES {})",
                tuples.join(",")
            );
            let binds: Vec<Val> = chunk
                .iter()
                .flat_map(|(c, ct, p)| {
                    [Val::from(c.as_str()), ct.as_str().into(), p.as_str().into()]
                })
                .collect();
            for d in tx.rows_with(&sql, &binds, |r| doc_from(r, 0)).await? {
                let doc: PartyDoc = serde_json::from_str(&d)?;
                docs.insert(doc.key(), doc);
            }
        }
        for chunk in erasing.chunks(500) {
            let sql = format!(
                "SELECT {doc} FROM parties_v{v} WHERE (role = 'DLUŽNÍK' OR role IS NULL) AND case_number IN ({})",
                tx.list(chunk.len())
            );
            for d in tx
                .rows_with(&sql, &texts_in(chunk), |r| doc_from(r, 0))
                .await?
            {
                let doc: PartyDoc = serde_json::from_str(&d)?;
                docs.insert(doc.key(), doc);
            }
        }
        let before: HashMap<Key, PartyDoc> =
            docs.iter().map(|(k, d)| (k.clone(), d.clone())).collect();
        let mut new_erasures = Vec::new();
        let mut deleted = Vec::new();
        for r in recs {
            apply_one(
                r,
                &mut docs,
                &mut erased,
                counts,
                &mut new_erasures,
                &mut deleted,
            );
        }
        let changed: Vec<&PartyDoc> = docs
            .iter()
            .filter(|(k, d)| before.get(*k) != Some(*d))
            .map(|(_, d)| d)
            .collect();
        // A version made before the cells may still have `doc NOT NULL` (SQLite cannot
        // drop a constraint in place): its documents are stored whole.
        let whole = super::upgrade::party_docs_required(tx, v).await?;
        let rows: Vec<Vec<Val>> = changed
            .iter()
            .map(|d| {
                let (doc, cells) = if whole {
                    (Some(serde_json::to_string(d)?), no_cells())
                } else {
                    (None, cells(d)?)
                };
                let mut row = vec![
                    d.case_number.as_str().into(),
                    d.court.as_str().into(),
                    d.person_id.as_str().into(),
                    d.role.clone().into(),
                    d.kind.clone().into(),
                    d.ico.as_deref().map(ico_key).into(),
                    d.birth_number.as_deref().map(rc_key).into(),
                    d.name.as_deref().map(name_key).into(),
                    d.latest_action_id.into(),
                    doc.into(),
                    d.first_action_id.into(),
                ];
                row.extend(cells);
                Ok(row)
            })
            .collect::<Result<_, serde_json::Error>>()?;
        let columns: Vec<&str> =
            "case_number court person_id role kind ico rc name_key latest_action_id doc first_action_id"
                .split(' ')
        .chain(CELL_COLUMNS.iter().map(|(c, _)| *c))
        .collect();
        tx.upsert(
            &format!("parties_v{v}"),
            &columns,
            &["case_number", "court", "person_id"],
            &rows,
        )
        .await?;
        let indexed: Vec<(Option<i64>, &PartyDoc)> = changed
            .iter()
            .map(|d| (before.get(&d.key()).map(|b| b.latest_action_id), *d))
            .collect();
        super::names::write(tx, v, &indexed).await?;
        // With `redact_replica`, every row of an erased case leaves the raw replica
        // redacted: the rows up to the erasure when it is applied, and each later row of
        // the case when the builder reaches it (the cursor moves past it in this
        // transaction, so none is missed).
        let last = recs.last().map_or(0, |r| r.action.id);
        let to_redact: BTreeSet<&str> = recs
            .iter()
            .map(|r| r.action.case_number.as_str())
            .filter(|c| erased.contains(*c))
            .collect();
        let redact = !to_redact.is_empty()
            && tx
                .texts(
                    "SELECT value FROM settings WHERE key = 'redact_replica'",
                    &[],
                )
                .await?
                .first()
                .is_none_or(|v| v != "false");
        if redact {
            for case in &to_redact {
                redact_replica(tx, case, last).await?;
            }
        }
        for (case, id, struck) in &new_erasures {
            tx.insert_with(
                &format!("erasures_v{v}"),
                &["case_number", "action_id", "struck_out"],
                &[vec![
                    case.as_str().into(),
                    (*id).into(),
                    struck.as_str().into(),
                ]],
                " ON CONFLICT (case_number) DO NOTHING",
            )
            .await?;
        }
        // Erased debtors go in the same step.
        for (c, ct, p) in &deleted {
            super::names::delete(tx, v, [c, ct, p]).await?;
            tx.exec(
                &format!(
                    "DELETE FROM parties_v{v} WHERE case_number = $1 AND court = $2 AND person_id = $3"
                ),
                &[c.as_str().into(), ct.as_str().into(), p.as_str().into()],
            )
            .await?;
        }
        Ok(())
    }
}

/// Redacts, in the raw replica, the notes of `case`'s rows up to `upto`
/// ([`crate::privacy::redact_note`]: debtor and role-less person blocks, `idOsoby1/2`,
/// unknown elements; a note that does not parse is replaced whole). The option
/// `projection.redact_replica`. The only write to the replica outside the poller; it
/// never touches IDs, other fields or the checkpoint. Idempotent.
async fn redact_replica(tx: &mut Tx, case: &str, upto: i64) -> Result<(), ProjectionError> {
    // A note as text, or compressed (`DICT HEX`, [`crate::store::notes`]): the redacted
    // note is written back as text, the compressed form dropped.
    let sql = format!(
        "SELECT CAST(id AS TEXT) || '|' || {} || '|' || COALESCE(note, '') FROM actions \
         WHERE case_number = $1 AND id <= $2 AND (note IS NOT NULL OR note_z IS NOT NULL)",
        crate::store::notes::packed_sql(tx.is_postgres())
    );
    let rows = tx.texts(&sql, &[case.into(), upto.into()]).await?;
    let mut unpacker = crate::store::notes::Unpacker::new();
    for row in rows {
        let mut f = row.splitn(3, '|');
        let (Some(id), Some(packed), Some(text)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let bad = |why: String| ProjectionError::Action { id: -1, why };
        let id: i64 = id
            .parse()
            .map_err(|_| bad(format!("a replica row ID {id:?}")))?;
        let decoded;
        let note = if packed.is_empty() {
            text
        } else {
            let row = crate::store::notes::parse_packed(packed)
                .ok_or_else(|| bad(format!("action {id}: a malformed compressed note")))?;
            decoded = unpacker.unpack_in(tx, id, row).await?.unwrap_or_default();
            decoded.as_str()
        };
        let Some(redacted) = crate::privacy::redact_note(note) else {
            continue;
        };
        tx.exec(
            "UPDATE actions SET note = $1, note_z = NULL, note_dict = NULL WHERE id = $2",
            &[redacted.into(), id.into()],
        )
        .await?;
    }
    // The case's quarantine rows up to `upto` (held back or repaired) lose their bytes
    // as received: a record that did not parse cannot be redacted field by field.
    tx.exec(
        &format!(
            "UPDATE quarantine SET raw = substr(raw, 1, 0), detail = detail || '{}' \
             WHERE case_number = $1 AND action_id <= $2 AND length(raw) > 0",
            crate::privacy::QUARANTINE_ERASED
        ),
        &[case.into(), upto.into()],
    )
    .await?;
    Ok(())
}
