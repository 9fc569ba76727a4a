//! Name search: persons whose names hold every searched word as a word or a word's
//! prefix, in any order, case and diacritics ignored, legal-form suffixes ignored;
//! ranked (the exact full name first, then the others), then by their case's latest
//! action, keyset-paged, on each engine's own text index (SQLite FTS5, PostgreSQL
//! `tsvector` with GIN), which the JSON API and the search page share. A text matching
//! more than [`CANDIDATES`] persons is not ranked whole: its exact names are, and the
//! rest is read by walking the cases newest first until the page is full.
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

/// Persons a search ranks whole at most: a text that matches more is read by walking
/// the cases newest first instead ([`search`]). Ranking costs about a row a match; the
/// walk about `limit × persons / matches` rows: at 10 000 both stay near ten thousand
/// rows at a million cases (5.9 million persons) and a page of 50.
pub const CANDIDATES: i64 = 10_000;

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

/// The full-text condition for `words` on this back end: every word as a prefix, or
/// (`prefix` false) every word whole.
fn match_expr(words: &[String], pg: bool, prefix: bool) -> String {
    // The words are letters and digits only (`search_words` splits at anything else),
    // so they need no quoting beyond the engine's own.
    let (star, and) = match (pg, prefix) {
        (true, true) => (":*", " & "),
        (true, false) => ("", " & "),
        (false, true) => ("*", " AND "),
        (false, false) => ("", " AND "),
    };
    words
        .iter()
        .map(|w| {
            if pg {
                format!("{w}{star}")
            } else {
                format!("\"{w}\"{star}")
            }
        })
        .collect::<Vec<_>>()
        .join(and)
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

    /// `names`, `parties` and `cases`.
    fn names(self) -> [String; 3] {
        match self {
            Tables::Views => ["names".into(), "parties".into(), "cases".into()],
            Tables::Sqlite { parties, cases } => [
                format!("names_v{parties}"),
                format!("parties_v{parties}"),
                format!("cases_v{cases}"),
            ],
        }
    }
}

/// How a statement finds its persons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    /// Every match of the text index (each word a prefix), ranked whole: the exact name
    /// first, then by the case's latest action.
    Ranked,
    /// The exact names alone (tier 0): the text index's whole-word matches whose words
    /// are the searched words.
    Exact,
    /// The other matches (tier 1), by walking the cases newest first and keeping the
    /// persons whose words start so: a walk of about `limit × persons / matches` rows,
    /// for a text that matches too many persons to rank them whole.
    Walk,
    /// The matches of [`How::Ranked`] unranked, for counting them: a case joins only
    /// for a court filter.
    Probe,
}

/// A statement's binds, numbered as they are added.
#[derive(Default)]
struct Binds(Vec<Val>);

impl Binds {
    fn add(&mut self, v: impl Into<Val>) -> String {
        self.0.push(v.into());
        format!("${}", self.0.len())
    }
}

/// The `FROM` and `WHERE` of the persons `how` finds (no keyset position), with the
/// tier expression; `rid` selects a SQLite person's rowid.
struct Parts {
    from: String,
    conds: Vec<String>,
    tier: String,
    rid: &'static str,
    binds: Binds,
}

