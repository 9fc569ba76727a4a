//! The projections as flat rows: the column lists of the CSV answers of the API and of
//! the nightly export (the same, so that both give the same rows), and how a cell is
//! taken from a document.
//!
//! Owns column names and order, which are a published interface (`docs/EXPORTS.md`):
//! add columns at the end, never rename or reorder. What is masked in them is
//! `crate::privacy`'s to decide, never this module's.

use serde_json::Value;

pub const CASE_COLUMNS: &[&str] = &[
    "case_number",
    "court_short",
    "court_name",
    "state",
    "opened",
    "first_action_id",
    "latest_action_id",
    "latest_published",
    "claims_deadline",
    "ended",
    "debtor_kind",
    "administrator.name",
    "administrator.first_name",
    "administrator.ico",
    "documents",
    "claims",
    "erased",
    "erased_at",
    "debtor.name",
    "debtor.first_name",
    "debtor.ico",
    "debtor.kind",
    "debtor_count",
];

/// The columns of a list's first element: `debtor.x` is field `x` of the first of
/// `debtors` (the register's order), so that a row of a case says whose it is.
const FIRST_OF: &[(&str, &str)] = &[("debtor.", "debtors")];
/// The columns of a list's length: `debtor_count` is how many `debtors` a case has.
const COUNT_OF: &[(&str, &str)] = &[("debtor_count", "debtors")];

/// The columns of an event as served (API lists, streams, the events export): the
/// timeline's columns ([`super::TIMELINE_COLUMNS`]) without `source_type_name`.
pub const EVENT_COLUMNS: &[&str] = &[
    "action_id",
    "case_number",
    "court",
    "type_code",
    "type_name",
    "section",
    "number_in_section",
    "document_url",
    "published",
    "created",
    "slot_action_id",
    "secondary_action",
    "secondary_document",
    "legal_force_date",
    "corrected_published",
    "annulled",
];
pub const SUBJECT_COLUMNS: &[&str] = &[
    "case_number",
    "court",
    "person_id",
    "role",
    "kind",
    "name",
    "first_name",
    "title_before",
    "title_after",
    "legal_form",
    "ico",
    "dic",
    "birth_number",
    "birth_date",
    "left_case",
    "latest_action_id",
];

/// The `stats` table.
pub const STATS_COLUMNS: &[&str] = &["dim", "key", "count"];

/// A cell of a CSV row: `a.b` reaches into objects; arrays and objects are JSON text.
/// `debtor.x` is the first debtor's `x` and `debtor_count` the number of debtors
/// (empty when the document has no list of debtors).
pub fn cell(item: &Value, path: &str) -> String {
    if let Some((_, list)) = COUNT_OF.iter().find(|(c, _)| *c == path) {
        return match &item[*list] {
            Value::Array(a) => a.len().to_string(),
            _ => String::new(),
        };
    }
    let mut v = item;
    let mut rest = path;
    if let Some((prefix, list)) = FIRST_OF.iter().find(|(p, _)| path.starts_with(p)) {
        v = &item[*list][0];
        rest = &path[prefix.len()..];
    }
    for p in rest.split('.') {
        v = &v[p];
    }
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A timeline row as the feed writes it: the fields in the order `serde_json` writes the
/// keys of a map (by name), so that reading a row the database made into this and
/// writing it gives the text a `serde_json::Value` would, without building a map for
/// every row (that map was the feed's largest cost in a profile, some 15 % of the
/// server's time). Every column of [`super::TIMELINE_COLUMNS`], no other key.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct EventRow {
    action_id: i64,
    #[serde(deserialize_with = "present")]
    annulled: Option<String>,
    case_number: String,
    #[serde(deserialize_with = "present")]
    corrected_published: Option<String>,
    #[serde(deserialize_with = "present")]
    court: Option<String>,
    created: String,
    #[serde(deserialize_with = "present")]
    document_url: Option<String>,
    #[serde(deserialize_with = "present")]
    legal_force_date: Option<String>,
    #[serde(deserialize_with = "present")]
    number_in_section: Option<i64>,
    published: String,
    secondary_action: bool,
    secondary_document: bool,
    #[serde(deserialize_with = "present")]
    section: Option<String>,
    #[serde(deserialize_with = "present")]
    slot_action_id: Option<i64>,
    source_type_name: String,
    type_code: String,
    type_name: String,
}

