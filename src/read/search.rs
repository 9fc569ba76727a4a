//! Name search: persons whose names hold every searched word as a word or a word's
//! prefix, in any order, case and diacritics ignored, legal-form suffixes ignored;
//! ranked (the exact full name first, then the others), each tier by the person's
//! latest action, newest first; keyset-paged, on each engine's own text index (SQLite
//! FTS5; PostgreSQL GIN over prefix terms and `tsvector`), which the JSON API and the
//! search page share.
//! The name index keeps each person under their latest action ([`crate::projection::
//! names`]), so a page is a walk of the index in rank order that stops at its end:
//! no match is ranked that is not on the page, however many persons match.
//!
//! Reads the `names`, `parties` and `cases` views in the caller's snapshot; never
//! writes. An erased debtor has no `names` or `parties` row, so never matches.

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

/// The PostgreSQL text query of `words`: every word as a prefix.
fn ts_query(words: &[String]) -> String {
    words
        .iter()
        .map(|w| format!("{w}:*"))
        .collect::<Vec<_>>()
        .join(" & ")
}

/// The PostgreSQL conditions that every word in `words` is a word of the person's or a
/// prefix of one, split as the name index is ([`crate::projection::names`]): the words
/// of 2 to 4 characters as prefix terms (one posting list each, no recheck), longer
/// words as `tsvector` prefixes (a short expansion), a single character (the text has a
/// longer word too) as a filter on the words the other conditions found.
///
/// For the rows of a [`Scan::Window`] (`window`), which no text index reads, every word
/// is that filter: a word of the person's starts with it. The same persons, at less
/// cost a row than splitting the terms into an array or parsing the words into a
/// `tsvector` for each (`EXPLAIN ANALYZE` over a window of 10 000: 9-10 ms against 12 ms
/// for short words, 17 ms for long ones).
fn pg_words(words: &[String], b: &mut Binds, window: bool) -> Vec<String> {
    use crate::readmodel::keys::PREFIXES;
    if window {
        return words.iter().map(|w| word_start(w, b)).collect();
    }
    let len = |w: &&String| w.chars().count();
    let short: Vec<&String> = words
        .iter()
        .filter(|w| PREFIXES.contains(&len(w)))
        .collect();
    let long: Vec<String> = words
        .iter()
        .filter(|w| len(w) > *PREFIXES.end())
        .cloned()
        .collect();
    let mut conds = Vec::new();
    if !short.is_empty() {
        // The words are letters and digits only: quoted, they need no escaping.
        let arr: Vec<String> = short.iter().map(|w| format!("\"{w}\"")).collect();
        let m = b.add(format!("{{{}}}", arr.join(",")));
        conds.push(format!(
            "string_to_array(n.terms, ' ') @> CAST({m} AS TEXT[])"
        ));
    }
    if !long.is_empty() {
        let m = b.add(ts_query(&long));
        conds.push(format!(
            "to_tsvector('simple', n.words) @@ to_tsquery('simple', {m})"
        ));
    }
    for w in words.iter().filter(|w| len(w) < *PREFIXES.start()) {
        conds.push(word_start(w, b));
    }
    conds
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
            Tables::Views => ["names".into(), "parties".into(), "cases".into()],
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

/// How a statement reads the name index for its tier's matches, newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// The index in rank order, each row checked, to the page's end: FTS5's own walk (its
    /// term lists are in rowid order), and PostgreSQL's exact names by their B-tree.
    Index,
    /// PostgreSQL: this many newest persons before the page's start ([`WINDOW`]), each
    /// checked (a common text fills its page there, at a cost bounded by the window).
    Window(i64),
    /// PostgreSQL: the matches older than the [`Scan::Window`] of this many persons, by
    /// the prefix terms' and words' own indexes, sorted (a rare text, whose matches are
    /// few). Between the two, no text costs the walk of every person that the planner
    /// may choose when it misjudges how many persons a combination of words matches.
    Beyond(i64),
}

/// The persons a [`Scan::Window`] checks.
pub const WINDOW: i64 = 10_000;

/// The `FROM` and `WHERE` of the persons of `tier` (every match, tier or not, when
/// `None`), on the name index alone but for a court, which is the case's; `names` the
/// relation read as the index (the table, or a window of it: `window`, whose rows are
/// checked one by one, see [`pg_words`]).
fn matches(
    s: &Search,
    at: Tables,
    (names, window): (&str, bool),
    tier: Option<Tier>,
    b: &mut Binds,
) -> (String, Vec<String>) {
    let [table, _, cases] = at.names();
    let mut conds = Vec::new();
    if at == Tables::Views {
        if tier != Some(Tier::Exact) {
            conds.extend(pg_words(&s.words, b, window));
        }
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
    } else {
        let m = b.add(fts_query(s, tier != Some(Tier::Exact)));
        conds.push(format!("{table} MATCH {m}"));
    }
    if let Some(t) = tier {
        let e = b.add(exact_key(&s.words));
        conds.push(match t {
            Tier::Exact => format!("n.exact = {e}"),
            Tier::Prefix => format!("n.exact <> {e}"),
        });
    }
    let mut from = format!("{names} n");
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
    (from, conds)
}