fn parts(s: &Search, at: Tables, how: How) -> Parts {
    let pg = at == Tables::Views;
    let [names, parties, cases] = at.names();
    let mut b = Binds::default();
    let exact = b.add(exact_key(&s.words));
    let tier = format!("CASE WHEN n.exact = {exact} THEN 0 ELSE 1 END");
    let mut conds = Vec::new();
    match how {
        How::Ranked | How::Exact | How::Probe => {
            let m = b.add(match_expr(&s.words, pg, how != How::Exact));
            conds.push(if pg {
                format!("to_tsvector('simple', n.words) @@ to_tsquery('simple', {m})")
            } else {
                format!("{names} MATCH {m}")
            });
            if how == How::Exact {
                conds.push(format!("n.exact = {exact}"));
            }
        }
        How::Walk => {
            conds.push(format!("n.exact <> {exact}"));
            // `words` is the folded words with one space between: a word that starts
            // so follows the start or a space.
            for w in &s.words {
                let p = b.add(format!("% {w}%"));
                conds.push(format!("(' ' || n.words) LIKE {p}"));
            }
        }
    }
    if let Some(r) = &s.role {
        conds.push(format!("f.role = {}", b.add(r.as_str())));
    }
    if let Some(c) = &s.court {
        conds.push(format!("c.court_short = {}", b.add(c.as_str())));
    }
    if let Some(y) = s.birth_year {
        conds.push(format!("n.birth_year = {}", b.add(y)));
    }
    if !s.kinds.is_empty() {
        let marks: Vec<String> = s.kinds.iter().map(|k| b.add(k.as_str())).collect();
        conds.push(format!("f.kind IN ({})", marks.join(", ")));
    }
    // The person's row joins only when a filter needs its fields (and on SQLite for a
    // walk, which finds a person's name row by the rowid of its `parties` row).
    let filtered = s.role.is_some() || !s.kinds.is_empty();
    let person = |alias: &str| match at {
        Tables::Views => format!(
            "{alias}.case_number = n.case_number AND {alias}.court = n.court AND {alias}.person_id = n.person_id"
        ),
        Tables::Sqlite { .. } => format!("{alias}.rowid = n.rowid"),
    };
    let from = match (how, pg) {
        // Cases newest first, each case's persons by the table's key (SQLite keeps the
        // join order as written: CROSS JOIN).
        (How::Walk, false) => format!(
            "{cases} c CROSS JOIN {parties} f ON f.case_number = c.case_number \
             CROSS JOIN {names} n ON n.rowid = f.rowid"
        ),
        (How::Walk, true) => format!(
            "{cases} c JOIN {names} n ON n.case_number = c.case_number{}",
            if filtered {
                format!(" JOIN {parties} f ON {}", person("f"))
            } else {
                String::new()
            }
        ),
        _ => format!(
            "{names} n{}{}",
            if how != How::Probe || s.court.is_some() {
                format!(" JOIN {cases} c ON c.case_number = n.case_number")
            } else {
                String::new()
            },
            if filtered {
                format!(" JOIN {parties} f ON {}", person("f"))
            } else {
                String::new()
            }
        ),
    };
    Parts {
        from,
        conds,
        tier,
        rid: if pg { "" } else { "n.rowid AS rid, " },
        binds: b,
    }
}

/// The statement and its binds: `tier|latest|doc` of each match (the tier 0 for the
/// exact name, the case's latest action), at most `limit`, in rank order; every match
/// of the text index ranked whole (what a count counts).
///
/// The ranking reads only the name index and the cases' latest actions; the persons'
/// documents are read for the page's rows alone (on SQLite by rowid).
pub fn sql(s: &Search, after: Option<&After>, limit: i64, at: Tables) -> (String, Vec<Val>) {
    statement(s, after, limit, at, How::Ranked)
}

/// The walk's statement for the persons of tier 1 after `after` (a tier-1 position):
/// what [`search`] reads for a text that matches more than its cap.
pub fn walk_sql(s: &Search, after: Option<&After>, limit: i64, at: Tables) -> (String, Vec<Val>) {
    statement(s, after, limit, at, How::Walk)
}

