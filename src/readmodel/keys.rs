//! How the read models are keyed for their readers: the name index's terms and filter
//! tokens, and the shapes of the case list's indexes. The builders write by these and
//! the read side's statements ask by them, so both import them from here.
//!
//! Pure: constants and functions of a value; no I/O.

use super::fold::{exact_key, search_words};

/// The shortest and longest prefix of a word indexed as a term of its own on SQLite
/// (FTS5's `prefix = '2 3 4'`). A searched word of this length is read from one term
/// list; a longer one by FTS5's own prefix expansion.
pub const PREFIXES: std::ops::RangeInclusive<usize> = 2..=4;

/// The prefixes of a word that PostgreSQL's term table (`name_terms`) keeps, one row
/// each: a searched word this long is one term's rows, walked newest first; a longer
/// one walks its prefix of the longest length and is checked against the person's
/// words. (Chosen by measurement: `bench/search_pg.sh`, docs/PERFORMANCE.md.)
pub const PG_TERMS: std::ops::RangeInclusive<usize> = 2..=6;

/// The term of a searched word in PostgreSQL's term table: the word itself, or its
/// prefix of [`PG_TERMS`]' longest length (a word is letters and digits: characters,
/// not bytes, are counted).
pub fn pg_term(word: &str) -> String {
    word.chars().take(*PG_TERMS.end()).collect()
}

/// A statement giving 1 when SQLite's name index `table` (`names_vN`) is in an earlier
/// release's form, its rowids the latest actions themselves, and 0 when they are
/// negated as this release keys it (or it is empty): one positive rowid tells. The
/// builder builds such an index again; a reader takes it as not built yet.
pub fn sqlite_names_not_negated(table: &str) -> String {
    format!("SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE rowid > 0 LIMIT 1)")
}

/// A filter's token in the `tags` column (SQLite): a letter for the filter, then its
/// value folded to one word (`DLUŽNÍK` -> `rdluznik`, `VĚŘIT-NAVR` -> `rveritnavr`).
/// The roles and kinds the API filters on fold to distinct tokens.
pub fn tag(filter: char, value: &str) -> String {
    format!("{filter}{}", search_words(value).concat())
}

/// The token of an exact name in the `tags` column (SQLite): `x` and the hash of its
/// [`exact_key`], so that the exact names of a text are one short term list (a common
/// word's own list, `jan`, holds every Jan, few of them named just so). The key itself
/// is compared too: a hash may collide.
pub fn exact_tag(words: &[String]) -> String {
    format!(
        "x{:016x}",
        xxhash_rust::xxh3::xxh3_64(exact_key(words).as_bytes())
    )
}

/// The equality filters of `/v1/cases` indexed for each sort (`opened`: `opened,
/// case_number`; `latest`: `latest_action_id`; `updated`: `latest_published,
/// case_number`): each is an index of the set's columns, then the sort's keys, so a
/// page is an index range read in order ([`crate::read::lists`]).
pub const LIST_SHAPES: &[(&str, &[&str])] = &[
    ("opened", &[]),
    ("opened", &["court_short"]),
    ("opened", &["state"]),
    ("opened", &["court_short", "state"]),
    ("opened", &["debtor_kind"]),
    ("latest", &[]),
    ("latest", &["court_short"]),
    ("latest", &["state"]),
    ("latest", &["court_short", "state"]),
    ("latest", &["debtor_kind"]),
    ("updated", &[]),
    ("updated", &["court_short"]),
];

/// The filter columns, in the order they stand in the list indexes.
pub const LIST_COLUMNS: &[&str] = &["court_short", "state", "debtor_kind"];
