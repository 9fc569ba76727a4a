//! Typed form of what the ISIR service publishes: one `Action` per `data` record and the
//! `Detail` parsed from its `poznamka`.
//!
//! Owns the shape of the data only. Values are kept verbatim as the source sent them
//! (codes, dates with their offsets, `idOsoby` with its padding): interpreting them is the
//! projections' job, and this module must never normalise or map a code to a default.

use serde::{Deserialize, Serialize};

/// One public action of the register, all ten fields of a `data` record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Action {
    /// `id`: the global order and the replica's only cursor.
    pub id: i64,
    /// `datumZalozeniUdalosti`, verbatim (e.g. `2026-03-02T09:14:05.000+01:00`).
    pub created: String,
    /// `datumZverejneniUdalosti`, verbatim. Not ordered by `id`.
    pub published: String,
    /// `dokumentUrl`.
    pub document_url: Option<String>,
    /// `spisovaZnacka`, e.g. `INS 4711/2026`.
    pub case_number: String,
    /// `typUdalosti`, the numeric action-type code as sent.
    pub type_code: String,
    /// `popisUdalosti`, the type's name at the time of the action.
    pub type_name: String,
    /// `oddil`: `A`, `B`, `C1`, `D`, `P1` ...
    pub section: Option<String>,
    /// `cisloVOddilu`.
    pub number_in_section: Option<i64>,
    /// `poznamka`, unescaped: the raw detail document exactly as published.
    pub note: Option<String>,
}

/// The parsed `poznamka` of an action, or why it could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Note {
    Absent,
    Parsed(Box<Detail>),
    /// The raw text is kept in `Action::note`; this says why it was not understood.
    Unparsed {
        error: String,
    },
}

/// A `T`/`F` flag, with any other value kept verbatim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Flag {
    T,
    F,
    Other(String),
}

impl Flag {
    pub fn from_text(s: &str) -> Flag {
        match s {
            "T" => Flag::T,
            "F" => Flag::F,
            other => Flag::Other(other.to_string()),
        }
    }
    pub fn as_str(&self) -> &str {
        match self {
            Flag::T => "T",
            Flag::F => "F",
            Flag::Other(s) => s,
        }
    }
    pub fn is_true(&self) -> bool {
        matches!(self, Flag::T)
    }
}

/// The detail document (`udalost`) carried by `poznamka`. Dates are verbatim
/// (`2015-08-21+02:00`); see [`date_part`] to read them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Detail {
    /// Attribute `verzeXsd`: the schema version the record was written with.
    pub schema_version: Option<String>,
    /// `idOsobyPuvodce`: the originating court (or `CCA`), verbatim.
    pub origin: Option<String>,
    /// `vec`: the case block.
    pub case: Option<CaseBlock>,
    /// `osoba`: a person (action types 1, 2, 625).
    pub person: Option<Person>,
    /// `cisUdalost`: a change of the action-type code list (type 4).
    pub code_list: Option<CodeListEntry>,
    /// `datumPravniMoci`: date of legal force.
    pub legal_force_date: Option<String>,
    /// `priznakAnVedlejsiUdalost`: a secondary action for the same slot.
    pub secondary_action: Option<Flag>,
    /// `priznakAnVedlejsiDokument`: a secondary document for the same slot.
    pub secondary_document: Option<Flag>,
    /// `druhOddilPrihl`: the kind of claim section.
    pub claim_section_kind: Option<String>,
    /// `cisloOddiluPrihl`: the claim section number.
    pub claim_section_number: Option<String>,
    /// `osobaVeritel`: the creditor of a claim.
    pub creditor: Option<String>,
    /// `priznakPlatnyVeritel`.
    pub valid_creditor: Option<Flag>,
    /// `priznakMylnyZapisVeritelPohled`.
    pub erroneous_claim_entry: Option<Flag>,
    /// `datumUstanoveniSpravce`: when the administrator was appointed.
    pub administrator_appointed: Option<String>,
    /// `datumZverejneniOpraveneUdalosti`: this action corrects one published then.
    pub corrected_published: Option<String>,
    /// `datumVyskrtnuti`: struck out of the register (§ 425 erasure).
    pub struck_out: Option<String>,
    /// `idOsoby1`, `idOsoby2`: persons joined or separated.
    pub person_id1: Option<String>,
    pub person_id2: Option<String>,
    /// `datumSpojeni`, `datumOddeleni`: cases joined / separated.
    pub joined: Option<String>,
    pub separated: Option<String>,
    /// `datumUdalostZrusena`: this action was annulled.
    pub annulled: Option<String>,
    /// `bcVecICm`, `druhVecICm`, `rocnikICm`, `senatICm`: incidental dispute.
    pub incidental_number: Option<String>,
    pub incidental_kind: Option<String>,
    pub incidental_year: Option<String>,
    pub incidental_senate: Option<String>,
}

/// `vec`: the state of the case. Can be empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaseBlock {
    /// `druhStavRizeni`, verbatim (`ÚPADEK`, `ZRUŠENO VS`, unknown codes too).
    pub state: Option<String>,
    /// `datumVecZrusena`.
    pub annulled: Option<String>,
    /// `datumKonecLhutyPrihlasek`: the deadline for claims.
    pub claims_deadline: Option<String>,
    /// `datumSkonceniVeci`.
    pub ended: Option<String>,
}