/// An `Option` field that must be in the row (as `null` if nothing): serde would read
/// a missing one as `None`, and the text would gain a key the row did not have.
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    serde::Deserialize::deserialize(d)
}

/// A row of [`event_json_sql`] written as one text on either back end (each engine
/// spaces and escapes its JSON its own way): the text `serde_json` gives the parsed
/// value, keys by name.
pub fn event_text(row: &str) -> serde_json::Result<String> {
    serde_json::to_string(&serde_json::from_str::<EventRow>(row)?)
}

/// The SQL expression of timeline column `c` ([`super::TIMELINE_COLUMNS`]) over the
/// timeline table itself: the short cells ([`super::TimelineCells`]) put back whole;
/// every other column as it is. (The view serves them whole.)
pub fn timeline_sql(c: &str) -> String {
    match c {
        "type_name" => "COALESCE(type_name, source_type_name)".into(),
        "document_url" => format!(
            "COALESCE(document_url, '{}' || document_id)",
            super::DOCUMENT_URL_PREFIX
        ),
        c => c.into(),
    }
}

/// The JSON object of a timeline row: over the view (`table` false), which serves every
/// column whole, or over a version's table itself (SQLite's lists, [`timeline_sql`]).
/// Readers of the view do not depend on the table's stored form: a store whose
/// projector has not upgraded it yet reads the same; a reader of the table asks first
/// whether it has short cells (`read::lists::short_cells`).
pub fn event_json_sql(pg: bool, table: bool) -> String {
    let b = |c: &str| {
        if pg {
            c.to_string()
        } else {
            format!("json(CASE WHEN {c} THEN 'true' ELSE 'false' END)")
        }
    };
    let f = if pg {
        "json_build_object"
    } else {
        "json_object"
    };
    // Every column of the timeline, booleans as JSON booleans on both back ends.
    let parts: Vec<String> = super::TIMELINE_COLUMNS
        .iter()
        .map(|c| match *c {
            "secondary_action" | "secondary_document" => format!("'{c}', {}", b(c)),
            c if table => format!("'{c}', {}", timeline_sql(c)),
            c => format!("'{c}', {c}"),
        })
        .collect();
    let cast = if pg { "::text" } else { "" };
    format!("{f}({}){cast}", parts.join(", "))
}

/// A cell read by [`cells`]: JSON strings are kept apart, so that the PII mask can tell
/// them from `null` (which stays empty).
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Cell {
    #[default]
    Null,
    Str(String),
    /// A number, boolean, array or object, as [`cell`] renders it.
    Other(String),
}

impl Cell {
    pub fn as_str(&self) -> &str {
        match self {
            Cell::Null => "",
            Cell::Str(s) | Cell::Other(s) => s,
        }
    }
}

/// The cells of `cols` (paths with at most one `.`) of one JSON document, equal to
/// [`cell`] of the parsed document, read in one pass: only the wanted values are
/// allocated, everything else is skipped.
pub fn cells(doc: &str, cols: &[&str]) -> serde_json::Result<Vec<Cell>> {
    Reader::new(cols).cells(doc)
}

/// [`cells`] of many documents for one list of columns: where each key of a document
/// goes is worked out once, not for every key of every document (an export reads
/// every document of a table).
pub struct Reader<'c> {
    cols: &'c [&'c str],
    plan: flat::Plan<'c>,
}

impl<'c> Reader<'c> {
    pub fn new(cols: &'c [&'c str]) -> Reader<'c> {
        Reader {
            cols,
            plan: flat::Plan::new(cols),
        }
    }

    /// The cells of the columns of one JSON document ([`cells`]).
    pub fn cells(&self, doc: &str) -> serde_json::Result<Vec<Cell>> {
        use serde::de::DeserializeSeed;
        let mut out = vec![Cell::Null; self.cols.len()];
        let mut de = serde_json::Deserializer::from_str(doc);
        Fields {
            plan: &self.plan,
            cols: self.cols,
            prefix: "",
            out: &mut out,
        }
        .deserialize(&mut de)?;
        de.end()?;
        Ok(out)
    }
}

