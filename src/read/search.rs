//! Name search: persons whose names hold every searched word as a word or a word's
//! prefix, in any order, case and diacritics ignored, legal-form suffixes ignored;
//! ranked (the exact full name first, then the others), each tier by the person's
//! latest action, newest first; keyset-paged, on SQLite's FTS5 index and PostgreSQL's
//! term table (a B-tree of word prefixes by latest action), which the JSON API and the
//! search page share.
//! The name index keeps each person under their latest action ([`crate::projection::
//! names`]), so a page is a walk of the index in rank order that stops at its end:
//! no match is ranked that is not on the page, however many persons match.
//!
//! Reads the `names`, `name_terms` (PostgreSQL), `parties` and `cases` views in the
//! caller's snapshot; never writes. An erased debtor has no `names`, `name_terms` or
//! `parties` row, so never matches.

use super::Problem;
use crate::readmodel::fold::{exact_key, query_words};
use crate::store::sql::{Tx, Val};

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

/// Where a page starts: after this (tier, the person's latest action).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct After {
    pub tier: i64,
    pub latest: i64,
}

impl After {
    /// The position just after `hit`.
    pub fn of(hit: &Hit) -> After {
        After {
            tier: hit.tier,
            latest: hit.latest,
        }
    }

    /// The sealed cursor after `hit`.
    pub fn seal(p: &crate::privacy::Privacy, hit: &Hit) -> String {
        p.seal(&[hit.tier.to_string(), hit.latest.to_string()])
    }

