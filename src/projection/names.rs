//! The name-search index of the parties projection (`names_vN`): one row per person,
//! keyed like `parties`, with the words of their names folded for search
//! ([`super::fold::search_words`]), the exact-match key and the birth year.
//!
//! On SQLite it is an FTS5 table (the words indexed with prefixes, every other column
//! `UNINDEXED`, its rowid the person's `parties` rowid); on PostgreSQL a plain table
//! with a GIN index over `to_tsvector('simple', words)`. Written only by the parties
//! builder, in the same step as the row it indexes (an erased debtor leaves both at
//! once); read only by [`crate::read::search`].

use super::ProjectionError;
use super::fold::{exact_key, search_words};
use super::parties::PartyDoc;
use super::sql::{Tx, Val};

/// The table's statements for version `v`.
pub fn ddl(v: i64, pg: bool) -> Vec<String> {
    if pg {
        vec![
            format!(
                "CREATE TABLE names_v{v} (case_number TEXT NOT NULL, court TEXT NOT NULL, person_id TEXT NOT NULL, \
                 words TEXT NOT NULL, exact TEXT NOT NULL, birth_year BIGINT, PRIMARY KEY (case_number, court, person_id))"
            ),
            format!(
                "CREATE INDEX names_v{v}_words ON names_v{v} USING GIN (to_tsvector('simple', words))"
            ),
        ]
    } else {
        // Prefix indexes of 2 and 3 characters: `nov*` reads one term list, not every
        // term that starts so.
        vec![format!(
            "CREATE VIRTUAL TABLE names_v{v} USING fts5(words, exact UNINDEXED, case_number UNINDEXED, \
             court UNINDEXED, person_id UNINDEXED, birth_year UNINDEXED, \
             tokenize = 'unicode61 remove_diacritics 2', prefix = '2 3')"
        )]
    }
}

/// The words of a person's names: surname or company name, given name, trade name.
pub fn words_of(d: &PartyDoc) -> Vec<String> {
    let mut w = Vec::new();
    for part in [&d.first_name, &d.name, &d.trade_name]
        .into_iter()
        .flatten()
    {
        for word in search_words(part) {
            if !w.contains(&word) {
                w.push(word);
            }
        }
    }
    w
}

/// The year of a birth date (`YYYY-MM-DD`), when it has one.
pub fn birth_year(d: &PartyDoc) -> Option<i64> {
    let b = d.birth_date.as_deref()?;
    b.get(..4)?
        .parse()
        .ok()
        .filter(|y| (1800..2200).contains(y))
}

const KEY: &str = "case_number = $1 AND court = $2 AND person_id = $3";

/// Indexes `docs` (new or changed persons, already written to `parties_v{v}`),
/// replacing what was indexed of them.
pub async fn write(tx: &mut Tx, v: i64, docs: &[&PartyDoc]) -> Result<(), ProjectionError> {
    let pg = tx.is_postgres();
    if pg {
        let rows: Vec<Vec<Val>> = docs
            .iter()
            .map(|d| {
                let w = words_of(d);
                vec![
                    d.case_number.as_str().into(),
                    d.court.as_str().into(),
                    d.person_id.as_str().into(),
                    w.join(" ").into(),
                    exact_key(&w).into(),
                    birth_year(d).into(),
                ]
            })
            .collect();
        tx.upsert(
            &format!("names_v{v}"),
            &[
                "case_number",
                "court",
                "person_id",
                "words",
                "exact",
                "birth_year",
            ],
            &["case_number", "court", "person_id"],
            &rows,
        )
        .await?;
        return Ok(());
    }
    // FTS5 finds a row fast only by its rowid: the person's rowid in `parties_v{v}`.
    let del = format!(
        "DELETE FROM names_v{v} WHERE rowid = (SELECT rowid FROM parties_v{v} WHERE {KEY})"
    );
    let ins = format!(
        "INSERT INTO names_v{v} (rowid, words, exact, case_number, court, person_id, birth_year) \
         SELECT rowid, $4, $5, case_number, court, person_id, $6 FROM parties_v{v} WHERE {KEY}"
    );
    for d in docs {
        let key: [Val; 3] = [
            d.case_number.as_str().into(),
            d.court.as_str().into(),
            d.person_id.as_str().into(),
        ];
        tx.exec(&del, &key).await?;
        let w = words_of(d);
        let mut binds = key.to_vec();
        binds.extend([
            w.join(" ").into(),
            exact_key(&w).into(),
            birth_year(d).into(),
        ]);
        tx.exec(&ins, &binds).await?;
    }
    Ok(())
}

/// Removes a person from the index; before their `parties_v{v}` row goes.
pub async fn delete(tx: &mut Tx, v: i64, key: [&str; 3]) -> Result<(), ProjectionError> {
    let sql = if tx.is_postgres() {
        format!("DELETE FROM names_v{v} WHERE {KEY}")
    } else {
        format!("DELETE FROM names_v{v} WHERE rowid = (SELECT rowid FROM parties_v{v} WHERE {KEY})")
    };
    tx.exec(&sql, &key.map(Val::from)).await?;
    Ok(())
}

/// Whether version `v`'s table exists (a store built before name search has none).
pub async fn exists(tx: &mut Tx, v: i64) -> Result<bool, ProjectionError> {
    let sql = if tx.is_postgres() {
        "SELECT COUNT(*) FROM pg_class WHERE relname = $1 AND relkind IN ('r', 'p')"
    } else {
        "SELECT COUNT(*) FROM sqlite_master WHERE name = $1 AND type = 'table'"
    };
    Ok(tx
        .int(sql, &[format!("names_v{v}").into()])
        .await?
        .unwrap_or(0)
        > 0)
}

/// Creates version `v`'s table and indexes every person of `parties_v{v}` into it, in
/// keyset chunks (the upgrade of a store built before name search).
pub async fn backfill(tx: &mut Tx, v: i64) -> Result<u64, ProjectionError> {
    let pg = tx.is_postgres();
    for stmt in ddl(v, pg) {
        tx.exec(&stmt, &[]).await?;
    }
    let mut after = [String::new(), String::new(), String::new()];
    let mut n = 0u64;
    loop {
        let sql = format!(
            "SELECT doc FROM parties_v{v} WHERE (case_number, court, person_id) > ($1, $2, $3) \
             ORDER BY case_number, court, person_id LIMIT 2000"
        );
        let binds: Vec<Val> = after.iter().map(|s| s.as_str().into()).collect();
        let rows = tx.texts(&sql, &binds).await?;
        if rows.is_empty() {
            break;
        }
        let docs: Vec<PartyDoc> = rows
            .iter()
            .map(|r| serde_json::from_str(r))
            .collect::<Result<_, _>>()?;
        write(tx, v, &docs.iter().collect::<Vec<_>>()).await?;
        n += docs.len() as u64;
        let l = docs.last().expect("a non-empty chunk");
        after = [l.case_number.clone(), l.court.clone(), l.person_id.clone()];
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_of_a_person_and_a_company() {
        let p = PartyDoc {
            name: Some("Nováková".into()),
            first_name: Some("Jana Marie".into()),
            birth_date: Some("1971-04-02".into()),
            ..Default::default()
        };
        assert_eq!(words_of(&p), ["jana", "marie", "novakova"]);
        assert_eq!(birth_year(&p), Some(1971));
        let c = PartyDoc {
            name: Some("Alza.cz a.s.".into()),
            trade_name: Some("ALZA.CZ".into()),
            ..Default::default()
        };
        assert_eq!(words_of(&c), ["alza", "cz"]);
        assert_eq!(birth_year(&c), None);
    }
}
