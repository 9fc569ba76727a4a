//! What is personal, and the one mask every path out applies.
//!
//! Owns the decisions about personal data (see `docs/PRIVACY.md`):
//! - which fields of a person are personal: the birth number, the birth date, the
//!   register's person ID `idOsoby` (for a natural person it is surname, first name and
//!   the birth date as DDMMYY), the DIČ of a natural person (`CZ` + the birth number) and
//!   the street-level address of a natural person;
//! - the mask readers without the `pii` scope get ([`Privacy::mask`]): those values
//!   become `***`, and `person_id` becomes a stable opaque reference (a keyed hash,
//!   [`Privacy::person_ref`]), so a person stays addressable without the birth date;
//! - sealed cursors ([`Privacy::seal`]), so a page link never carries a person ID;
//! - which actions erase a debtor under § 425 ([`is_erasure`]): the type alone decides,
//!   whatever the note;
//! - how a raw note of an erased debtor's case is redacted ([`redact_note`]);
//! - the CSV formula guard ([`csv_cell`]) and files created for their owner only.
//!
//! Must never: log a value it masks, be skipped by a path out (API answers in every
//! format, cursors, HTML, exports, snapshots), or use the person ID's hash without the
//! replica's secret key (names are public and birth dates few: an unkeyed hash of an
//! `idOsoby` is reversed by trying them).

use std::borrow::Cow;
use std::path::Path;

use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hmac::{Hmac, Mac};
use rand::RngCore;
use serde_json::Value;
use sha2::Sha256;

use crate::source::model::{Detail, Note, Person};

/// The `secrets` key of the replica's secret (64 hex digits), made by the first
/// `migrate` and shared by every process that reads the replica (from the database, or
/// from `database.privacy_key_file` when its role may not read `secrets`).
pub const KEY_SETTING: &str = "privacy_key";

/// What a reader without the `pii` scope sees in place of a personal value.
pub const MASK: &str = "***";

/// The person ID a redacted person block carries in the replica.
pub const REDACTED: &str = "REDACTED";

/// Action types that make a debtor's data inaccessible (§ 425 of the Insolvency Act):
/// 636 "Znepřístupnění údajů o dlužníkovi dle § 425 IZ" and 637 "Souhlas soudu se
/// žádostí o vyškrtnutí dlužníka ze seznamu dlužníků". The code list marks no other
/// code so (1045 is only the request to strike, which the court may refuse).
pub const ERASURE_TYPES: &[&str] = &["636", "637"];

/// Whether an action erases its case's debtors: by its type alone (surrounding
/// whitespace ignored), whatever its note (which is optional, may be of an unknown schema
/// or fail to parse), or by a parsed `datumVyskrtnuti`. The one decision: every path
/// (projections, snapshots) calls it; SQL only narrows the rows it is asked about
/// ([`erasure_candidates_sql`]).
pub fn is_erasure(type_code: &str, note: &Note) -> bool {
    ERASURE_TYPES.contains(&type_code.trim())
        || matches!(note, Note::Parsed(d) if d.struck_out.is_some())
}

/// The element of a note that strikes a case out (`datumVyskrtnuti`): a note naming it
/// may be an erasure, and is kept as text at rest so that SQL can find it.
pub const ERASURE_MARK: &str = "datumVyskrtnuti";

/// A SQL condition over the columns `type_code` and `note` that holds for every action
/// [`is_erasure`] may call an erasure, and for few others: a type code that contains an
/// erasure type (however spaced), or a note naming `datumVyskrtnuti` (an element name,
/// never escaped in XML). A superset to read, never the decision: the rows it gives go
/// through [`is_erasure`].
pub fn erasure_candidates_sql() -> String {
    let types: Vec<String> = ERASURE_TYPES
        .iter()
        .map(|t| format!("type_code LIKE '%{t}%'"))
        .collect();
    // (A note holding the mark is kept as text, never compressed: `store::notes`.)
    format!("({} OR note LIKE '%{ERASURE_MARK}%')", types.join(" OR "))
}

