//! A party's document stored as cells: `parties_vN` keeps each field of a [`PartyDoc`]
//! in a column of its own (a field without a value is a NULL, one byte, not its key and
//! `null` in a JSON text), and its readers get the document back, byte for byte as
//! `serde_json` writes it: built in Rust by [`doc_from`] from the cells a reader
//! selects ([`read_columns`] of the [`VIEW`]), or in SQL by [`doc_sql`] (the `parties`
//! view, for SQL that needs it whole).
//!
//! Owns the table's cell columns and the expression that serves them whole; never decides
//! what is masked (`crate::privacy` masks the document it serves) nor which persons a
//! table holds (`crate::projection::parties`).
//!
//! The cells repeat nothing the table's other columns hold: the IČO and the birth number
//! are stored again only where they differ from their search keys (`ico`, `rc`), and a
//! person's key (case, court, person ID), role, kind and actions are the table's own
//! columns. A version made before the cells (releases before 2026-12-08) has its
//! documents whole in `doc`, which the expression prefers where it is set.

use super::PartyDoc;
use super::fold::{ico_key, rc_key};
use crate::store::sql::{Cells, Val};

/// The columns `parties_vN` has for the cells, after the table's earlier columns, each
/// with its type.
pub const CELL_COLUMNS: &[(&str, &str)] = &[
    ("administrator_kind", "TEXT"),
    ("name", "TEXT"),
    ("trade_name", "TEXT"),
    ("first_name", "TEXT"),
    ("title_before", "TEXT"),
    ("title_after", "TEXT"),
    ("legal_form", "TEXT"),
    ("ico_text", "TEXT"),
    ("dic", "TEXT"),
    ("birth_number_text", "TEXT"),
    ("birth_date", "TEXT"),
    ("addresses", "TEXT"),
    ("left_case", "TEXT"),
];

/// The keys of an address (`source::model::Address`), in its order. The `addresses`
/// cell is the addresses' JSON as `serde_json` writes it with each `"key":` of these
/// replaced by a control character of its own ([`marker`]): in
/// that JSON a control character is always escaped, and `"key":` is always a key (a
/// quote inside a string is escaped), so the replacement is undone exactly by replacing
/// the characters back ([`unpack_sql`]).
const ADDRESS_KEYS: &[&str] = &[
    "kind",
    "valid_from",
    "valid_to",
    "city",
    "street",
    "house_number",
    "district",
    "country",
    "postcode",
    "phone",
    "fax",
    "text",
    "id",
];

/// The character that stands for the `i`-th of [`ADDRESS_KEYS`]: 1 to 13. (One
/// `replace` each, nested: a `"key":null` of its own each would nest 26, deeper than
/// the parser of an SQLite before 3.46, such as Debian's `sqlite3`, can read the view.)
fn marker(i: usize) -> char {
    char::from(u8::try_from(1 + i).expect("under 32"))
}

/// The `addresses` cell of `json`, the addresses as `serde_json` writes them.
fn pack(json: &str) -> String {
    let mut s = json.to_string();
    for (i, k) in ADDRESS_KEYS.iter().enumerate() {
        s = s.replace(&format!("\"{k}\":"), &marker(i).to_string());
    }
    s
}

/// The expression of the addresses' JSON from the cell `e` (NULL where it is).
fn unpack_sql(pg: bool, e: &str) -> String {
    let chr = if pg { "chr" } else { "char" };
    let mut s = e.to_string();
    for (i, k) in ADDRESS_KEYS.iter().enumerate() {
        let n = u32::from(marker(i));
        s = format!("replace({s}, {chr}({n}), '\"{k}\":')");
    }
    s
}

