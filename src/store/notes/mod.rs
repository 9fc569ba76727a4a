//! The replica's notes at rest. An action's `poznamka` is kept either as text (`note`)
//! or compressed with a zstd dictionary trained on the store's own notes (`note_z`,
//! naming its dictionary in `note_dict`); the dictionaries live in `note_dicts`, each
//! with a version, and are never changed or dropped, so every row stays readable.
//!
//! Owns the dictionaries (training, storing, loading, caching) and the encoding and
//! decoding of notes. Its invariants:
//! - what goes in comes out byte for byte; a note that does not decode is an error,
//!   never a guess (every frame carries a checksum of its text and its dictionary's ID);
//! - a note holding an erasure mark ([`ERASURE_MARK`]) stays text, so that the SQL that
//!   narrows erasure candidates ([`crate::privacy::erasure_candidates_sql`]) finds it;
//! - a row is text or compressed, never both; a row written by a release before this
//!   one is text, and is read as it was.
//!
//! It never decides what a note means, and never logs one.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use crate::store::sql::Tx;

mod stored;
pub use stored::*;

/// Notes a first dictionary is trained on, once the replica holds as many.
pub const SAMPLES_FIRST: usize = 1_000;
/// Notes the last automatic dictionary is trained on: once the replica holds as many,
/// the first dictionary is followed by one trained on this many, and then no more.
pub const SAMPLES_MAX: usize = 10_000;
/// A dictionary's size at most. 64 KiB trained on 10 000 notes shrank 2 000 others
/// 12.5× (issue 37's measurement); a dictionary is never more than an eighth of its
/// samples' bytes.
pub const DICT_BYTES: usize = 64 * 1024;
/// The compression level (the dictionary is prepared for it).
pub const LEVEL: i32 = 3;
/// The text whose notes stay uncompressed: an erasure's (`datumVyskrtnuti`).
pub use crate::privacy::ERASURE_MARK;
/// A note's size at most when decoded (a guard against a corrupt frame's size field).
const MAX_NOTE: usize = 64 << 20;
/// The magic number a zstd dictionary starts with, little-endian.
const DICT_MAGIC: [u8; 4] = [0x37, 0xA4, 0x30, 0xEC];

/// A note as a row holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AtRest {
    /// The note as text (uncompressed rows, and every row before dictionaries).
    pub text: Option<String>,
    /// The note compressed: one zstd frame.
    pub z: Option<Vec<u8>>,
    /// The dictionary `z` was compressed with.
    pub dict: Option<i64>,
}

/// A dictionary, prepared for both directions. (Its version and samples are its
/// store's: the same bytes may be another version in another store.)
pub struct Dict {
    pub id: i64,
    enc: zstd::dict::EncoderDictionary<'static>,
    dec: zstd::dict::DecoderDictionary<'static>,
}

impl std::fmt::Debug for Dict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dict").field("id", &self.id).finish()
    }
}

/// Every dictionary this process has loaded, by ID. An ID is the hash of the
/// dictionary's bytes, so two stores that share an ID share the dictionary.
static LOADED: LazyLock<Mutex<HashMap<i64, Arc<Dict>>>> = LazyLock::new(Default::default);

/// Forgets every loaded dictionary, so that the next read loads them from its store
/// (for tests, which read as a new process would).
#[doc(hidden)]
pub fn forget_loaded() {
    LOADED.lock().expect("dictionary cache").clear();
}

fn decode_error(why: String) -> sqlx::Error {
    sqlx::Error::Decode(why.into())
}

/// The ID of a dictionary's bytes: a hash of them with the ID field zeroed, in zstd's
/// range of unregistered IDs (2^15 to 2^31 - 1).
fn id_of(bytes: &[u8]) -> i64 {
    let mut b = bytes.to_vec();
    if b.len() >= 8 {
        b[4..8].copy_from_slice(&[0; 4]);
    }
    let h = xxhash_rust::xxh3::xxh3_64(&b);
    (32_768 + h % ((1u64 << 31) - 32_768)) as i64
}

