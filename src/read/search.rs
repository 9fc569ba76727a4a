//! Name search: persons whose names hold every searched word as a word or a word's
//! prefix, in any order, case and diacritics ignored, legal-form suffixes ignored;
//! ranked (the exact full name first, then the others), then by their case's latest
//! action, keyset-paged. One statement on each engine's own text index (SQLite FTS5,
//! PostgreSQL `tsvector` with GIN), which the JSON API and the search page share.
//!
//! Reads the `names`, `parties` and `cases` views in the caller's snapshot; never
//! writes. An erased debtor has no `names` or `parties` row, so never matches.

use super::Problem;
use crate::projection::fold::{exact_key, search_words};
use crate::projection::sql::{Tx, Val};

/// Characters a search text takes at most (the parameter's `maxLength`).
pub const MAX_TEXT: usize = 200;

/// Words a search takes at most.
pub const MAX_WORDS: usize = 8;

/// A parsed search.
#[derive(Debug, Clone, Default)]
pub struct Search {
    /// The folded words, in the order given.
    pub words: Vec<String>,
    /// Only persons in this role (`DLUŽNÍK`, `VĚŘITEL`...).
    pub role: Option<String>,
    /// Only cases of this court (its short code, `KSPH`).
    pub court: Option<String>,
    /// Only natural persons or only companies (the parties' `kind`: `F`, `P`, `PODNIKATEL`...).
    pub kinds: Vec<String>,
    /// Only persons born in this year (a `pii` key's filter).
    pub birth_year: Option<i64>,
}

/// Where a page starts: after this (tier, latest action, case, court, person).
#[derive(Debug, Clone, PartialEq)]
pub struct After {
    pub tier: i64,
    pub latest: i64,
    pub key: [String; 3],
}

impl After {
    /// The position just after `hit`.
    pub fn of(hit: &Hit) -> Result<After, Problem> {
        let c = crate::projection::columns::cells(&hit.doc, &["case_number", "court", "person_id"])
            .map_err(Problem::internal)?;
        Ok(After {
            tier: hit.tier,
            latest: hit.latest,
            key: [
                c[0].as_str().to_string(),
                c[1].as_str().to_string(),
                c[2].as_str().to_string(),
            ],
        })
    }

    /// The sealed cursor after `hit` (a person ID never leaves in a link).
    pub fn seal(p: &crate::privacy::Privacy, hit: &Hit) -> Result<String, Problem> {
        let a = After::of(hit)?;
        let [case, court, person] = a.key;
        Ok(p.seal(&[
            a.tier.to_string(),
            a.latest.to_string(),
            case,
            court,
            person,
        ]))
    }

    /// A cursor [`After::seal`] made, or a 400.
    pub fn unseal(p: &crate::privacy::Privacy, c: &str) -> Result<After, Problem> {
        let bad =
            || Problem::bad("the cursor is malformed or not this replica's; use the `next` link");
        let v = p.unseal(c, 5).ok_or_else(bad)?;
        let num = |s: &str| s.parse::<i64>().map_err(|_| bad());
        Ok(After {
            tier: num(&v[0])?,
            latest: num(&v[1])?,
            key: [v[2].clone(), v[3].clone(), v[4].clone()],
        })
    }
}

impl Search {
    /// The words of `text`, refused with a 400 that says why when there is nothing to
    /// search or too much.
    pub fn words(text: &str) -> Result<Vec<String>, Problem> {
        if text.chars().count() > MAX_TEXT {
            return Err(Problem::bad(format!(
                "q is longer than {MAX_TEXT} characters"
            )));
        }
        let words = search_words(text);
        if words.is_empty() {
            return Err(Problem::bad(format!(
                "q {text:?} holds no word to search (legal forms such as s.r.o. are ignored)"
            )));
        }
        if words.len() > MAX_WORDS {
            return Err(Problem::bad(format!(
                "q holds {} words; at most {MAX_WORDS}",
                words.len()
            )));
        }
        if words.iter().all(|w| w.chars().count() < 2) {
            return Err(Problem::bad(
                "q needs a word of two characters or more (a single letter matches too much)",
            ));
        }
        Ok(words)
    }
}