/// `osoba`: a person of the case.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Person {
    /// `idOsoby`, byte-exact including its space padding.
    pub id: String,
    /// `druhRoleVRizeni`: `DLUŽNÍK`, `VĚŘITEL`, `VĚŘIT-NAVR`, `SPRÁVCE` ...
    pub role: Option<String>,
    /// `druhSpravce`.
    pub administrator_kind: Option<String>,
    /// `nazevOsoby`: surname or company name.
    pub name: Option<String>,
    /// `nazevOsobyObchodni`.
    pub trade_name: Option<String>,
    /// `druhOsoby`: `F`, `P`, `PODNIKATEL`, `SPRÁV_INS` ...
    pub kind: Option<String>,
    /// `druhPravniForma`.
    pub legal_form: Option<String>,
    /// `jmeno`.
    pub first_name: Option<String>,
    /// `titulPred`, `titulZa`.
    pub title_before: Option<String>,
    pub title_after: Option<String>,
    /// `ic`: IČO.
    pub ico: Option<String>,
    /// `dic`.
    pub dic: Option<String>,
    /// `rc`: birth number.
    pub birth_number: Option<String>,
    /// `adresa`, repeated.
    pub addresses: Vec<Address>,
    /// `datumNarozeni`.
    pub birth_date: Option<String>,
    /// `datumOsobaVeVeciZrusena`: no longer a party of the case from this date.
    pub left_case: Option<String>,
}

/// `adresa`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Address {
    /// `druhAdresy`: `TRVALÁ`, `SÍDLO FY`, ...
    pub kind: Option<String>,
    pub valid_from: Option<String>,
    pub valid_to: Option<String>,
    pub city: Option<String>,
    pub street: Option<String>,
    pub house_number: Option<String>,
    pub district: Option<String>,
    pub country: Option<String>,
    pub postcode: Option<String>,
    pub phone: Option<String>,
    pub fax: Option<String>,
    pub text: Option<String>,
    pub id: Option<String>,
}

/// `cisUdalost`: an entry of the action-type code list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeListEntry {
    pub id: Option<String>,
    pub name: Option<String>,
    pub created: Option<String>,
    pub cancelled: Option<String>,
    pub internal: Option<Flag>,
}

/// The calendar date of a detail date such as `2015-08-21+02:00`.
pub fn date_part(s: &str) -> Option<chrono::NaiveDate> {
    let d = s.get(..10)?;
    chrono::NaiveDate::parse_from_str(d, "%Y-%m-%d").ok()
}

/// An action with its parsed detail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    #[serde(flatten)]
    pub action: Action,
    pub detail: Note,
}

/// Why a record of a page was not stored as it came ([`Spoiled`]). The label is what
/// metrics, logs, the quarantine table and the runbook use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpoilReason {
    /// Repaired and stored: a byte run that was not UTF-8 decoded as windows-1250.
    Cp1250,
    /// Held back: bytes that are neither UTF-8 nor windows-1250 text.
    Encoding,
    /// Held back: a field the schema requires is missing (or the ID is).
    MissingField,
    /// Held back: a value of the wrong type (`cisloVOddilu` not a number, `id` not a number).
    BadValue,
    /// Held back: its ID is not above the one before it in the page (or the ID asked after).
    OutOfOrder,
}

impl SpoilReason {
    pub const ALL: [SpoilReason; 5] = [
        SpoilReason::Cp1250,
        SpoilReason::Encoding,
        SpoilReason::MissingField,
        SpoilReason::BadValue,
        SpoilReason::OutOfOrder,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            SpoilReason::Cp1250 => "cp1250",
            SpoilReason::Encoding => "encoding",
            SpoilReason::MissingField => "missing_field",
            SpoilReason::BadValue => "bad_value",
            SpoilReason::OutOfOrder => "out_of_order",
        }
    }
    pub fn parse(s: &str) -> Option<SpoilReason> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }
    /// Whether the record was repaired and stored (otherwise it is held back).
    pub fn is_repair(self) -> bool {
        self == SpoilReason::Cp1250
    }
}

/// A record of a page that did not arrive sound: repaired (stored in the replica, its raw
/// bytes kept beside it) or held back (only its raw bytes kept, in the quarantine).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spoiled {
    /// The action ID, where one could be read.
    pub id: Option<i64>,
    /// The case number, where one could be read.
    pub case_number: Option<String>,
    pub reason: SpoilReason,
    /// A short explanation naming the field, never its value (no personal data).
    pub detail: String,
    /// The record's bytes exactly as received, `<data>` to `</data>`.
    pub raw: Vec<u8>,
}

/// A parsed page of the actions-after-ID operation, validated: the sound (and repaired)
/// records in `records` ascend and are all above `after`; what was held back is in
/// `spoiled` beside the repaired records' raw bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The `idPodnetu` that was asked for.
    pub after: i64,
    pub records: Vec<Record>,
    /// The page's spoiled records, in the order received (repaired and held back).
    pub spoiled: Vec<Spoiled>,
}

impl Page {
    /// The ID the checkpoint moves to when this page is stored: the highest ID of the
    /// page, stored or held back (a held-back record is accounted for in the quarantine).
    pub fn last_id(&self) -> Option<i64> {
        let stored = self.records.last().map(|r| r.action.id);
        let held = self
            .spoiled
            .iter()
            .filter(|s| !s.reason.is_repair())
            .filter_map(|s| s.id)
            .filter(|id| *id > self.after)
            .max();
        stored.max(held)
    }
    /// Records received, stored or held back.
    pub fn len(&self) -> usize {
        self.records.len() + self.held().count()
    }
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.spoiled.is_empty()
    }
    pub fn actions(&self) -> impl Iterator<Item = &Action> {
        self.records.iter().map(|r| &r.action)
    }
    /// The records held back (not stored in the replica).
    pub fn held(&self) -> impl Iterator<Item = &Spoiled> {
        self.spoiled.iter().filter(|s| !s.reason.is_repair())
    }
    /// The records repaired (stored, their raw bytes kept).
    pub fn repaired(&self) -> impl Iterator<Item = &Spoiled> {
        self.spoiled.iter().filter(|s| s.reason.is_repair())
    }
}