impl Dict {
    /// Prepares `bytes` (a zstd dictionary whose ID field is its [`id_of`]).
    fn prepare(bytes: &[u8]) -> Result<Dict, sqlx::Error> {
        let id = id_of(bytes);
        if bytes.len() < 8 || bytes[..4] != DICT_MAGIC || bytes[4..8] != (id as u32).to_le_bytes() {
            return Err(decode_error(format!(
                "note dictionary {id} is not the dictionary its ID names (damaged?)"
            )));
        }
        let enc = zstd::dict::EncoderDictionary::try_copy(bytes, LEVEL)
            .map_err(|e| decode_error(format!("note dictionary {id}: {e}")))?;
        let dec = zstd::dict::DecoderDictionary::try_copy(bytes)
            .map_err(|e| decode_error(format!("note dictionary {id}: {e}")))?;
        Ok(Dict { id, enc, dec })
    }

    fn cached(id: i64) -> Option<Arc<Dict>> {
        LOADED.lock().expect("dictionary cache").get(&id).cloned()
    }

    fn keep(d: Dict) -> Arc<Dict> {
        let d = Arc::new(d);
        LOADED
            .lock()
            .expect("dictionary cache")
            .entry(d.id)
            .or_insert(d)
            .clone()
    }
}

/// Trains a dictionary on `samples` (notes), its ID field set to its hash. `None` when
/// there is too little to train on (zstd refuses).
///
/// A dictionary is made of pieces of the notes it was trained on, and it is never
/// dropped: it is trained on the notes as erasure redacts them
/// ([`crate::privacy::redact_note`]: debtor and role-less person blocks reduced to role,
/// kind and the date they left, `idOsoby1/2` replaced, unknown elements dropped, a note
/// that does not parse replaced whole), so that no debtor's data is ever in one, and an
/// erasure has nothing to remove from it.
pub fn train(samples: &[&str]) -> Option<Vec<u8>> {
    let redacted: Vec<String> = samples
        .iter()
        .map(|n| crate::privacy::redact_note(n).unwrap_or_else(|| n.to_string()))
        .collect();
    let samples = &redacted;
    let total: usize = samples.iter().map(|s| s.len()).sum();
    let size = DICT_BYTES.min(total / 8);
    if size < 1024 {
        return None;
    }
    let mut bytes = zstd::dict::from_samples(samples, size).ok()?;
    if bytes.len() < 8 || bytes[..4] != DICT_MAGIC {
        return None;
    }
    let id = id_of(&bytes);
    bytes[4..8].copy_from_slice(&(id as u32).to_le_bytes());
    Some(bytes)
}

/// Encodes notes with `dict` (none: as text).
pub struct Packer {
    c: Option<zstd::bulk::Compressor<'static>>,
    // After the compressor, which keeps a handle on its prepared dictionary.
    dict: Option<Arc<Dict>>,
}

impl Packer {
    pub fn new(dict: Option<Arc<Dict>>) -> Packer {
        let c = dict.as_ref().and_then(|d| {
            let mut c = zstd::bulk::Compressor::with_prepared_dictionary(&d.enc).ok()?;
            c.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))
                .ok()?;
            Some(c)
        });
        Packer { c, dict }
    }

    /// `note` as a row holds it: compressed when there is a dictionary, the note holds
    /// no erasure mark and the frame is the smaller; else as text.
    pub fn pack(&mut self, note: Option<&str>) -> AtRest {
        let Some(n) = note else {
            return AtRest::default();
        };
        let text = || AtRest {
            text: Some(n.to_string()),
            ..AtRest::default()
        };
        let (Some(c), Some(d)) = (self.c.as_mut(), self.dict.as_ref()) else {
            return text();
        };
        if n.contains(ERASURE_MARK) {
            return text();
        }
        match c.compress(n.as_bytes()) {
            Ok(z) if z.len() < n.len() => AtRest {
                text: None,
                z: Some(z),
                dict: Some(d.id),
            },
            _ => text(),
        }
    }
}

/// Decodes rows into notes; holds the dictionaries it was given.
pub struct Unpacker {
    dicts: HashMap<i64, Arc<Dict>>,
    d: Option<zstd::zstd_safe::DCtx<'static>>,
}

impl Default for Unpacker {
    fn default() -> Self {
        Unpacker::new()
    }
}

impl Unpacker {
    pub fn new() -> Unpacker {
        Unpacker {
            dicts: HashMap::new(),
            d: None,
        }
    }