/// The fields of a person document whose value is personal whatever the person.
const PERSONAL_FIELDS: &[&str] = &["birth_number", "birth_date"];

/// Whether the mask replaces every value of field `leaf` by `***` (so that a typed
/// export column of it holds text when masked).
pub fn masked_column(leaf: &str) -> bool {
    PERSONAL_FIELDS.contains(&leaf)
}

/// The address fields of a natural person readers without the scope still see (the
/// town, as the register's own search shows it); the rest of the address is personal.
const PUBLIC_ADDRESS_FIELDS: &[&str] = &["kind", "city", "district", "country"];

/// Whether a DIČ is personal: a legal person's is two letters and its 8-digit IČO;
/// anything else (`CZ` + a 9- or 10-digit birth number, or an unknown form) is
/// treated as a natural person's.
pub fn personal_dic(dic: &str) -> bool {
    let d = dic.trim().as_bytes();
    !(d.len() == 10
        && d[..2].iter().all(u8::is_ascii_alphabetic)
        && d[2..].iter().all(u8::is_ascii_digit))
}

/// Whether a person document (an object with `kind`, `ico`, ...) is of a natural person:
/// kind `F` or `PODNIKATEL`, or any birth data, or no kind and no IČO.
fn natural(o: &serde_json::Map<String, Value>) -> bool {
    let kind = o.get("kind").and_then(Value::as_str);
    let has = |k: &str| {
        o.get(k)
            .is_some_and(|v| v.as_str().is_some_and(|s| !s.is_empty()))
    };
    matches!(kind, Some("F") | Some("PODNIKATEL"))
        || has("birth_number")
        || has("birth_date")
        || (kind.is_none() && !has("ico"))
}

/// The replica's secret: keys the person references and seals cursors.
#[derive(Clone)]
pub struct Privacy {
    key: [u8; 32],
}

impl std::fmt::Debug for Privacy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Privacy(..)")
    }
}

