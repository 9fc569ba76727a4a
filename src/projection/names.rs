//! The name-search index of the parties projection (`names_vN`): one row per person,
//! with the words of their names folded for search ([`crate::readmodel::fold::search_words`]),
//! the exact-match key, the filters a search takes (role, kind, birth year) and the
//! person's latest action, which is the index's order: a search reads its matches
//! newest first and stops at the page's end, however many persons match.
//!
//! On SQLite it is an FTS5 table whose rowid is the person's latest action ID, negated
//! (one action names one person, so the ID is the person's alone): FTS5 walks a match
//! in rowid order without sorting it, and newest first is forward, which FTS5 walks
//! faster than backward (its term lists are read in rowid order). A table of an earlier
//! release, whose rowids are the IDs themselves, is built again ([`current`]). The
//! words are indexed with prefixes, the filters as tokens of a second column (`tags`),
//! the rest `UNINDEXED`; `prow` is the person's `parties` rowid.
//!
//! On PostgreSQL the same walk runs on a B-tree: `names_vN` holds one row per person
//! (keyed like `parties`, with the words, the exact key, the filters and the latest
//! action), and `name_terms_vN` one row per (term, person), a term being a word's
//! prefix of 2 to 6 characters ([`PG_TERMS`]), keyed by (term, latest action). A page
//! of a search is a walk of one term's rows newest first that stops at the page's end,
//! the other words probed by the same key (`read::search`). Each person's terms are
//! also kept in `names_vN.terms`, so that the rows of an earlier latest action can be
//! found and deleted. A rebuild leaves the term table empty and without its key until
//! its indexes are built: then the table is filled from `names_vN.terms` in one
//! statement and its key built once ([`fill_terms`]), not kept up row by row.
//!
//! Written only by the parties builder, in the same step as the row it indexes (an
//! erased debtor leaves both at once, terms included); read only by
//! [`crate::read::search`].

use super::ProjectionError;
use crate::readmodel::PartyDoc;
use crate::readmodel::fold::{exact_key, search_words};
use crate::readmodel::keys::{PG_TERMS, PREFIXES, exact_tag, tag};
use crate::store::sql::{Tx, Val};