    /// The note of `row` (of action `id`, for the error).
    pub fn unpack(&mut self, id: i64, row: AtRest) -> Result<Option<String>, sqlx::Error> {
        let (z, dict) = match row {
            AtRest {
                z: None,
                dict: None,
                text,
            } => return Ok(text),
            AtRest {
                z: Some(z),
                dict: Some(d),
                text: None,
            } => (z, d),
            _ => {
                return Err(decode_error(format!(
                    "action {id}: its note is both text and compressed, or its frame and its dictionary do not go together"
                )));
            }
        };
        let dict = self.dicts.get(&dict).ok_or_else(|| {
            decode_error(format!(
                "action {id}: its note's dictionary {dict} is not in the store"
            ))
        })?;
        let bad = |why: String| {
            decode_error(format!(
                "action {id}: its note does not decode with dictionary {}: {why}",
                dict.id
            ))
        };
        let size = match zstd::zstd_safe::get_frame_content_size(&z) {
            Ok(Some(n)) if n as usize <= MAX_NOTE => n as usize,
            _ => return Err(bad("no frame, or no size it states".into())),
        };
        let d = match &mut self.d {
            Some(d) => d,
            None => self.d.insert(
                zstd::zstd_safe::DCtx::try_create()
                    .ok_or_else(|| decode_error("no zstd context".into()))?,
            ),
        };
        let mut bytes = Vec::with_capacity(size);
        let n = d
            .decompress_using_ddict(&mut bytes, &z, dict.dec.as_ddict())
            .map_err(|c| bad(zstd::zstd_safe::get_error_name(c).to_string()))?;
        if n != size {
            return Err(bad(format!("{n} bytes, not the {size} its frame states")));
        }
        String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| decode_error(format!("action {id}: its note decodes to bytes, not UTF-8")))
    }

    /// As [`Unpacker::unpack`], loading the row's dictionary through `tx` if not held.
    pub async fn unpack_in(
        &mut self,
        tx: &mut Tx,
        id: i64,
        row: AtRest,
    ) -> Result<Option<String>, sqlx::Error> {
        if let Some(d) = row.dict
            && !self.dicts.contains_key(&d)
        {
            self.hold(by_id(tx, d).await?);
        }
        self.unpack(id, row)
    }

    /// The dictionary IDs of `rows` not yet held.
    fn missing<'a>(&self, ids: impl Iterator<Item = &'a Option<i64>>) -> Vec<i64> {
        let mut out: Vec<i64> = ids
            .flatten()
            .filter(|d| !self.dicts.contains_key(d))
            .copied()
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    fn hold(&mut self, d: Arc<Dict>) {
        self.dicts.insert(d.id, d);
    }

    /// An unpacker holding every dictionary `ids` name, loaded through `tx`.
    pub async fn for_tx<'a>(
        tx: &mut Tx,
        ids: impl Iterator<Item = &'a Option<i64>>,
    ) -> Result<Unpacker, sqlx::Error> {
        let mut u = Unpacker::new();
        for id in u.missing(ids) {
            let d = by_id(tx, id).await?;
            u.hold(d);
        }
        Ok(u)
    }

    /// The same on a direct SQLite connection.
    pub fn for_direct<'a>(
        c: &rusqlite::Connection,
        ids: impl Iterator<Item = &'a Option<i64>>,
    ) -> rusqlite::Result<Result<Unpacker, sqlx::Error>> {
        let mut u = Unpacker::new();
        for id in u.missing(ids) {
            if let Some(d) = Dict::cached(id) {
                u.hold(d);
                continue;
            }
            let row: Option<Vec<u8>> = c
                .query_row("SELECT bytes FROM note_dicts WHERE id = ?1", [id], |r| {
                    r.get(0)
                })
                .map(Some)
                .or_else(|e| match e {
                    rusqlite::Error::QueryReturnedNoRows => Ok(None),
                    e => Err(e),
                })?;
            let Some(bytes) = row else {
                return Ok(Err(missing(id)));
            };
            match Dict::prepare(&bytes) {
                Ok(d) => u.hold(Dict::keep(d)),
                Err(e) => return Ok(Err(e)),
            }
        }
        Ok(Ok(u))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` notes of the register's form: the simulator's (its stream's first notes).
    fn notes(n: usize) -> Vec<String> {
        let sim = crate::sim::Simulator::new(crate::sim::SimOptions {
            seed: 7,
            actions: n * 2,
            ..Default::default()
        });
        let out: Vec<String> = sim
            .truth_all()
            .into_iter()
            .filter_map(|a| a.note)
            .filter(|n| !n.contains(ERASURE_MARK))
            .take(n)
            .collect();
        assert_eq!(out.len(), n, "the stream has {n} notes");
        out
    }

    /// A dictionary holds no debtor's data: it is trained on the notes as erasure
    /// redacts them. (Without that, a 64 KiB dictionary of the register's notes held
    /// whole debtor blocks: birth numbers, dates of birth, addresses.)
    #[test]
    fn a_dictionary_holds_no_debtors_data() {
        let n = notes(3_000);
        let refs: Vec<&str> = n.iter().map(String::as_str).collect();
        let bytes = train(&refs).expect("enough to train on");
        let mut needles = std::collections::BTreeSet::new();
        for note in &n {
            let Ok(d) = crate::source::parse::parse_note(note) else {
                continue;
            };
            let Some(p) = d.person.filter(|p| p.role.as_deref() == Some("DLUŽNÍK")) else {
                continue;
            };
            for v in [p.birth_number, p.birth_date, Some(p.id)]
                .into_iter()
                .flatten()
            {
                if v.trim().len() >= 6 {
                    needles.insert(v.trim().to_string());
                }
            }
        }
        assert!(needles.len() > 100, "{} debtor values", needles.len());
        let found: Vec<&String> = needles
            .iter()
            .filter(|v| bytes.windows(v.len()).any(|w| w == v.as_bytes()))
            .collect();
        assert!(
            found.is_empty(),
            "debtors' values in the dictionary: {found:?}"
        );
    }

    #[test]
    fn a_trained_dictionary_round_trips_and_shrinks() {
        let n = notes(2_000);
        let refs: Vec<&str> = n.iter().map(String::as_str).collect();
        let bytes = train(&refs).expect("enough to train on");
        assert_eq!(&bytes[..4], &DICT_MAGIC);
        let d = Dict::keep(Dict::prepare(&bytes).unwrap());
        let mut p = Packer::new(Some(d.clone()));
        let mut u = Unpacker::new();
        u.hold(d.clone());
        let (mut raw, mut packed) = (0, 0);
        for (i, note) in n.iter().enumerate() {
            let row = p.pack(Some(note));
            assert!(row.text.is_none(), "note {i} compressed");
            assert_eq!(row.dict, Some(d.id));
            raw += note.len();
            packed += row.z.as_ref().unwrap().len();
            assert_eq!(
                u.unpack(i as i64, row).unwrap().as_deref(),
                Some(note.as_str())
            );
        }
        assert!(packed * 4 < raw, "{raw} -> {packed}");
    }

    #[test]
    fn erasure_marks_and_absent_notes_stay_as_they_are() {
        let n = notes(2_000);
        let refs: Vec<&str> = n.iter().map(String::as_str).collect();
        let d = Dict::keep(Dict::prepare(&train(&refs).unwrap()).unwrap());
        let mut p = Packer::new(Some(d));
        let struck = format!("{}<datumVyskrtnuti>2024-01-01</datumVyskrtnuti>", n[5]);
        assert!(struck.contains(ERASURE_MARK));
        assert_eq!(p.pack(Some(&struck)).text.as_deref(), Some(struck.as_str()));
        assert_eq!(p.pack(None), AtRest::default());
        // No dictionary: text.
        let mut plain = Packer::new(None);
        assert_eq!(plain.pack(Some(&n[0])).text.as_deref(), Some(n[0].as_str()));
    }

    #[test]
    fn a_damaged_frame_or_dictionary_is_an_error_not_a_note() {
        let n = notes(2_000);
        let refs: Vec<&str> = n.iter().map(String::as_str).collect();
        let bytes = train(&refs).unwrap();
        let d = Dict::keep(Dict::prepare(&bytes).unwrap());
        let mut p = Packer::new(Some(d.clone()));
        let mut row = p.pack(Some(&n[1]));
        let z = row.z.as_mut().unwrap();
        let mid = z.len() / 2;
        z[mid] ^= 0x55;
        let mut u = Unpacker::new();
        u.hold(d);
        assert!(u.unpack(1, row).is_err());
        // A dictionary whose bytes are not those its ID names.
        let mut other = bytes.clone();
        let last = other.len() - 1;
        other[last] ^= 1;
        assert!(Dict::prepare(&other).is_err());
        // A row naming a dictionary the unpacker does not hold.
        let row = AtRest {
            text: None,
            z: Some(vec![1, 2, 3]),
            dict: Some(7),
        };
        assert!(Unpacker::new().unpack(2, row).is_err());
    }

    #[test]
    fn too_little_to_train_on_is_none() {
        assert!(train(&["<a/>"; 10]).is_none());
    }
}