mod flat {
    use std::fmt;

    use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use serde::{Deserialize, Deserializer};
    use serde_json::Value;

    use super::Cell;

    /// The visits of a scalar (a string, number, boolean or null) that fill nothing.
    macro_rules! ignore_scalars {
        () => {
            fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
                Ok(())
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
                Ok(())
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
                Ok(())
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
                Ok(())
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
                Ok(())
            }
            fn visit_unit<E: de::Error>(self) -> Result<(), E> {
                Ok(())
            }
        };
    }

    /// The object at `prefix` (`""` or `"name."`): fills the cells of the columns under it.
    pub(super) struct Fields<'a, 'c> {
        pub plan: &'a Plan<'c>,
        pub cols: &'a [&'c str],
        pub prefix: &'a str,
        pub out: &'a mut [Cell],
    }

    /// Where each key that can fill a column goes, under each prefix (`""` and the
    /// nested objects' `"name."`): [`Key::target`] of every such key, worked out once.
    /// A key not in it fills nothing.
    pub(crate) struct Plan<'c> {
        by_prefix:
            std::collections::HashMap<&'c str, std::collections::HashMap<&'c str, Target<'c>>>,
    }

    impl<'c> Plan<'c> {
        pub(crate) fn new(cols: &'c [&'c str]) -> Plan<'c> {
            let mut by_prefix = std::collections::HashMap::new();
            let mut prefixes: Vec<&'c str> = vec![""];
            for c in cols {
                if let Some(i) = c.find('.') {
                    prefixes.push(&c[..i + 1]);
                }
            }
            prefixes.extend(super::FIRST_OF.iter().map(|(p, _)| *p));
            prefixes.sort_unstable();
            prefixes.dedup();
            for prefix in prefixes {
                // Every key that can hit under `prefix`: a column's rest after it, the
                // part of a column before its `.` (a nested object), a list's name.
                let mut keys: Vec<&'c str> = Vec::new();
                for c in cols {
                    if let Some(rest) = c.strip_prefix(prefix) {
                        keys.push(rest);
                        if let Some(i) = rest.find('.') {
                            keys.push(&rest[..i]);
                        }
                    }
                }
                if prefix.is_empty() {
                    keys.extend(super::FIRST_OF.iter().map(|(_, l)| *l));
                    keys.extend(super::COUNT_OF.iter().map(|(_, l)| *l));
                }
                let mut m = std::collections::HashMap::new();
                for k in keys {
                    let t = Key { cols, prefix }.target(k);
                    if !matches!(t, Target::Skip) {
                        m.entry(k).or_insert(t);
                    }
                }
                by_prefix.insert(prefix, m);
            }
            Plan { by_prefix }
        }

        fn target(&self, prefix: &str, k: &str) -> Target<'c> {
            self.by_prefix
                .get(prefix)
                .and_then(|m| m.get(k))
                .copied()
                .unwrap_or(Target::Skip)
        }
    }

    #[derive(Clone, Copy)]
    enum Target<'k> {
        Col(usize),
        Nested(&'k str),
        /// A list whose first element fills the columns under a prefix, and whose
        /// length fills a column.
        List {
            first: Option<&'static str>,
            count: Option<usize>,
        },
        Skip,
    }

    /// A list's first element into the columns under `first`, its length into column
    /// `count`. Anything but a list leaves them empty.
    struct List<'a, 'c> {
        plan: &'a Plan<'c>,
        cols: &'a [&'c str],
        first: Option<&'static str>,
        count: Option<usize>,
        out: &'a mut [Cell],
    }

    impl<'de> DeserializeSeed<'de> for List<'_, '_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for List<'_, '_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON value")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let mut n = 0u64;
            if let Some(prefix) = self.first
                && seq
                    .next_element_seed(Fields {
                        plan: self.plan,
                        cols: self.cols,
                        prefix,
                        out: &mut *self.out,
                    })?
                    .is_some()
            {
                n += 1;
            }
            while seq.next_element::<IgnoredAny>()?.is_some() {
                n += 1;
            }
            if let Some(i) = self.count {
                self.out[i] = Cell::Other(n.to_string());
            }
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(())
        }
        ignore_scalars!();
    }

    /// Where a key of the object at `prefix` goes, by its plan.
    struct PlannedKey<'a, 'c> {
        plan: &'a Plan<'c>,
        prefix: &'a str,
    }

    impl<'de, 'c> DeserializeSeed<'de> for PlannedKey<'_, 'c> {
        type Value = Target<'c>;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Target<'c>, D::Error> {
            d.deserialize_str(self)
        }
    }

    impl<'de, 'c> Visitor<'de> for PlannedKey<'_, 'c> {
        type Value = Target<'c>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a key")
        }
        fn visit_str<E: de::Error>(self, k: &str) -> Result<Target<'c>, E> {
            Ok(self.plan.target(self.prefix, k))
        }
    }

    /// The rule of where a key goes (the plan is made of it).
    struct Key<'a, 'c> {
        cols: &'a [&'c str],
        prefix: &'a str,
    }

    impl<'c> Key<'_, 'c> {
        fn target(self, k: &str) -> Target<'c> {
            if self.prefix.is_empty() {
                // A list some columns read the first element or the length of.
                let first = super::FIRST_OF
                    .iter()
                    .find(|(p, l)| *l == k && self.cols.iter().any(|c| c.starts_with(p)))
                    .map(|(p, _)| *p);
                let count = super::COUNT_OF
                    .iter()
                    .find(|(_, l)| *l == k)
                    .and_then(|(c, _)| self.cols.iter().position(|x| x == c));
                if first.is_some() || count.is_some() {
                    return Target::List { first, count };
                }
            }
            for (i, c) in self.cols.iter().enumerate() {
                let Some(rest) = c.strip_prefix(self.prefix) else {
                    continue;
                };
                let hit = if rest == k && !rest.contains('.') {
                    Target::Col(i)
                } else if self.prefix.is_empty()
                    && rest.len() > k.len()
                    && rest.starts_with(k)
                    && rest.as_bytes()[k.len()] == b'.'
                {
                    Target::Nested(&c[..k.len() + 1])
                } else {
                    continue;
                };
                // A column read from a list, never from a key of its own name (checked
                // only for a key that would fill it: this runs for every key of a row).
                if self.prefix.is_empty()
                    && (super::COUNT_OF.iter().any(|(x, _)| x == c)
                        || super::FIRST_OF.iter().any(|(p, _)| c.starts_with(p)))
                {
                    continue;
                }
                return hit;
            }
            Target::Skip
        }
    }

    impl<'de> DeserializeSeed<'de> for Fields<'_, '_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Fields<'_, '_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON document")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(t) = map.next_key_seed(PlannedKey {
                plan: self.plan,
                prefix: self.prefix,
            })? {
                match t {
                    Target::Col(i) => self.out[i] = map.next_value::<Cell>()?,
                    Target::Nested(prefix) => map.next_value_seed(Fields {
                        plan: self.plan,
                        cols: self.cols,
                        prefix,
                        out: &mut *self.out,
                    })?,
                    Target::List { first, count } => map.next_value_seed(List {
                        plan: self.plan,
                        cols: self.cols,
                        first,
                        count,
                        out: &mut *self.out,
                    })?,
                    Target::Skip => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(())
        }
        // Anything but an object has no fields: its columns stay empty.
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(())
        }
        ignore_scalars!();
    }

    impl<'de> Deserialize<'de> for Cell {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Cell, D::Error> {
            d.deserialize_any(CellVisitor)
        }
    }

    struct CellVisitor;

    impl<'de> Visitor<'de> for CellVisitor {
        type Value = Cell;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON value")
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<Cell, E> {
            Ok(Cell::Str(s.to_string()))
        }
        fn visit_string<E: de::Error>(self, s: String) -> Result<Cell, E> {
            Ok(Cell::Str(s))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Cell, E> {
            Ok(Cell::Other(v.to_string()))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Cell, E> {
            Ok(Cell::Other(v.to_string()))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Cell, E> {
            Ok(Cell::Other(Value::from(v).to_string()))
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Cell, E> {
            Ok(Cell::Other(v.to_string()))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Cell, E> {
            Ok(Cell::Null)
        }
        fn visit_none<E: de::Error>(self) -> Result<Cell, E> {
            Ok(Cell::Null)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Cell, A::Error> {
            let v = Value::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
            Ok(Cell::Other(v.to_string()))
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Cell, A::Error> {
            let v = Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
            Ok(Cell::Other(v.to_string()))
        }
    }
}
use flat::Fields;

#[cfg(test)]
mod tests {
    use super::*;

    /// [`cells`] gives what [`cell`] gives on the parsed document, whatever the value.
    #[test]
    fn cells_equal_cell_of_the_parsed_document() {
        let cols = [
            "a", "n", "f", "b", "z", "arr", "obj", "o.x", "o.y", "p.x", "q.x", "missing", "esc",
        ];
        let docs = [
            r#"{"a":"Nov\u00e1k \"x\"","n":-12,"f":1.5,"b":true,"z":null,"arr":[1,{"k":"v","a":2}],
               "obj":{"z":1,"a":[true]},"o":{"x":"in","y":7,"w":{"deep":1}},"p":null,"q":"str",
               "skip":{"x":[1,2,{"y":3}]},"esc":"tab\there","o.x":"dotted key"}"#,
            r#"{}"#,
            r#"{"o":[1,2],"a":false}"#,
            r#"{"n":18446744073709551615,"f":1e300,"a":""}"#,
        ];
        for d in docs {
            let v: Value = serde_json::from_str(d).unwrap();
            let got = cells(d, &cols).unwrap();
            for (c, g) in cols.iter().zip(&got) {
                assert_eq!(g.as_str(), cell(&v, c), "column {c} of {d}");
                assert_eq!(
                    matches!(g, Cell::Str(_)),
                    {
                        let mut x = &v;
                        for p in c.split('.') {
                            x = &x[p];
                        }
                        x.is_string()
                    },
                    "string-ness of {c}"
                );
            }
        }
        assert!(cells("{\"a\":1", &cols).is_err());
        assert!(cells("{\"a\":1} x", &cols).is_err());
    }

    /// `debtor.x` is the first debtor's `x` and `debtor_count` their number, by
    /// [`cell`] and by [`cells`] alike; keys of those names in the document are not read.
    #[test]
    fn the_first_debtor_and_the_count() {
        let cols = [
            "case_number",
            "debtor.name",
            "debtor.first_name",
            "debtor.ico",
            "debtor.kind",
            "debtor_count",
        ];
        let cases: [(&str, [&str; 6]); 6] = [
            (
                r#"{"case_number":"INS 1/2020","debtors":[{"name":"Novák","first_name":"Jan","ico":null,"kind":"F"},{"name":"Nováková","kind":"F"}]}"#,
                ["INS 1/2020", "Novák", "Jan", "", "F", "2"],
            ),
            (
                r#"{"debtors":[{"name":"ALFA s.r.o.","ico":"12345678","kind":"P","addresses":[{"city":"Brno"}]}],"case_number":"INS 2/2020"}"#,
                ["INS 2/2020", "ALFA s.r.o.", "", "12345678", "P", "1"],
            ),
            (
                r#"{"case_number":"INS 3/2020","debtors":[],"erased":true}"#,
                ["INS 3/2020", "", "", "", "", "0"],
            ),
            (
                r#"{"case_number":"INS 4/2020"}"#,
                ["INS 4/2020", "", "", "", "", ""],
            ),
            (
                r#"{"case_number":"x","debtors":null,"debtor":{"name":"no"},"debtor_count":9}"#,
                ["x", "", "", "", "", ""],
            ),
            (
                r#"{"debtor_count":9,"debtor":{"name":"no"},"debtors":[1,{"name":"second"}]}"#,
                ["", "", "", "", "", "2"],
            ),
        ];
        for (doc, want) in cases {
            let v: Value = serde_json::from_str(doc).unwrap();
            let by_cell: Vec<String> = cols.iter().map(|c| cell(&v, c)).collect();
            assert_eq!(by_cell, want, "cell of {doc}");
            let by_cells: Vec<String> = cells(doc, &cols)
                .unwrap()
                .iter()
                .map(|c| c.as_str().to_string())
                .collect();
            assert_eq!(by_cells, want, "cells of {doc}");
        }
        // Only the count asked for, or only a debtor's field.
        let doc = r#"{"debtors":[{"name":"A"},{"name":"B"},{"name":"C"}]}"#;
        assert_eq!(cells(doc, &["debtor_count"]).unwrap()[0].as_str(), "3");
        assert_eq!(cells(doc, &["debtor.name"]).unwrap()[0].as_str(), "A");
        assert!(matches!(
            cells(doc, &["debtor.name"]).unwrap()[0],
            Cell::Str(_)
        ));
    }

    /// [`event_text`] writes what the parsed `serde_json::Value` writes, for rows as
    /// SQLite and PostgreSQL make them (spacing, escapes, nulls, any text in a field).
    #[test]
    fn an_event_text_is_the_value_text() {
        let sqlite = r#"{"action_id":1246,"case_number":"INS 2/2008","court":"KSVYCHK","type_code":"6","type_name":"Insolvenční návrh","source_type_name":"Návrh \"x\"\n\u0001\t/","section":"A","number_in_section":1,"document_url":"https://isir.justice.cz:8443/isir_public_ws/doc/Document?idDokument=40001246","published":"2008-01-02T08:03:37.000+01:00","created":"2008-01-02T07:59:47.000+01:00","slot_action_id":1246,"secondary_action":false,"secondary_document":true,"legal_force_date":null,"corrected_published":null,"annulled":null}"#;
        let pg = r#"{"action_id" : 9223372036854775807, "case_number" : "INS 2/2008", "court" : null, "type_code" : "6", "type_name" : "\u017d\/x", "source_type_name" : "", "section" : null, "number_in_section" : null, "document_url" : null, "published" : "2008", "created" : "2008", "slot_action_id" : null, "secondary_action" : true, "secondary_document" : false, "legal_force_date" : "2009-01-01", "corrected_published" : "2010", "annulled" : "2011-02-03T00:00:00.000+01:00"}"#;
        for row in [sqlite, pg] {
            let v: Value = serde_json::from_str(row).unwrap();
            assert_eq!(event_text(row).unwrap(), v.to_string());
        }
        // Text in every string field, any characters.
        let mut runner = proptest::test_runner::TestRunner::default();
        runner
            .run(
                &(
                    proptest::prelude::any::<String>(),
                    proptest::prelude::any::<i64>(),
                ),
                |(text, n)| {
                    let mut v: Value = serde_json::from_str(sqlite).unwrap();
                    for (k, x) in v.as_object_mut().unwrap() {
                        if x.is_string()
                            || x.is_null() && k != "number_in_section" && k != "slot_action_id"
                        {
                            *x = Value::String(format!("{k}{text}"));
                        } else if x.is_i64() {
                            *x = Value::from(n);
                        }
                    }
                    let row = v.to_string();
                    proptest::prop_assert_eq!(event_text(&row).unwrap(), v.to_string());
                    Ok(())
                },
            )
            .unwrap();
        // A key it does not know, or one missing, is an error, not a silent drop.
        assert!(event_text(&sqlite.replace("\"annulled\"", "\"other\"")).is_err());
        assert!(event_text(&sqlite.replace(",\"annulled\":null", "")).is_err());
    }

    /// The row type holds every timeline column: the feed selects all of them.
    #[test]
    fn the_event_row_holds_every_timeline_column() {
        let mut cols: Vec<&str> = crate::readmodel::TIMELINE_COLUMNS.to_vec();
        cols.sort_unstable();
        let row = EventRow {
            action_id: 1,
            annulled: None,
            case_number: String::new(),
            corrected_published: None,
            court: None,
            created: String::new(),
            document_url: None,
            legal_force_date: None,
            number_in_section: None,
            published: String::new(),
            secondary_action: false,
            secondary_document: false,
            section: None,
            slot_action_id: None,
            source_type_name: String::new(),
            type_code: String::new(),
            type_name: String::new(),
        };
        let v = serde_json::to_value(&row).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        assert_eq!(keys, cols);
    }
}