    /// A cursor [`After::seal`] made, or a 400.
    pub fn unseal(p: &crate::privacy::Privacy, c: &str) -> Result<After, Problem> {
        let bad =
            || Problem::bad("the cursor is malformed or not this replica's; use the `next` link");
        let v = p.unseal(c, 2).ok_or_else(bad)?;
        let num = |s: &str| s.parse::<i64>().map_err(|_| bad());
        Ok(After {
            tier: num(&v[0])?,
            latest: num(&v[1])?,
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
        let words = query_words(text);
        if words.is_empty() {
            return Err(Problem::bad(format!(
                "q {text:?} holds no word to search (legal forms such as s.r.o. and titles such as Ing. are ignored)"
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

/// The SQLite full-text query of `s`: every word in `words` as a prefix, or (`prefix`
/// false) the exact name's token; and the filters the `tags` column holds (role, kinds,
/// birth year).
fn fts_query(s: &Search, prefix: bool) -> String {
    use crate::readmodel::keys::tag;
    // The words are letters and digits only (`search_words` splits at anything else),
    // and so are the tags: they need no quoting beyond the engine's own.
    let mut terms: Vec<String> = if prefix {
        s.words
            .iter()
            .map(|w| format!("words : \"{w}\"*"))
            .collect()
    } else {
        vec![format!(
            "tags : \"{}\"",
            crate::readmodel::keys::exact_tag(&s.words)
        )]
    };
    if let Some(r) = &s.role {
        terms.push(format!("tags : \"{}\"", tag('r', r)));
    }
    if let Some(y) = s.birth_year {
        terms.push(format!("tags : \"y{y}\""));
    }
    if !s.kinds.is_empty() {
        let k: Vec<String> = s
            .kinds
            .iter()
            .map(|k| format!("tags : \"{}\"", tag('k', k)))
            .collect();
        terms.push(format!("({})", k.join(" OR ")));
    }
    terms.join(" AND ")
}

/// The PostgreSQL conditions on a walk of the term table (`t`, walking `walk`'s term,
/// joined to the person `n`) that every word in `words` is a word of the person's or a
/// prefix of one: each other word's term probed by the walk's own key (term, latest
/// action), and a word longer than the terms (or a single character) checked against
/// the person's words.
fn pg_words(words: &[String], walk: &str, b: &mut Binds) -> Vec<String> {
    use crate::readmodel::keys::{PG_TERMS, pg_term};
    let len = |w: &str| w.chars().count();
    let mut conds = Vec::new();
    let mut probed = vec![pg_term(walk)];
    for w in words {
        if len(w) >= *PG_TERMS.start() {
            let t = pg_term(w);
            if !probed.contains(&t) {
                conds.push(format!(
                    "EXISTS (SELECT 1 FROM name_terms o WHERE o.term = {} AND o.latest = t.latest)",
                    b.add(t.as_str())
                ));
                probed.push(t);
            }
        }
        if !PG_TERMS.contains(&len(w)) {
            conds.push(word_start(w, b));
        }
    }
    conds
}

/// The word a PostgreSQL search walks the term table by: the longest (the rarest, as a
/// rule), the first of equals. (`Search::words` holds one of two characters or more.)
fn walk_word(words: &[String]) -> &str {
    let mut best: Option<&String> = None;
    for w in words {
        if best.is_none_or(|b| w.chars().count() > b.chars().count()) {
            best = Some(w);
        }
    }
    best.map(String::as_str).unwrap_or_default()
}

/// The condition that a word of the person's (`n.words`, space-separated) starts with `w`.
fn word_start(w: &str, b: &mut Binds) -> String {
    // (Letters and digits: nothing `LIKE` treats as a pattern.)
    let m = b.add(format!("% {w}%"));
    format!("(' ' || n.words) LIKE {m}")
}

/// The tables a search reads: the views (PostgreSQL), or on SQLite the live versions'
/// tables, so that a person's row is found by the rowid its name row holds.
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
            Tables::Views => [
                "names".into(),
                crate::readmodel::party_cells::VIEW.into(),
                "cases".into(),
            ],
            Tables::Sqlite { parties, cases } => [
                format!("names_v{parties}"),
                format!("parties_v{parties}"),
                format!("cases_v{cases}"),
            ],
        }
    }
}

/// Which persons a statement reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// The exact names (tier 0): the person's words are the searched words.
    Exact = 0,
    /// The other matches (tier 1): every searched word a word of theirs or its prefix.
    Prefix = 1,
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

/// The `FROM` and `WHERE` of the persons of `tier` (every match, tier or not, when
/// `None`), and the column of their latest action, the order they are read in. On
/// SQLite the FTS5 table `n`, whose rowid is the negated latest action; on PostgreSQL
/// the exact names by their own index, the others by a walk of the term table `t`
/// joined to `n`. A court is the case's.
fn matches(
    s: &Search,
    at: Tables,
    tier: Option<Tier>,
    b: &mut Binds,
) -> (String, Vec<String>, &'static str) {
    let [table, _, cases] = at.names();
    let mut conds = Vec::new();
    let (mut from, latest) = if at == Tables::Views {
        if tier == Some(Tier::Exact) {
            ("names n".to_string(), "n.latest")
        } else {
            let walk = walk_word(&s.words);
            let term = crate::readmodel::keys::pg_term(walk);
            conds.push(format!("t.term = {}", b.add(term.as_str())));
            conds.extend(pg_words(&s.words, walk, b));
            (
                "name_terms t JOIN names n ON n.latest = t.latest".to_string(),
                "t.latest",
            )
        }
    } else {
        let m = b.add(fts_query(s, tier != Some(Tier::Exact)));
        conds.push(format!("{table} MATCH {m}"));
        (format!("{table} n"), "n.rowid")
    };
    if at == Tables::Views {
        if let Some(r) = &s.role {
            conds.push(format!("n.role = {}", b.add(r.as_str())));
        }
        if let Some(y) = s.birth_year {
            conds.push(format!("n.birth_year = {}", b.add(y)));
        }
        if !s.kinds.is_empty() {
            let marks: Vec<String> = s.kinds.iter().map(|k| b.add(k.as_str())).collect();
            conds.push(format!("n.kind IN ({})", marks.join(", ")));
        }
    }
    if let Some(t) = tier {
        let e = b.add(exact_key(&s.words));
        conds.push(match t {
            Tier::Exact => format!("n.exact = {e}"),
            Tier::Prefix => format!("n.exact <> {e}"),
        });
    }
    if let Some(c) = &s.court {
        // SQLite keeps the join order as written: the index's order outside.
        let join = if at == Tables::Views {
            "JOIN"
        } else {
            "CROSS JOIN"
        };
        from.push_str(&format!(
            " {join} {cases} c ON c.case_number = n.case_number"
        ));
        conds.push(format!("c.court_short = {}", b.add(c.as_str())));
    }
    (from, conds, latest)
}

/// The statement and its binds of the persons of `tier` after the person's latest
/// action `before` (none: from the newest), at most `limit`, newest first: rows of the
/// latest action, then the cells of `party_cells::read_columns`. The index yields its
/// matches in that order (FTS5 by rowid; on PostgreSQL the exact names' B-tree, or the
/// walked term's rows in the term table's key), so a page costs about its own rows; the
/// persons' cells are read for the page's rows alone (on SQLite by rowid).
pub fn sql(
    s: &Search,
    tier: Tier,
    before: Option<i64>,
    limit: i64,
    at: Tables,
) -> (String, Vec<Val>) {
    let [_, parties, _] = at.names();
    let pg = at == Tables::Views;
    let mut b = Binds::default();
    let (from, mut conds, latest) = matches(s, at, Some(tier), &mut b);
    // Newest first: on PostgreSQL down the latest action; on SQLite, whose rowid is the
    // negated latest action, up the rowid (FTS5 walks its lists forward faster).
    if let Some(l) = before {
        conds.push(if pg {
            format!("{latest} < {}", b.add(l))
        } else {
            format!("{latest} > {}", b.add(-l))
        });
    }
    let lim = b.add(limit);
    let (pick, page_join, order) = if pg {
        (
            format!("{latest} AS latest, n.case_number, n.court, n.person_id"),
            format!(
                "JOIN {parties} p ON p.case_number = h.case_number AND p.court = h.court AND p.person_id = h.person_id"
            ),
            format!("{latest} DESC"),
        )
    } else {
        // (`h` outside: left to itself, SQLite 3.46 scans every person against a
        // Bloom filter of the page's rowids.)
        (
            format!("-{latest} AS latest, n.prow AS rid"),
            format!("CROSS JOIN {parties} p ON p.rowid = h.rid"),
            latest.to_string(),
        )
    };
    // The cells, for the document to be put together in Rust (`party_cells::doc_from`).
    let sql = format!(
        "WITH h AS (SELECT {pick} FROM {from} WHERE {} ORDER BY {order} LIMIT {lim}) \
         SELECT h.latest, {} FROM h {page_join} ORDER BY h.latest DESC",
        conds.join(" AND "),
        crate::readmodel::party_cells::read_columns("p"),
    );
    (sql, b.0)
}

/// Every match of `s` (both tiers), unordered, at most the last bind's number: what a
/// count counts ([`crate::read::lists::count`]).
pub fn count_sql(s: &Search, at: Tables) -> (String, Vec<Val>) {
    let mut b = Binds::default();
    let (from, conds, _) = matches(s, at, None, &mut b);
    let lim = b.add(i64::MAX);
    (
        format!(
            "SELECT 1 FROM {from} WHERE {} LIMIT {lim}",
            conds.join(" AND ")
        ),
        b.0,
    )
}

/// One match: the person's stored document, its tier (0 the exact name) and its case's
/// latest action.
#[derive(Debug, Clone)]
pub struct Hit {
    pub doc: String,
    pub tier: i64,
    pub latest: i64,
}

/// The persons matching `s` after `after`, at most `limit`, in rank order: the exact
/// names newest first, then the other matches newest first, each a walk of the index in
/// that order that stops at the page's end.
pub async fn search(
    tx: &mut Tx,
    at: Tables,
    s: &Search,
    after: Option<&After>,
    limit: i64,
) -> Result<Vec<Hit>, Problem> {
    // On SQLite, an index an earlier release wrote (its rowids the latest actions, not
    // negated) would be read oldest first, and its cursors would not hold once the
    // writer builds it again: until then it is not built, as far as readers go.
    if let Tables::Sqlite { parties, .. } = at {
        let earlier =
            crate::readmodel::keys::sqlite_names_not_negated(&format!("names_v{parties}"));
        if tx.int(&earlier, &[]).await? != Some(0) {
            return Err(super::limit::unbuilt());
        }
    }
    let mut out = Vec::new();
    if after.is_none_or(|a| a.tier == 0) {
        let (sql, binds) = sql(s, Tier::Exact, after.map(|a| a.latest), limit, at);
        out = hits(tx, Tier::Exact, &sql, &binds).await?;
    }
    let rest = limit - out.len() as i64;
    if rest > 0 {
        let before = after.filter(|a| a.tier > 0).map(|a| a.latest);
        let (sql, binds) = sql(s, Tier::Prefix, before, rest, at);
        out.extend(hits(tx, Tier::Prefix, &sql, &binds).await?);
    }
    Ok(out)
}

async fn hits(tx: &mut Tx, tier: Tier, sql: &str, binds: &[Val]) -> Result<Vec<Hit>, Problem> {
    Ok(tx
        .rows_with(sql, binds, |r| {
            Ok(Hit {
                latest: r.int(0)?.ok_or_else(|| {
                    sqlx::Error::Decode("a search row without its latest action".into())
                })?,
                doc: crate::readmodel::party_cells::doc_from(r, 1)?,
                tier: tier as i64,
            })
        })
        .await?)
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
    fn text_queries() {
        let s = Search {
            words: vec!["novak".to_string(), "ja".to_string()],
            ..Default::default()
        };
        assert_eq!(
            fts_query(&s, true),
            "words : \"novak\"* AND words : \"ja\"*"
        );
        assert_eq!(
            fts_query(&s, false),
            format!("tags : \"{}\"", crate::readmodel::keys::exact_tag(&s.words))
        );
        // Worked by hand: the walk is the longest word's six-letter prefix; a word whose
        // term is the walk's is not probed again; a word longer than six letters, or of
        // one, is checked against the person's words.
        let words: Vec<String> = ["novakova", "j", "ja", "nov", "marie", "novakovic"]
            .map(String::from)
            .to_vec();
        assert_eq!(walk_word(&words), "novakovic");
        assert_eq!(
            walk_word(&["ab".into(), "cd".into()]),
            "ab",
            "the first of equals"
        );
        assert_eq!(
            walk_word(&["ab".into(), "čer".into()]),
            "čer",
            "characters, not bytes"
        );
        let mut b = Binds::default();
        let exists = |i: usize| {
            format!(
                "EXISTS (SELECT 1 FROM name_terms o WHERE o.term = ${i} AND o.latest = t.latest)"
            )
        };
        let like = |i: usize| format!("(' ' || n.words) LIKE ${i}");
        assert_eq!(
            pg_words(&words, "novakovic", &mut b),
            [like(1), like(2), exists(3), exists(4), exists(5), like(6)]
        );
        assert_eq!(
            b.0,
            ["% novakova%", "% j%", "ja", "nov", "marie", "% novakovic%"].map(Val::from)
        );
        let f = Search {
            role: Some("DLUŽNÍK".into()),
            kinds: vec!["F".into(), "PODNIKATEL".into()],
            birth_year: Some(1971),
            ..s
        };
        assert_eq!(
            fts_query(&f, true),
            "words : \"novak\"* AND words : \"ja\"* AND tags : \"rdluznik\" AND tags : \"y1971\" \
             AND (tags : \"kf\" OR tags : \"kpodnikatel\")"
        );
    }
}