impl Privacy {
    /// A new random key, as hex (for the `settings` row).
    pub fn generate_hex() -> String {
        let mut k = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut k);
        hex::encode(k)
    }

    pub fn from_hex(h: &str) -> Result<Privacy, String> {
        let v = hex::decode(h.trim()).map_err(|e| format!("{KEY_SETTING}: {e}"))?;
        let key: [u8; 32] = v
            .try_into()
            .map_err(|_| format!("{KEY_SETTING}: not 32 bytes"))?;
        Ok(Privacy { key })
    }

    /// The key as the hex text `settings`, `secrets` and a key file hold (for `isir
    /// privacy export-key` only: whoever holds it reverses every person reference).
    pub fn to_hex(&self) -> String {
        hex::encode(self.key)
    }

    fn mac(&self, domain: &[u8], data: &[u8]) -> [u8; 32] {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.key).expect("any key length");
        m.update(domain);
        m.update(&[0]);
        m.update(data);
        m.finalize().into_bytes().into()
    }

    /// The opaque, stable reference of a person ID: `p_` and 20 hex digits of
    /// HMAC-SHA256 under the replica's key. The same `idOsoby` gives the same reference
    /// in every case and every answer of this replica.
    pub fn person_ref(&self, person_id: &str) -> String {
        format!(
            "p_{}",
            hex::encode(&self.mac(b"person", person_id.as_bytes())[..10])
        )
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        let k = self.mac(b"cursor", b"");
        XChaCha20Poly1305::new((&k).into())
    }

    /// A cursor: the keyset position, encrypted and authenticated (XChaCha20-Poly1305),
    /// URL-safe base64. Neither read nor forged without the key.
    pub fn seal(&self, parts: &[String]) -> String {
        let mut nonce = [0u8; 24];
        rand::thread_rng().fill_bytes(&mut nonce);
        let plain = serde_json::to_vec(parts).unwrap_or_default();
        let ct = self
            .cipher()
            .encrypt(&XNonce::from(nonce), plain.as_slice())
            .expect("encryption of a short text");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&ct);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(out)
    }

    /// The parts of a cursor [`Privacy::seal`] made, if it did and there are `n`.
    pub fn unseal(&self, token: &str, n: usize) -> Option<Vec<String>> {
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token)
            .ok()?;
        if raw.len() < 24 + 16 || token.len() > 4096 {
            return None;
        }
        let nonce: [u8; 24] = raw[..24].try_into().ok()?;
        let plain = self
            .cipher()
            .decrypt(&XNonce::from(nonce), &raw[24..])
            .ok()?;
        let v: Vec<String> = serde_json::from_slice(&plain).ok()?;
        (v.len() == n).then_some(v)
    }

    /// The mask for readers without the `pii` scope, applied to any projection document
    /// (a case with its debtors and administrator, a person): in every object,
    /// `person_id` becomes its reference, birth number and date become `***`, so does a
    /// personal DIČ, and a natural person's addresses keep only kind, town, district and
    /// country. `null` stays `null`.
    pub fn mask(&self, mut v: Value) -> Value {
        self.mask_in(&mut v);
        v
    }

    /// What a personal leaf field `key` holding `s` becomes, or `None` when it is not
    /// personal: the one rule [`Privacy::mask`] and [`Privacy::mask_cells`] apply.
    fn masked_leaf(&self, key: &str, s: &str) -> Option<String> {
        match key {
            "person_id" => Some(self.person_ref(s)),
            k if PERSONAL_FIELDS.contains(&k) => Some(MASK.into()),
            "dic" if personal_dic(s) => Some(MASK.into()),
            _ => None,
        }
    }

    fn mask_in(&self, v: &mut Value) {
        match v {
            Value::Array(a) => a.iter_mut().for_each(|x| self.mask_in(x)),
            Value::Object(o) => {
                let nat = natural(o);
                for (k, x) in o.iter_mut() {
                    if let Some(m) = x.as_str().and_then(|s| self.masked_leaf(k, s)) {
                        *x = Value::String(m);
                    } else if k == "addresses" && nat {
                        // A natural person's address: only its public fields stay.
                        for a in x.as_array_mut().into_iter().flatten() {
                            for (ak, av) in a.as_object_mut().into_iter().flatten() {
                                if av.is_string() && !PUBLIC_ADDRESS_FIELDS.contains(&ak.as_str()) {
                                    *av = Value::String(MASK.into());
                                }
                            }
                        }
                    } else if x.is_object() || x.is_array() {
                        self.mask_in(x);
                    }
                }
            }
            _ => {}
        }
    }

    /// [`Privacy::mask`] of a stored JSON document, as text. A document whose only
    /// personal field is `person_id` (a case: its debtors and administrator) has those
    /// values replaced in the text, without a parse and a new serialisation; any other
    /// goes through [`Privacy::mask`]. Equal to it either way (tested).
    pub fn mask_text(&self, doc: &str) -> serde_json::Result<String> {
        use memchr::memmem::Finder;
        use std::sync::LazyLock;
        // Every page of a list masks each of its documents: the keys are looked for with
        // memchr's vectorised search (the standard library's `contains` was 7 % of the
        // server's time under a list of cases).
        static OTHERS: LazyLock<[Finder<'static>; 4]> = LazyLock::new(|| {
            [
                "\"birth_number\"",
                "\"birth_date\"",
                "\"dic\"",
                "\"addresses\"",
            ]
            .map(Finder::new)
        });
        // A key is the only place `"person_id":"` can stand: inside a JSON string its
        // quotes would be escaped.
        const KEY: &str = "\"person_id\":\"";
        static PERSON: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(KEY));
        if OTHERS.iter().any(|k| k.find(doc.as_bytes()).is_some()) {
            let v: Value = serde_json::from_str(doc)?;
            return Ok(self.mask(v).to_string());
        }
        let mut out = String::with_capacity(doc.len() + 64);
        let mut rest = doc;
        while let Some(at) = PERSON.find(rest.as_bytes()) {
            let start = at + KEY.len() - 1; // the value's opening quote
            out.push_str(&rest[..start]);
            let bytes = rest.as_bytes();
            let mut end = start + 1;
            while end < bytes.len() && bytes[end] != b'"' {
                end += if bytes[end] == b'\\' { 2 } else { 1 };
            }
            let literal = rest.get(start..=end).ok_or_else(|| {
                <serde_json::Error as serde::de::Error>::custom("an unterminated person_id")
            })?;
            let id: String = serde_json::from_str(literal)?;
            out.push('"');
            out.push_str(&self.person_ref(&id));
            out.push('"');
            rest = &rest[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    /// [`Privacy::mask`] of one CSV row of `cols` (cells as read from a document):
    /// `person_id` to its reference, birth data and a personal DIČ to `***`.
    pub fn mask_cells(&self, cols: &[&str], row: &mut [crate::readmodel::columns::Cell]) {
        use crate::readmodel::columns::Cell;
        for (c, cell) in cols.iter().zip(row.iter_mut()) {
            if let Cell::Str(s) = cell {
                let leaf = c.rsplit('.').next().unwrap_or(c);
                if let Some(m) = self.masked_leaf(leaf, s) {
                    *s = m;
                }
            }
        }
    }
}

/// A CSV cell that a spreadsheet will not run: a text starting with `=`, `+`, `-`, `@`,
/// a tab or a carriage return gets a leading `'` (OWASP's "CSV injection" advice).
pub fn csv_cell(s: &str) -> Cow<'_, str> {
    match s.as_bytes().first() {
        Some(b'=' | b'+' | b'-' | b'@' | b'\t' | b'\r') => Cow::Owned(format!("'{s}")),
        _ => Cow::Borrowed(s),
    }
}