fn statement(
    s: &Search,
    after: Option<&After>,
    limit: i64,
    at: Tables,
    how: How,
) -> (String, Vec<Val>) {
    let [_, parties, _] = at.names();
    let Parts {
        from,
        mut conds,
        tier,
        rid,
        binds: mut b,
    } = parts(s, at, how);
    if let Some(a) = after {
        let (case, court, person) = (
            b.add(a.key[0].as_str()),
            b.add(a.key[1].as_str()),
            b.add(a.key[2].as_str()),
        );
        if how == How::Walk {
            // Every person of a walk is of tier 1 (the caller passes a tier-1 position);
            // the case's latest action bounds the index walk.
            let l = b.add(a.latest);
            conds.push(format!(
                "c.latest_action_id <= {l} AND (c.latest_action_id < {l} OR \
                 (n.case_number, n.court, n.person_id) > ({case}, {court}, {person}))"
            ));
        } else {
            let (t, l) = (b.add(a.tier), b.add(-a.latest));
            conds.push(format!(
                "({tier}, -c.latest_action_id, n.case_number, n.court, n.person_id) > ({t}, {l}, {case}, {court}, {person})"
            ));
        }
    }
    let lim = b.add(limit);
    let order = if how == How::Walk {
        "c.latest_action_id DESC, n.case_number, n.court, n.person_id"
    } else {
        "tier, latest DESC, n.case_number, n.court, n.person_id"
    };
    // The page's rows, each person's document by key (SQLite keeps `h` outside: left to
    // itself, 3.46 scans every person against a Bloom filter of the page's rowids).
    let page_join = match at {
        Tables::Views => {
            "JOIN {parties} p ON p.case_number = h.case_number AND p.court = h.court AND p.person_id = h.person_id"
        }
        Tables::Sqlite { .. } => "CROSS JOIN {parties} p ON p.rowid = h.rid",
    }
    .replace("{parties}", &parties);
    // One text per row: the numbers first, then the document (which may hold `|`).
    let sql = format!(
        "WITH h AS (SELECT {rid}{tier} AS tier, c.latest_action_id AS latest, n.case_number, n.court, n.person_id \
         FROM {from} WHERE {} ORDER BY {order} LIMIT {lim}) \
         SELECT CAST(h.tier AS TEXT) || '|' || CAST(h.latest AS TEXT) || '|' || p.doc FROM h \
         {page_join} \
         ORDER BY h.tier, h.latest DESC, h.case_number, h.court, h.person_id",
        conds.join(" AND "),
    );
    (sql, b.0)
}

/// Whether more than `cap` persons match `s` (the text index's prefix matches, with the
/// filters): read at most `cap + 1` of them, unranked, joining a case only for a court.
fn many_sql(s: &Search, at: Tables, cap: i64) -> (String, Vec<Val>) {
    let Parts {
        from,
        conds,
        tier,
        binds: mut b,
        ..
    } = parts(s, at, How::Probe);
    let lim = b.add(cap + 1);
    // (The tier is selected so that every bind is in the text, as each engine numbers them.)
    let sql = format!(
        "SELECT CAST(COUNT(*) AS TEXT) FROM (SELECT {tier} AS tier FROM {from} WHERE {} LIMIT {lim}) m",
        conds.join(" AND ")
    );
    (sql, b.0)
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
///
/// A text that matches at most `cap` persons (with the filters) is ranked whole, in one
/// statement. One that matches more (a common prefix: `nov`, `ja`) is not: its exact
/// names are ranked alone, then the rest is read by walking the cases newest first,
/// which stops at the page's end. Both give the same order, so a cursor of one holds
/// for the other.
pub async fn search(
    tx: &mut Tx,
    at: Tables,
    s: &Search,
    after: Option<&After>,
    limit: i64,
    cap: i64,
) -> Result<Vec<Hit>, Problem> {
    let (sql, binds) = many_sql(s, at, cap);
    let n: i64 = tx
        .texts(&sql, &binds)
        .await?
        .pop()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if n <= cap {
        let (sql, binds) = statement(s, after, limit, at, How::Ranked);
        return hits(tx, &sql, &binds).await;
    }
    let mut out = Vec::new();
    if after.is_none_or(|a| a.tier == 0) {
        let (sql, binds) = statement(s, after, limit, at, How::Exact);
        out = hits(tx, &sql, &binds).await?;
    }
    let rest = limit - out.len() as i64;
    if rest > 0 {
        let after = after.filter(|a| a.tier > 0);
        let (sql, binds) = statement(s, after, rest, at, How::Walk);
        out.extend(hits(tx, &sql, &binds).await?);
    }
    Ok(out)
}

async fn hits(tx: &mut Tx, sql: &str, binds: &[Val]) -> Result<Vec<Hit>, Problem> {
    let rows = tx.texts(sql, binds).await?;
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
        assert_eq!(match_expr(&w, false, true), "\"novak\"* AND \"ja\"*");
        assert_eq!(match_expr(&w, true, true), "novak:* & ja:*");
        assert_eq!(match_expr(&w, false, false), "\"novak\" AND \"ja\"");
        assert_eq!(match_expr(&w, true, false), "novak & ja");
    }
}