/// The statement and its binds of the persons of `tier` after the person's latest
/// action `before` (none: from the newest), at most `limit`, newest first, read as
/// `scan` says: `tier|latest|doc` rows. The index yields its matches in that order (FTS5
/// by rowid; on PostgreSQL a B-tree on the latest action, or for [`Scan::Beyond`] the
/// text indexes' matches sorted), so a page costs about its own rows; the persons'
/// documents are read for the page's rows alone (on SQLite by rowid).
pub fn sql(
    s: &Search,
    tier: Tier,
    before: Option<i64>,
    limit: i64,
    at: Tables,
    scan: Scan,
) -> (String, Vec<Val>) {
    let [table, parties, _] = at.names();
    let pg = at == Tables::Views;
    let latest = if pg { "n.latest" } else { "n.rowid" };
    let mut b = Binds::default();
    // The newest `n` persons before `before`, newest first.
    let window = |b: &mut Binds, cols: &str, n: i64| {
        let below = before
            .map(|l| format!("WHERE latest < {}", b.add(l)))
            .unwrap_or_default();
        format!(
            "SELECT {cols} FROM {table} {below} ORDER BY latest DESC LIMIT {}",
            b.add(n)
        )
    };
    let names = match scan {
        Scan::Window(n) => format!("({})", window(&mut b, "*", n)),
        _ => table.clone(),
    };
    let windowed = matches!(scan, Scan::Window(_));
    let (from, mut conds) = matches(s, at, (&names, windowed), Some(tier), &mut b);
    match (scan, before) {
        (Scan::Beyond(n), _) => {
            // Older than the window's oldest (none when the window held every person).
            let w = window(&mut b, "latest", n);
            let n = b.add(n);
            conds.push(format!(
                "{latest} < (SELECT MIN(latest) FROM ({w}) w HAVING COUNT(*) = {n})"
            ));
        }
        (Scan::Index, Some(l)) => conds.push(format!("{latest} < {}", b.add(l))),
        _ => {}
    }
    let lim = b.add(limit);
    // `+ 0`: not the latest action's index in rank order, but the text indexes' matches.
    let order = if matches!(scan, Scan::Beyond(_)) {
        format!("{latest} + 0")
    } else {
        latest.to_string()
    };
    let (pick, page_join) = if pg {
        (
            "n.latest, n.case_number, n.court, n.person_id",
            format!(
                "JOIN {parties} p ON p.case_number = h.case_number AND p.court = h.court AND p.person_id = h.person_id"
            ),
        )
    } else {
        // (`h` outside: left to itself, SQLite 3.46 scans every person against a
        // Bloom filter of the page's rowids.)
        (
            "n.rowid AS latest, n.prow AS rid",
            format!("CROSS JOIN {parties} p ON p.rowid = h.rid"),
        )
    };
    let sql = format!(
        "WITH h AS (SELECT {pick} FROM {from} WHERE {} ORDER BY {order} DESC LIMIT {lim}) \
         SELECT '{}|' || CAST(h.latest AS TEXT) || '|' || p.doc FROM h {page_join} ORDER BY h.latest DESC",
        conds.join(" AND "),
        tier as i64,
    );
    (sql, b.0)
}

/// Every match of `s` (both tiers), unordered, at most the last bind's number: what a
/// count counts ([`crate::read::lists::count`]).
pub fn count_sql(s: &Search, at: Tables) -> (String, Vec<Val>) {
    let mut b = Binds::default();
    let (from, conds) = matches(s, at, (&at.names()[0], false), None, &mut b);
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
/// names newest first, then the other matches newest first (each a walk of the index
/// in that order that stops at the page's end; on PostgreSQL the other matches from a
/// window of the newest persons, then, if the page is not full, from older ones by the
/// text indexes: [`Scan`]).
pub async fn search(
    tx: &mut Tx,
    at: Tables,
    s: &Search,
    after: Option<&After>,
    limit: i64,
) -> Result<Vec<Hit>, Problem> {
    search_with(tx, at, s, after, limit, WINDOW).await
}

/// [`search`] with a window of `window` persons on PostgreSQL (the tests' small one
/// sends most matches beyond it).
pub async fn search_with(
    tx: &mut Tx,
    at: Tables,
    s: &Search,
    after: Option<&After>,
    limit: i64,
    window: i64,
) -> Result<Vec<Hit>, Problem> {
    let mut out = Vec::new();
    if after.is_none_or(|a| a.tier == 0) {
        let (sql, binds) = sql(
            s,
            Tier::Exact,
            after.map(|a| a.latest),
            limit,
            at,
            Scan::Index,
        );
        out = hits(tx, &sql, &binds).await?;
    }
    let before = after.filter(|a| a.tier > 0).map(|a| a.latest);
    let scans = if at == Tables::Views {
        vec![Scan::Window(window), Scan::Beyond(window)]
    } else {
        vec![Scan::Index]
    };
    for scan in &scans {
        let rest = limit - out.len() as i64;
        if rest <= 0 {
            break;
        }
        let (sql, binds) = sql(s, Tier::Prefix, before, rest, at, *scan);
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
        assert_eq!(ts_query(&s.words), "novak:* & ja:*");
        let mut b = Binds::default();
        let words: Vec<String> = ["novakova", "j", "ja", "nov", "marie"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            pg_words(&words, &mut b, false),
            [
                "string_to_array(n.terms, ' ') @> CAST($1 AS TEXT[])",
                "to_tsvector('simple', n.words) @@ to_tsquery('simple', $2)",
                "(' ' || n.words) LIKE $3",
            ]
        );
        assert_eq!(
            b.0,
            [
                Val::from("{\"ja\",\"nov\"}"),
                Val::from("novakova:* & marie:*"),
                Val::from("% j%"),
            ]
        );
        let mut b = Binds::default();
        assert_eq!(
            pg_words(&words, &mut b, true),
            (1..=5)
                .map(|i| format!("(' ' || n.words) LIKE ${i}"))
                .collect::<Vec<_>>()
        );
        assert_eq!(
            b.0,
            ["% novakova%", "% j%", "% ja%", "% nov%", "% marie%"].map(Val::from)
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