/// The SQL of [`csv_cell`] over a text expression, for rows a database writes itself
/// (PostgreSQL's COPY). Equal to [`csv_cell`] on every text.
pub fn csv_cell_sql(expr: &str, pg: bool) -> String {
    let (tab, cr) = if pg {
        ("chr(9)", "chr(13)")
    } else {
        ("char(9)", "char(13)")
    };
    format!(
        "CASE WHEN substr({expr}, 1, 1) IN ('=', '+', '-', '@', {tab}, {cr}) THEN '''' || {expr} ELSE {expr} END"
    )
}

/// A person block stripped of everything personal: only its role, kind and the date it
/// left the case remain (the case's debtor kind is not personal).
fn redacted_person(p: &Person) -> Person {
    Person {
        id: REDACTED.into(),
        role: p.role.clone(),
        kind: p.kind.clone(),
        left_case: p.left_case.clone(),
        ..Default::default()
    }
}

/// Whether a person block is (or may be) an erased debtor's: a debtor, or a person
/// without a role (the register's role is optional).
pub fn erasable(p: &Person) -> bool {
    matches!(p.role.as_deref(), None | Some("DLUŽNÍK"))
}

/// The note of an action of an erased case, redacted: a parsed note keeps everything
/// but a debtor's (or role-less) person block, which keeps only role, kind and the
/// date it left, and the person IDs `idOsoby1/2`; elements the parser does not know are
/// dropped (an unknown schema may hold anything). A note that does not parse is replaced
/// whole by an empty note of schema `redacted`: what cannot be read cannot be kept.
/// `None` when the note is already so.
pub fn redact_note(note: &str) -> Option<String> {
    redact_note_inner(note)
}

/// What the detail of a quarantine row of an erased case says once its bytes are
/// removed (the erasure and snapshots without `--include-pii` remove them: a record
/// that did not parse cannot be redacted field by field).
pub const QUARANTINE_ERASED: &str = " (bytes removed: the case is erased under § 425)";

fn redact_note_inner(note: &str) -> Option<String> {
    let d = match crate::source::parse::parse_note(note) {
        Ok(mut d) => {
            if let Some(p) = d.person.as_mut().filter(|p| erasable(p)) {
                *p = redacted_person(p);
            }
            for id in [&mut d.person_id1, &mut d.person_id2] {
                if id.is_some() {
                    *id = Some(REDACTED.into());
                }
            }
            d
        }
        Err(_) => Detail {
            schema_version: Some("redacted".into()),
            ..Default::default()
        },
    };
    let out = crate::source::write::note_xml(&d);
    (out != note).then_some(out)
}