/// The full-text condition for `words` on this back end: every word as a prefix.
fn match_expr(words: &[String], pg: bool) -> String {
    // The words are letters and digits only (`search_words` splits at anything else),
    // so they need no quoting beyond the engine's own.
    if pg {
        words
            .iter()
            .map(|w| format!("{w}:*"))
            .collect::<Vec<_>>()
            .join(" & ")
    } else {
        words
            .iter()
            .map(|w| format!("\"{w}\"*"))
            .collect::<Vec<_>>()
            .join(" AND ")
    }
}

/// The tables a search reads: the views (PostgreSQL), or on SQLite the live versions'
/// tables, so that a person's row is found by the rowid its name row shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tables {
    Views,
    Sqlite { parties: i64, cases: i64 },
}

impl Tables {
    /// The tables of `tx`'s snapshot.
    pub async fn of(tx: &mut Tx) -> Result<Tables, Problem> {
        use super::lists::{Source, source};
        Ok(
            match (source(tx, "parties").await?, source(tx, "cases").await?) {
                (Source::Sqlite(parties), Source::Sqlite(cases)) => {
                    Tables::Sqlite { parties, cases }
                }
                _ => Tables::Views,
            },
        )
    }
}

/// The statement and its binds: `tier|latest|doc` of each match (the tier 0 for the
/// exact name, the case's latest action), at most `limit`, in rank order.
///
/// The ranking reads only the name index and the cases' latest actions; the persons'
/// documents are read for the page's rows alone (on SQLite by rowid).
pub fn sql(s: &Search, after: Option<&After>, limit: i64, at: Tables) -> (String, Vec<Val>) {
    let pg = at == Tables::Views;
    let (names, parties, cases) = match at {
        Tables::Views => (
            "names".to_string(),
            "parties".to_string(),
            "cases".to_string(),
        ),
        Tables::Sqlite { parties, cases } => (
            format!("names_v{parties}"),
            format!("parties_v{parties}"),
            format!("cases_v{cases}"),
        ),
    };
    let mut binds: Vec<Val> = vec![match_expr(&s.words, pg).into(), exact_key(&s.words).into()];
    let matches = if pg {
        "to_tsvector('simple', n.words) @@ to_tsquery('simple', $1)".to_string()
    } else {
        format!("{names} MATCH $1")
    };
    let mut conds = vec![matches];
    fn add(conds: &mut Vec<String>, binds: &mut Vec<Val>, cond: &str, v: Val) {
        binds.push(v);
        conds.push(cond.replace('?', &format!("${}", binds.len())));
    }
    let person = |alias: &str| match at {
        Tables::Views => format!(
            "{alias}.case_number = n.case_number AND {alias}.court = n.court AND {alias}.person_id = n.person_id"
        ),
        Tables::Sqlite { .. } => format!("{alias}.rowid = n.rowid"),
    };
    // The person's row joins the ranking only when a filter needs its fields.
    let filtered = s.role.is_some() || !s.kinds.is_empty();
    if let Some(r) = &s.role {
        add(&mut conds, &mut binds, "f.role = ?", r.as_str().into());
    }
    if let Some(c) = &s.court {
        add(
            &mut conds,
            &mut binds,
            "c.court_short = ?",
            c.as_str().into(),
        );
    }
    if let Some(y) = s.birth_year {
        add(&mut conds, &mut binds, "n.birth_year = ?", y.into());
    }
    if !s.kinds.is_empty() {
        let mut marks = Vec::new();
        for k in &s.kinds {
            binds.push(k.as_str().into());
            marks.push(format!("${}", binds.len()));
        }
        conds.push(format!("f.kind IN ({})", marks.join(", ")));
    }
    let tier = "CASE WHEN n.exact = $2 THEN 0 ELSE 1 END";
    if let Some(a) = after {
        let b = binds.len();
        binds.extend([
            a.tier.into(),
            (-a.latest).into(),
            a.key[0].as_str().into(),
            a.key[1].as_str().into(),
            a.key[2].as_str().into(),
        ]);
        conds.push(format!(
            "({tier}, -c.latest_action_id, n.case_number, n.court, n.person_id) > (${}, ${}, ${}, ${}, ${})",
            b + 1,
            b + 2,
            b + 3,
            b + 4,
            b + 5
        ));
    }
    binds.push(limit.into());
    let rid = if pg { "" } else { "n.rowid AS rid, " };
    let filter_join = if filtered {
        format!("JOIN {parties} f ON {} ", person("f"))
    } else {
        String::new()
    };
    let page_join = match at {
        Tables::Views => {
            "p.case_number = h.case_number AND p.court = h.court AND p.person_id = h.person_id"
        }
        Tables::Sqlite { .. } => "p.rowid = h.rid",
    };
    // One text per row: the numbers first, then the document (which may hold `|`).
    let sql = format!(
        "WITH h AS (SELECT {rid}{tier} AS tier, c.latest_action_id AS latest, n.case_number, n.court, n.person_id \
         FROM {names} n JOIN {cases} c ON c.case_number = n.case_number {filter_join}\
         WHERE {} ORDER BY tier, latest DESC, n.case_number, n.court, n.person_id LIMIT ${}) \
         SELECT CAST(h.tier AS TEXT) || '|' || CAST(h.latest AS TEXT) || '|' || p.doc FROM h \
         JOIN {parties} p ON {page_join} \
         ORDER BY h.tier, h.latest DESC, h.case_number, h.court, h.person_id",
        conds.join(" AND "),
        binds.len()
    );
    (sql, binds)
}