/// The tables' statements for version `v`.
pub fn ddl(v: i64, pg: bool) -> Vec<String> {
    if pg {
        vec![
            format!(
                "CREATE TABLE names_v{v} (case_number TEXT NOT NULL, court TEXT NOT NULL, person_id TEXT NOT NULL, \
                 words TEXT NOT NULL, terms TEXT NOT NULL, exact TEXT NOT NULL, birth_year BIGINT, role TEXT, \
                 kind TEXT, latest BIGINT NOT NULL, PRIMARY KEY (case_number, court, person_id))"
            ),
            // One row per (term, person). Its key is the walk's order and the probe of
            // a person's other terms; it is an index (the name an earlier release's
            // primary key had), so that a rebuild builds it at its end, after the table
            // is filled ([`fill_terms`]). Until the key exists, no term is written.
            format!("CREATE TABLE name_terms_v{v} (term TEXT NOT NULL, latest BIGINT NOT NULL)"),
            format!("CREATE UNIQUE INDEX name_terms_v{v}_pkey ON name_terms_v{v} (term, latest)"),
            // The exact names newest first.
            format!("CREATE INDEX names_v{v}_exact ON names_v{v} (exact, latest)"),
            // A walked term's row to its person. Unique, as each action names one
            // person: a term's row is one person's (as SQLite's rowid makes it there).
            format!("CREATE UNIQUE INDEX names_v{v}_latest_key ON names_v{v} (latest)"),
        ]
    } else {
        // Prefix indexes of 2 to 4 characters: `nova*` reads one term list, not every
        // term that starts so.
        let prefix: Vec<String> = PREFIXES.map(|l| l.to_string()).collect();
        vec![format!(
            "CREATE VIRTUAL TABLE names_v{v} USING fts5(words, tags, exact UNINDEXED, case_number UNINDEXED, \
             court UNINDEXED, person_id UNINDEXED, prow UNINDEXED, \
             tokenize = 'unicode61 remove_diacritics 2', prefix = '{}')",
            prefix.join(" ")
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

/// The prefixes of `words` that PostgreSQL's term table keeps ([`PG_TERMS`] characters
/// long; a word of that length is one of its own), each once, space-separated
/// (`names_vN.terms`). The words are letters and digits only ([`search_words`]).
pub fn prefix_terms(words: &[String]) -> String {
    let mut t: Vec<String> = Vec::new();
    for w in words {
        let chars: Vec<char> = w.chars().collect();
        for l in PG_TERMS {
            if chars.len() >= l {
                let p: String = chars[..l].iter().collect();
                if !t.contains(&p) {
                    t.push(p);
                }
            }
        }
    }
    t.join(" ")
}

/// The year of a birth date (`YYYY-MM-DD`), when it has one.
pub fn birth_year(d: &PartyDoc) -> Option<i64> {
    let b = d.birth_date.as_deref()?;
    b.get(..4)?
        .parse()
        .ok()
        .filter(|y| (1800..2200).contains(y))
}

/// A person's filter tokens: the exact name (`x`), role (`r`), kind (`k`), birth year
/// (`y`); `w` is the person's [`words_of`], which the caller has at hand.
pub fn tags_of(d: &PartyDoc, w: &[String]) -> String {
    let mut t = Vec::new();
    if !w.is_empty() {
        t.push(exact_tag(w));
    }
    if let Some(r) = &d.role {
        t.push(tag('r', r));
    }
    if let Some(k) = &d.kind {
        t.push(tag('k', k));
    }
    if let Some(y) = birth_year(d) {
        t.push(format!("y{y}"));
    }
    t.join(" ")
}

const KEY: &str = "case_number = $1 AND court = $2 AND person_id = $3";

/// Indexes `docs` (new or changed persons, already written to `parties_v{v}`), each
/// with the latest action it was indexed under before (`None`: not indexed yet),
/// replacing what was indexed of them.
pub async fn write(
    tx: &mut Tx,
    v: i64,
    docs: &[(Option<i64>, &PartyDoc)],
) -> Result<(), ProjectionError> {
    if tx.is_postgres() {
        let kept = terms_kept(tx, v).await?;
        // Each person's terms, and the (term, latest action) pairs they add.
        let (mut pair_terms, mut pair_latest) = (Vec::new(), Vec::new());
        let mut rows: Vec<Vec<Val>> = Vec::with_capacity(docs.len());
        for (_, d) in docs {
            let w = words_of(d);
            let terms = prefix_terms(&w);
            if kept {
                for t in terms.split_whitespace() {
                    pair_terms.push(t.to_string());
                    pair_latest.push(d.latest_action_id);
                }
            }
            rows.push(vec![
                d.case_number.as_str().into(),
                d.court.as_str().into(),
                d.person_id.as_str().into(),
                w.join(" ").into(),
                terms.into(),
                exact_key(&w).into(),
                birth_year(d).into(),
                d.role.clone().into(),
                d.kind.clone().into(),
                d.latest_action_id.into(),
            ]);
        }
        // The terms of the persons' earlier rows go first, found by the terms their
        // person rows hold; then the rows are replaced and their terms added. Every
        // statement finds its rows by a key: a rebuild builds the other indexes only at
        // its end.
        let earlier: Vec<&PartyDoc> = docs
            .iter()
            .filter(|(old, _)| old.is_some())
            .map(|(_, d)| *d)
            .collect();
        if kept && !earlier.is_empty() {
            tx.exec(
                &format!(
                    "DELETE FROM name_terms_v{v} t USING names_v{v} n, \
                     unnest(CAST($1 AS TEXT[]), CAST($2 AS TEXT[]), CAST($3 AS TEXT[])) AS k(c, ct, p) \
                     WHERE n.case_number = k.c AND n.court = k.ct AND n.person_id = k.p \
                     AND t.latest = n.latest AND t.term = ANY(string_to_array(n.terms, ' '))"
                ),
                &[
                    text_array(earlier.iter().map(|d| d.case_number.as_str())),
                    text_array(earlier.iter().map(|d| d.court.as_str())),
                    text_array(earlier.iter().map(|d| d.person_id.as_str())),
                ],
            )
            .await?;
        }
        tx.upsert(
            &format!("names_v{v}"),
            &[
                "case_number",
                "court",
                "person_id",
                "words",
                "terms",
                "exact",
                "birth_year",
                "role",
                "kind",
                "latest",
            ],
            &["case_number", "court", "person_id"],
            &rows,
        )
        .await?;
        if !pair_terms.is_empty() {
            tx.exec(
                &format!(
                    "INSERT INTO name_terms_v{v} (term, latest) \
                     SELECT * FROM unnest(CAST($1 AS TEXT[]), CAST($2 AS BIGINT[])) ON CONFLICT DO NOTHING"
                ),
                &[
                    text_array(pair_terms.iter().map(String::as_str)),
                    int_array(&pair_latest),
                ],
            )
            .await?;
        }
        return Ok(());
    }
    // FTS5 finds a row fast only by its rowid: the latest action it was indexed under,
    // negated.
    let del = format!("DELETE FROM names_v{v} WHERE rowid = -$1");
    let ins = format!(
        "INSERT INTO names_v{v} (rowid, words, tags, exact, case_number, court, person_id, prow) \
         SELECT -$4, $5, $6, $7, case_number, court, person_id, rowid FROM parties_v{v} WHERE {KEY}"
    );
    for (old, d) in docs {
        if let Some(old) = old {
            tx.exec(&del, &[(*old).into()]).await?;
        }
        let w = words_of(d);
        let binds: [Val; 7] = [
            d.case_number.as_str().into(),
            d.court.as_str().into(),
            d.person_id.as_str().into(),
            d.latest_action_id.into(),
            w.join(" ").into(),
            tags_of(d, &w).into(),
            exact_key(&w).into(),
        ];
        tx.exec(&ins, &binds).await?;
    }
    Ok(())
}

/// A PostgreSQL array of `ids`, as text to cast (`CAST($1 AS BIGINT[])`).
fn int_array(ids: &[i64]) -> Val {
    let items: Vec<String> = ids.iter().map(i64::to_string).collect();
    format!("{{{}}}", items.join(",")).into()
}

/// A PostgreSQL array of `items`, as text to cast (`CAST($1 AS TEXT[])`): each element
/// quoted, its backslashes and quotes escaped (a case number holds a space and a slash;
/// a person ID may hold anything).
fn text_array<'a>(items: impl Iterator<Item = &'a str>) -> Val {
    let quoted: Vec<String> = items
        .map(|s| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"")))
        .collect();
    format!("{{{}}}", quoted.join(",")).into()
}

/// Removes a person from the index; before their `parties_v{v}` row goes (on SQLite
/// its latest action is the index row's rowid; on PostgreSQL their terms go first).
pub async fn delete(tx: &mut Tx, v: i64, key: [&str; 3]) -> Result<(), ProjectionError> {
    let sql = if tx.is_postgres() {
        if terms_kept(tx, v).await? {
            tx.exec(
                &format!(
                    "DELETE FROM name_terms_v{v} t USING names_v{v} n \
                     WHERE n.case_number = $1 AND n.court = $2 AND n.person_id = $3 \
                     AND t.latest = n.latest AND t.term = ANY(string_to_array(n.terms, ' '))"
                ),
                &key.map(Val::from),
            )
            .await?;
        }
        format!("DELETE FROM names_v{v} WHERE {KEY}")
    } else {
        format!(
            "DELETE FROM names_v{v} WHERE rowid = -(SELECT latest_action_id FROM parties_v{v} WHERE {KEY})"
        )
    };
    tx.exec(&sql, &key.map(Val::from)).await?;
    Ok(())
}

/// Whether version `v`'s term table is kept up row by row: whether its key exists (a
/// rebuild builds it at its end, [`fill_terms`]). On SQLite there is no term table.
pub async fn terms_kept(tx: &mut Tx, v: i64) -> Result<bool, ProjectionError> {
    if !tx.is_postgres() {
        return Ok(false);
    }
    let key = format!("name_terms_v{v}_pkey");
    Ok(tx
        .int(
            "SELECT COUNT(*) FROM pg_class WHERE oid = to_regclass($1)",
            &[key.as_str().into()],
        )
        .await?
        .unwrap_or(0)
        > 0)
}

/// Fills version `v`'s term table from its persons' rows (`names_vN.terms`) in one
/// statement, unless it is kept already: what a rebuild does just before it builds the
/// table's key with its other indexes, and an upgrade before it adds a missing key.
/// Whatever the table held goes first. Returns the rows it wrote.
pub async fn fill_terms(tx: &mut Tx, v: i64) -> Result<u64, ProjectionError> {
    if !tx.is_postgres() || terms_kept(tx, v).await? {
        return Ok(0);
    }
    tx.exec(&format!("DELETE FROM name_terms_v{v}"), &[])
        .await?;
    Ok(tx
        .exec(
            &format!(
                "INSERT INTO name_terms_v{v} (term, latest) \
                 SELECT t.term, n.latest FROM names_v{v} n, unnest(string_to_array(n.terms, ' ')) AS t(term)"
            ),
            &[],
        )
        .await?)
}

/// Whether version `v`'s index exists in this release's form: `None` when it does not
/// exist, `Some(false)` when it is an earlier release's (on SQLite ranked by another
/// order or by the latest action not negated, on PostgreSQL without the term table).
pub async fn current(tx: &mut Tx, v: i64) -> Result<Option<bool>, ProjectionError> {
    let table = format!("names_v{v}");
    let (exists, column) = if tx.is_postgres() {
        (
            "SELECT COUNT(*) FROM pg_class WHERE relname = $1 AND relkind IN ('r', 'p')",
            // The term table, and the persons' table with the terms it deletes by.
            "SELECT COUNT(*) FROM pg_class WHERE relname = 'name_terms_' || substr($1, 7) \
             AND relkind IN ('r', 'p') AND EXISTS (SELECT 1 FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 AND column_name = 'terms')",
        )
    } else {
        (
            "SELECT COUNT(*) FROM sqlite_master WHERE name = $1 AND type = 'table'",
            "SELECT COUNT(*) FROM sqlite_master WHERE name = $1 AND type = 'table' AND sql LIKE '%prow UNINDEXED%'",
        )
    };
    if tx.int(exists, &[table.as_str().into()]).await?.unwrap_or(0) == 0 {
        return Ok(None);
    }
    if tx.int(column, &[table.as_str().into()]).await?.unwrap_or(0) == 0 {
        return Ok(Some(false));
    }
    // On SQLite, an earlier release's rowids were the latest actions themselves: one
    // positive rowid tells (an empty table is either, and written in this form).
    Ok(Some(
        tx.is_postgres()
            || tx
                .int(
                    &crate::readmodel::keys::sqlite_names_not_negated(&table),
                    &[],
                )
                .await?
                == Some(0),
    ))
}

/// Creates version `v`'s tables and indexes every person of `parties_v{v}` into it, in
/// keyset chunks (the upgrade of a store built before this release's index); an
/// earlier release's table goes first, with its view.
pub async fn backfill(tx: &mut Tx, v: i64) -> Result<u64, ProjectionError> {
    let pg = tx.is_postgres();
    if current(tx, v).await?.is_some() {
        tx.exec("DROP VIEW IF EXISTS names", &[]).await?;
        tx.exec(&format!("DROP TABLE names_v{v}"), &[]).await?;
    }
    if pg {
        tx.exec("DROP VIEW IF EXISTS name_terms", &[]).await?;
        tx.exec(&format!("DROP TABLE IF EXISTS name_terms_v{v}"), &[])
            .await?;
    }
    // The term table's key once the table is filled, as a rebuild builds it
    // ([`fill_terms`]): until then no term is written row by row.
    let key = format!("name_terms_v{v}_pkey");
    let (keys, tables): (Vec<String>, Vec<String>) =
        ddl(v, pg).into_iter().partition(|s| s.contains(&key));
    for stmt in tables {
        tx.exec(&stmt, &[]).await?;
    }
    let mut after = [String::new(), String::new(), String::new()];
    let mut n = 0u64;
    loop {
        let sql = format!(
            "SELECT {} FROM parties_v{v} WHERE (case_number, court, person_id) > ($1, $2, $3) \
             ORDER BY case_number, court, person_id LIMIT 2000",
            crate::readmodel::party_cells::read_columns("")
        );
        let binds: Vec<Val> = after.iter().map(|s| s.as_str().into()).collect();
        let rows = tx
            .rows_with(&sql, &binds, |r| {
                crate::readmodel::party_cells::doc_from(r, 0)
            })
            .await?;
        if rows.is_empty() {
            break;
        }
        let docs: Vec<PartyDoc> = rows
            .iter()
            .map(|r| serde_json::from_str(r))
            .collect::<Result<_, _>>()?;
        write(tx, v, &docs.iter().map(|d| (None, d)).collect::<Vec<_>>()).await?;
        n += docs.len() as u64;
        let l = docs.last().expect("a non-empty chunk");
        after = [l.case_number.clone(), l.court.clone(), l.person_id.clone()];
    }
    fill_terms(tx, v).await?;
    for stmt in keys {
        tx.exec(&stmt, &[]).await?;
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
            role: Some("DLUŽNÍK".into()),
            kind: Some("F".into()),
            ..Default::default()
        };
        assert_eq!(words_of(&p), ["jana", "marie", "novakova"]);
        assert_eq!(birth_year(&p), Some(1971));
        let x = exact_tag(&["novakova".into(), "marie".into(), "jana".into()]);
        assert_eq!(x.len(), 17);
        assert_eq!(tags_of(&p, &words_of(&p)), format!("{x} rdluznik kf y1971"));
        let c = PartyDoc {
            name: Some("Alza.cz a.s.".into()),
            trade_name: Some("ALZA.CZ".into()),
            role: Some("VĚŘIT-NAVR".into()),
            ..Default::default()
        };
        assert_eq!(words_of(&c), ["alza", "cz"]);
        assert_eq!(birth_year(&c), None);
        assert_eq!(
            tags_of(&c, &words_of(&c)),
            format!("{} rveritnavr", exact_tag(&["cz".into(), "alza".into()]))
        );
    }

    #[test]
    fn prefix_terms_of_words() {
        let w = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            prefix_terms(&w(&["jana", "novakova", "j", "ab"])),
            "ja jan jana no nov nova novak novako ab"
        );
        // By characters, not bytes; a prefix shared by two words once.
        assert_eq!(
            prefix_terms(&w(&["østerby", "østen"])),
            "øs øst øste øster østerb østen"
        );
        assert_eq!(prefix_terms(&[]), "");
    }

    /// PostgreSQL's array input: elements in double quotes, a backslash before each
    /// quote and backslash inside (its manual, "Array Value Input").
    #[test]
    fn arrays_are_quoted_for_postgres() {
        assert_eq!(
            text_array(["INS 1/2020", "a\"b\\c", "", "x,y{}"].into_iter()),
            Val::from(r#"{"INS 1/2020","a\"b\\c","","x,y{}"}"#)
        );
        assert_eq!(int_array(&[3, -1]), Val::from("{3,-1}"));
        assert_eq!(int_array(&[]), Val::from("{}"));
    }

    #[test]
    fn the_filters_fold_to_distinct_tags() {
        let roles: Vec<String> = crate::readmodel::KNOWN_ROLES
            .iter()
            .map(|r| tag('r', r))
            .collect();
        assert_eq!(roles, ["rdluznik", "rveritel", "rveritnavr", "rspravce"]);
        let kinds: Vec<String> = ["F", "P", "PODNIKATEL"]
            .iter()
            .map(|k| tag('k', k))
            .collect();
        assert_eq!(kinds, ["kf", "kp", "kpodnikatel"]);
    }
}