/// How a field of the document is read back from the row.
enum From {
    /// A text column (NULL: `null`).
    Text(&'static str),
    /// The text of the first column, else of the second (a search key equal to it).
    Either(&'static str, &'static str),
    /// A column holding JSON, or `[]` where NULL.
    Json(&'static str),
    /// An integer column, never NULL.
    Int(&'static str),
}

/// The document's fields in `serde_json`'s order (the struct's), and where each is kept.
const FIELDS: &[(&str, From)] = &[
    ("case_number", From::Text("case_number")),
    ("court", From::Text("court")),
    ("person_id", From::Text("person_id")),
    ("role", From::Text("role")),
    ("administrator_kind", From::Text("administrator_kind")),
    ("kind", From::Text("kind")),
    ("name", From::Text("name")),
    ("trade_name", From::Text("trade_name")),
    ("first_name", From::Text("first_name")),
    ("title_before", From::Text("title_before")),
    ("title_after", From::Text("title_after")),
    ("legal_form", From::Text("legal_form")),
    ("ico", From::Either("ico_text", "ico")),
    ("dic", From::Text("dic")),
    ("birth_number", From::Either("birth_number_text", "rc")),
    ("birth_date", From::Text("birth_date")),
    ("addresses", From::Json("addresses")),
    ("left_case", From::Text("left_case")),
    ("first_action_id", From::Int("first_action_id")),
    ("latest_action_id", From::Int("latest_action_id")),
];

/// The expression of a `parties_vN` row's document (its table or alias `t`, e.g. `p`,
/// or empty for none): the whole `doc` where a version made before the cells kept one,
/// else the document put together from the cells, equal to `serde_json::to_string` of
/// the [`PartyDoc`] that was stored.
pub fn doc_sql(pg: bool, t: &str) -> String {
    let c = |col: &str| {
        if t.is_empty() {
            col.to_string()
        } else {
            format!("{t}.{col}")
        }
    };
    // A text as a JSON string, or `null`: both back ends escape as `serde_json` does
    // (`"`, `\`, `\b \f \n \r \t`, other controls as `\u00xx`; the rest as it is).
    let quote = |e: String| {
        if pg {
            format!("COALESCE(to_json({e})::text, 'null')")
        } else {
            format!("json_quote({e})")
        }
    };
    let mut parts = Vec::with_capacity(FIELDS.len() * 2);
    for (i, (key, from)) in FIELDS.iter().enumerate() {
        let sep = if i == 0 { "{" } else { "," };
        parts.push(format!("'{sep}\"{key}\":'"));
        parts.push(match from {
            From::Text(col) => quote(c(col)),
            From::Either(a, b) => quote(format!("COALESCE({}, {})", c(a), c(b))),
            From::Json(col) => format!("COALESCE({}, '[]')", unpack_sql(pg, &c(col))),
            From::Int(col) => format!("CAST({} AS TEXT)", c(col)),
        });
    }
    parts.push("'}'".into());
    format!("COALESCE({}, {})", c("doc"), parts.join(" || "))
}

/// The name of the view the readers select the cells from: every column of the live
/// `parties_vN` as it is stored (the `parties` view serves the document whole, built in
/// SQL, for the exports and outside tools).
pub const VIEW: &str = "party_cells";

/// The columns [`doc_from`] reads, in its order, of the table or alias `t` (empty for
/// none): `doc` (set in a version made before the cells), then each field's cells.
pub fn read_columns(t: &str) -> String {
    let c = |col: &str| {
        if t.is_empty() {
            col.to_string()
        } else {
            format!("{t}.{col}")
        }
    };
    let mut cols = vec![c("doc")];
    for (_, from) in FIELDS {
        match from {
            From::Text(a) | From::Json(a) | From::Int(a) => cols.push(c(a)),
            From::Either(a, b) => {
                cols.push(c(a));
                cols.push(c(b));
            }
        }
    }
    cols.join(", ")
}

/// The document of a row holding [`read_columns`] from its column `at` on, byte for
/// byte what [`doc_sql`] builds (and `serde_json::to_string` of the stored
/// [`PartyDoc`]), put together here at about a microsecond, instead of in SQL at about
/// ten (performance log, 2026-12-07).
pub fn doc_from(row: &dyn Cells, at: usize) -> Result<String, sqlx::Error> {
    if let Some(d) = row.text(at)? {
        return Ok(d.to_string());
    }
    let mut out: Vec<u8> = Vec::with_capacity(640);
    let mut i = at + 1;
    for (n, (key, from)) in FIELDS.iter().enumerate() {
        out.push(if n == 0 { b'{' } else { b',' });
        out.push(b'"');
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\":");
        match from {
            From::Text(_) => {
                quote(&mut out, row.text(i)?);
                i += 1;
            }
            From::Either(..) => {
                let v = match row.text(i)? {
                    Some(v) => Some(v),
                    None => row.text(i + 1)?,
                };
                quote(&mut out, v);
                i += 2;
            }
            From::Json(_) => {
                match row.text(i)? {
                    None => out.extend_from_slice(b"[]"),
                    Some(p) => unpack(&mut out, p),
                }
                i += 1;
            }
            From::Int(col) => {
                let v = row.int(i)?.ok_or_else(|| {
                    sqlx::Error::Decode(format!("a party's {col} is NULL").into())
                })?;
                out.extend_from_slice(v.to_string().as_bytes());
                i += 1;
            }
        }
    }
    out.push(b'}');
    String::from_utf8(out).map_err(|e| sqlx::Error::Decode(Box::new(e)))
}

/// `v` as a JSON string (escaped by `serde_json` itself), or `null`.
fn quote(out: &mut Vec<u8>, v: Option<&str>) {
    match v {
        None => out.extend_from_slice(b"null"),
        Some(v) => serde_json::to_writer(&mut *out, v).expect("writing into memory"),
    }
}

/// The addresses' JSON of the cell `packed` (see [`ADDRESS_KEYS`]).
fn unpack(out: &mut Vec<u8>, packed: &str) {
    for &b in packed.as_bytes() {
        match b {
            1..=13 => {
                out.push(b'"');
                out.extend_from_slice(ADDRESS_KEYS[usize::from(b - 1)].as_bytes());
                out.extend_from_slice(b"\":");
            }
            b => out.push(b),
        }
    }
}

/// The cells of `d`, in [`CELL_COLUMNS`]' order.
pub fn cells(d: &PartyDoc) -> serde_json::Result<Vec<Val>> {
    let differs = |v: &Option<String>, key: fn(&str) -> String| {
        v.as_deref().filter(|s| key(s) != *s).map(str::to_string)
    };
    let addresses = if d.addresses.is_empty() {
        None
    } else {
        Some(pack(&serde_json::to_string(&d.addresses)?))
    };
    Ok(vec![
        d.administrator_kind.clone().into(),
        d.name.clone().into(),
        d.trade_name.clone().into(),
        d.first_name.clone().into(),
        d.title_before.clone().into(),
        d.title_after.clone().into(),
        d.legal_form.clone().into(),
        differs(&d.ico, ico_key).into(),
        d.dic.clone().into(),
        differs(&d.birth_number, rc_key).into(),
        d.birth_date.clone().into(),
        addresses.into(),
        d.left_case.clone().into(),
    ])
}

/// Empty cells, for a version that keeps its documents whole (see the module's opening).
pub fn no_cells() -> Vec<Val> {
    CELL_COLUMNS.iter().map(|_| Val::T(None)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::model::Address;

    /// The address keys are the address's, in its order.
    #[test]
    fn the_address_keys_are_the_addresses() {
        let v = serde_json::to_value(Address::default()).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let mut want = ADDRESS_KEYS.to_vec();
        let mut got = keys.clone();
        want.sort();
        got.sort();
        assert_eq!(got, want);
    }

    /// A value that looks like a key, or holds the markers' characters, comes back as
    /// it was (the characters are escaped in the JSON, the quotes too).
    #[test]
    fn a_value_like_a_key_is_left_alone() {
        let a = Address {
            kind: Some("\"city\":null".into()),
            city: Some("\u{1}\u{d}\"id\":".into()),
            street: Some("x\\".into()),
            ..Default::default()
        };
        let json = serde_json::to_string(&vec![a]).unwrap();
        let packed = pack(&json);
        // Each key of the one address, quotes and colon, became one character.
        let saved: usize = ADDRESS_KEYS.iter().map(|k| k.len() + 2).sum();
        assert_eq!(json.len() - packed.len(), saved, "{packed:?}");
        let mut back = packed.clone();
        for (i, k) in ADDRESS_KEYS.iter().enumerate() {
            back = back.replace(marker(i), &format!("\"{k}\":"));
        }
        assert_eq!(back, json);
    }

    /// The fields are the document's, in `serde_json`'s order: a field added to
    /// [`PartyDoc`] and not here fails this.
    #[test]
    fn the_fields_are_the_documents_in_its_order() {
        let v = serde_json::to_value(PartyDoc::default()).unwrap();
        let text = serde_json::to_string(&PartyDoc::default()).unwrap();
        let keys: Vec<&str> = FIELDS.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys.len(), v.as_object().unwrap().len());
        let mut at = 0;
        for k in &keys {
            let found = text[at..].find(&format!("\"{k}\":")).unwrap_or_else(|| {
                panic!("{k} is not next in {text}");
            });
            at += found + 1;
        }
    }
}