/// One match: the person's stored document, its tier (0 the exact name) and its case's
/// latest action.
#[derive(Debug, Clone)]
pub struct Hit {
    pub doc: String,
    pub tier: i64,
    pub latest: i64,
}

/// The persons matching `s` after `after`, at most `limit`, in rank order.
pub async fn search(
    tx: &mut Tx,
    at: Tables,
    s: &Search,
    after: Option<&After>,
    limit: i64,
) -> Result<Vec<Hit>, Problem> {
    let (sql, binds) = sql(s, after, limit, at);
    let rows = tx.texts(&sql, &binds).await?;
    rows.into_iter()
        .map(|r| {
            let mut it = r.splitn(3, '|');
            let tier = it.next().and_then(|v| v.parse().ok());
            let latest = it.next().and_then(|v| v.parse().ok());
            match (tier, latest, it.next()) {
                (Some(tier), Some(latest), Some(doc)) => Ok(Hit {
                    doc: doc.to_string(),
                    tier,
                    latest,
                }),
                _ => Err(Problem::internal("a search row that does not split")),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_refused_with_reasons() {
        assert!(
            Search::words("s.r.o.").is_err(),
            "a legal form alone is nothing to search"
        );
        assert!(Search::words("  ").is_err());
        assert!(Search::words(&"0".repeat(201)).is_err());
        assert!(Search::words(&format!("{} x", "0".repeat(198))).is_ok());
        assert!(Search::words("a b").is_err());
        assert!(Search::words("a b c d e f g h i").is_err());
        assert_eq!(Search::words("Nov J").unwrap(), ["nov", "j"]);
    }

    #[test]
    fn match_expressions() {
        let w = vec!["novak".to_string(), "ja".to_string()];
        assert_eq!(match_expr(&w, false), "\"novak\"* AND \"ja\"*");
        assert_eq!(match_expr(&w, true), "novak:* & ja:*");
    }
}