/// Whether a statement's error is the database refusing this role a table
/// (PostgreSQL's `insufficient_privilege`, 42501).
pub fn denied_sql(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.code().as_deref() == Some("42501"))
}

/// Creates a file readable and writable by its owner only (mode 0600), truncating.
pub fn create_private_file(path: &Path) -> std::io::Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    o.open(path)
}

/// Creates a directory (and its parents) only its owner can enter (mode 0700).
pub fn create_private_dir(path: &Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p() -> Privacy {
        Privacy::from_hex(&"11".repeat(32)).unwrap()
    }

    #[test]
    fn person_refs_are_stable_keyed_and_opaque() {
        let a = p().person_ref("NOVÁKJAN010185 1");
        assert_eq!(a, p().person_ref("NOVÁKJAN010185 1"));
        assert_ne!(a, p().person_ref("NOVÁKJAN020185 1"));
        let other = Privacy::from_hex(&"22".repeat(32)).unwrap();
        assert_ne!(a, other.person_ref("NOVÁKJAN010185 1"));
        assert!(a.starts_with("p_") && a.len() == 22 && !a.contains("0101"));
    }

    #[test]
    fn cursors_round_trip_and_refuse_tampering() {
        let k = p();
        let parts = vec![
            "INS 1/2020".to_string(),
            "KSBR".into(),
            "NOVÁKJAN010185 1".into(),
        ];
        let c = k.seal(&parts);
        assert!(!c.contains("NOV"));
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&c)
            .unwrap();
        assert!(!String::from_utf8_lossy(&raw).contains("010185"));
        assert_eq!(k.unseal(&c, 3), Some(parts.clone()));
        assert_eq!(k.unseal(&c, 2), None);
        let mut bad = raw.clone();
        *bad.last_mut().unwrap() ^= 1;
        let bad = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bad);
        assert_eq!(k.unseal(&bad, 3), None);
        assert_eq!(
            Privacy::from_hex(&"22".repeat(32)).unwrap().unseal(&c, 3),
            None
        );
        assert_eq!(k.unseal("not-a-cursor", 3), None);
    }

    #[test]
    fn the_mask_hides_what_is_personal_and_keeps_the_rest() {
        let doc = json!({
            "person_id": "NOVÁKJAN010185 1", "kind": "F", "name": "Novák",
            "birth_number": "850101/1234", "birth_date": "1985-01-01+01:00",
            "dic": "CZ8501011234", "ico": null,
            "addresses": [{"kind": "TRVALÁ", "city": "Brno", "street": "Dlouhá",
                           "house_number": "5", "postcode": "602 00", "district": null}],
            "debtors": [{"person_id": "X 1", "kind": "P", "dic": "CZ12345678",
                         "addresses": [{"street": "Sídelní"}], "ico": "12345678"}]
        });
        let m = p().mask(doc);
        assert_eq!(m["person_id"], json!(p().person_ref("NOVÁKJAN010185 1")));
        assert_eq!(m["birth_number"], "***");
        assert_eq!(m["birth_date"], "***");
        assert_eq!(m["dic"], "***");
        assert_eq!(m["ico"], Value::Null);
        assert_eq!(m["name"], "Novák");
        assert_eq!(m["addresses"][0]["city"], "Brno");
        assert_eq!(m["addresses"][0]["street"], "***");
        assert_eq!(m["addresses"][0]["postcode"], "***");
        assert_eq!(m["addresses"][0]["district"], Value::Null);
        // A company keeps its DIČ and its seat.
        assert_eq!(m["debtors"][0]["dic"], "CZ12345678");
        assert_eq!(m["debtors"][0]["addresses"][0]["street"], "Sídelní");
        assert_eq!(m["debtors"][0]["person_id"], json!(p().person_ref("X 1")));
    }

    /// The text path of the mask equals the mask, on case documents (the fast path) and
    /// on anything else (the fallback).
    #[test]
    fn the_mask_of_a_text_equals_the_mask() {
        let k = p();
        let case = crate::readmodel::CaseDoc {
            case_number: "INS 1/2020".into(),
            debtors: vec![crate::readmodel::PartyRef {
                person_id: "NOVÁK\"JAN\\010185 1".into(),
                name: Some("x\"person_id\":\"y".into()),
                ..Default::default()
            }],
            administrator: Some(crate::readmodel::PartyRef {
                person_id: "SPRAVCE00001          ".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let texts = [
            serde_json::to_string(&case).unwrap(),
            r#"{"person_id":"A 1","birth_number":"850101/1234","addresses":[]}"#.to_string(),
            r#"{"a":[{"person_id":"\u0041 1"}],"person_id":null}"#.to_string(),
            r#"{"nothing":"here"}"#.to_string(),
        ];
        for t in texts {
            let want = k.mask(serde_json::from_str(&t).unwrap());
            let got: Value = serde_json::from_str(&k.mask_text(&t).unwrap()).unwrap();
            assert_eq!(got, want, "{t}");
        }
    }

    #[test]
    fn dic_forms() {
        assert!(!personal_dic("CZ12345678"));
        assert!(personal_dic("CZ8501011234"));
        assert!(personal_dic("CZ850101123"));
        assert!(personal_dic("1234"));
    }

    #[test]
    fn the_csv_guard_follows_owasp() {
        for (i, o) in [
            ("=HYPERLINK(\"x\")", "'=HYPERLINK(\"x\")"),
            ("+1", "'+1"),
            ("-1", "'-1"),
            ("@SUM(A1)", "'@SUM(A1)"),
            ("\tx", "'\tx"),
            ("\rx", "'\rx"),
            ("Novák = x", "Novák = x"),
            ("", ""),
            ("INS 1/2020", "INS 1/2020"),
        ] {
            assert_eq!(csv_cell(i), o, "{i:?}");
        }
    }

    /// Cases worked out from the rule (a natural person: kind `F` or `PODNIKATEL`, or
    /// birth data, or no kind and no IČO), where an empty value is no value.
    #[test]
    fn a_person_is_natural_by_kind_birth_data_or_no_ico() {
        let nat = |v: Value| natural(v.as_object().expect("an object"));
        assert!(nat(json!({"kind": "F"})));
        assert!(nat(json!({"kind": "PODNIKATEL", "ico": "12345678"})));
        assert!(!nat(json!({"kind": "P", "ico": "12345678"})));
        assert!(nat(json!({"kind": "P", "birth_date": "1970-01-01"})));
        assert!(nat(json!({"kind": "P", "birth_number": "7001010000"})));
        // An empty birth number or date is no birth data.
        assert!(!nat(
            json!({"kind": "P", "birth_number": "", "birth_date": ""})
        ));
        assert!(nat(json!({})));
        assert!(nat(json!({"ico": ""})), "an empty IČO is no IČO");
        assert!(!nat(json!({"ico": "12345678"})));
        // A value that is not text is not there.
        assert!(!nat(json!({"kind": "P", "birth_date": 1970})));
    }

    /// The key leaves only by `to_hex` (the hex text it was read from) and never by
    /// `Debug`; a cursor is taken up to 4096 characters, not beyond (a token of
    /// exactly 4096: 3072 bytes, 24 of nonce, 16 of tag and 3032 of `["a…a"]`).
    #[test]
    fn the_key_leaves_only_by_to_hex_and_cursors_have_a_length_limit() {
        let hex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
        let p = Privacy::from_hex(hex).unwrap();
        assert_eq!(p.to_hex(), hex);
        assert_eq!(format!("{p:?}"), "Privacy(..)");
        let at_limit = vec!["a".repeat(3028)];
        let t = p.seal(&at_limit);
        assert_eq!(t.len(), 4096);
        assert_eq!(p.unseal(&t, 1), Some(at_limit));
        let t = p.seal(&["a".repeat(3029)]);
        assert_eq!(t.len(), 4098);
        assert_eq!(p.unseal(&t, 1), None);
    }

    /// A stored document cut inside a `person_id` (a spoiled row) is an error to report,
    /// not a panic, with or without an escape before the cut.
    #[test]
    fn a_cut_person_id_is_an_error() {
        let p = Privacy::from_hex(&"11".repeat(32)).unwrap();
        for doc in [
            r#"{"person_id":"abc"#,
            r#"{"person_id":"ab"#,
            r#"{"person_id":""#,
        ] {
            assert!(p.mask_text(doc).is_err(), "{doc}");
        }
    }

    #[test]
    fn erasure_is_decided_by_the_type_alone() {
        assert!(is_erasure("636", &Note::Absent));
        assert!(is_erasure("637", &Note::Unparsed { error: "x".into() }));
        assert!(!is_erasure("1045", &Note::Absent));
        let d = Detail {
            struck_out: Some("2020-01-01".into()),
            ..Default::default()
        };
        assert!(is_erasure("372", &Note::Parsed(Box::new(d))));
    }

    #[test]
    fn notes_of_erased_debtors_are_redacted_whatever_they_hold() {
        let d = Detail {
            schema_version: Some("1_10".into()),
            origin: Some("KSJIMBM".into()),
            person: Some(Person {
                id: "NOVÁKJAN010185 1".into(),
                role: Some("DLUŽNÍK".into()),
                kind: Some("F".into()),
                birth_number: Some("850101/1234".into()),
                name: Some("Novák".into()),
                left_case: Some("2021-03-04".into()),
                ..Default::default()
            }),
            person_id1: Some("NOVÁKJAN010185 1".into()),
            ..Default::default()
        };
        let note = crate::source::write::note_xml(&d);
        let r = redact_note(&note).expect("changed");
        for secret in ["Novák", "850101", "010185"] {
            assert!(!r.contains(secret), "{secret} in {r}");
        }
        assert!(r.contains("KSJIMBM") && r.contains("DLUŽNÍK"));
        // The person block keeps its role, kind and the date it left the case, under
        // the ID the builders skip (a block without it would be a new person of that
        // case, with no name).
        let back = crate::source::parse::parse_note(&r).unwrap();
        assert_eq!(
            back.person,
            Some(Person {
                id: "REDACTED".into(),
                role: Some("DLUŽNÍK".into()),
                kind: Some("F".into()),
                left_case: Some("2021-03-04".into()),
                ..Default::default()
            })
        );
        assert_eq!(back.person_id1.as_deref(), Some("REDACTED"));
        assert_eq!(redact_note(&r), None, "idempotent");
        // A creditor stays.
        let mut c = d.clone();
        c.person.as_mut().unwrap().role = Some("VĚŘITEL".into());
        c.person_id1 = None;
        assert_eq!(redact_note(&crate::source::write::note_xml(&c)), None);
        // What does not parse is not kept.
        let r = redact_note("<udalost><osoba>NOVÁKJAN010185 1 850101/1234").unwrap();
        assert!(!r.contains("850101") && !r.contains("NOV"));
        // It is an empty note of schema `redacted` (docs/PRIVACY.md), which says so.
        let back = crate::source::parse::parse_note(&r).unwrap();
        assert_eq!(back.schema_version.as_deref(), Some("redacted"));
        assert_eq!(back.person, None);
    }

    /// A refusal of this role is PostgreSQL's SQLSTATE 42501 `insufficient_privilege`
    /// (its manual's appendix A), and nothing else: not an undefined table (42P01), a
    /// cancelled statement (57014) or a row not found.
    #[test]
    fn only_insufficient_privilege_is_a_denial() {
        use crate::read::limit::tests::pg;
        assert!(denied_sql(&pg("42501")));
        for code in ["42P01", "57014", "08006", "42500"] {
            assert!(!denied_sql(&pg(code)), "{code}");
        }
        assert!(!denied_sql(&sqlx::Error::RowNotFound));
    }
}
