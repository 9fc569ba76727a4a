//! The read models' published shape: the documents the projections hold and serve
//! (a case, a person in a case), the code values their filters take, and the timeline
//! table's columns; [`columns`] gives them as flat rows (CSV).
//!
//! The one door to the read models for everything that reads them: `read`, `api`,
//! `web`, `export` and `watchlist` import these, never a builder of `projection`. The
//! builders fill the same types (their `apply` methods live with the builders).
//! Owns shapes only: no I/O, no SQL, no masking (that is `crate::privacy`'s).

use serde::{Deserialize, Serialize};

use crate::source::model::Address;

pub mod columns;
pub mod fold;
pub mod keys;
pub mod meta;
pub mod party_cells;

/// The states a case takes, as the register names them (`stavRizeni`).
pub const KNOWN_STATES: &[&str] = &[
    "NEVYRIZENA",
    "MORATORIUM",
    "ÚPADEK",
    "KONKURS",
    "ODDLUŽENÍ",
    "REORGANIZ",
    "VYRIZENA",
    "PRAVOMOCNA",
    "ODSKRTNUTA",
    "ZRUŠENO VS",
    "K-PO ZRUŠ.",
    "OBZIVLA",
    "MYLNÝ ZÁP.",
    "NEVYR-POST",
];

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct StateChange {
    pub action_id: i64,
    pub state: String,
    pub published: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct LegalForce {
    pub action_id: i64,
    pub date: String,
    pub section: Option<String>,
    pub number: Option<i64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct PartyRef {
    pub court: Option<String>,
    pub person_id: String,
    pub kind: Option<String>,
    pub name: Option<String>,
    pub first_name: Option<String>,
    pub title_before: Option<String>,
    pub ico: Option<String>,
    /// For an administrator: when appointed (`datumUstanoveniSpravce`).
    pub appointed: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct CaseDoc {
    pub case_number: String,
    pub number: Option<i64>,
    pub year: Option<i64>,
    pub court_code: Option<String>,
    pub court_short: Option<String>,
    pub court_name: Option<String>,
    pub state: Option<String>,
    pub states: Vec<StateChange>,
    pub first_action_id: i64,
    pub first_published: String,
    pub latest_action_id: i64,
    pub latest_published: String,
    /// The Prague date of the first action's publication.
    pub opened: String,
    pub claims_deadline: Option<String>,
    pub ended: Option<String>,
    pub legal_force: Vec<LegalForce>,
    pub debtors: Vec<PartyRef>,
    pub debtor_kind: Option<String>,
    pub administrator: Option<PartyRef>,
    /// The latest `datumUstanoveniSpravce` seen (the decision may precede the person).
    pub administrator_appointed: Option<String>,
    pub documents: i64,
    pub claims: i64,
    pub erased: bool,
    pub erased_at: Option<String>,
    pub erased_action_id: Option<i64>,
}

/// The roles a person takes in a case (`druhRoleVRizeni`).
pub const KNOWN_ROLES: &[&str] = &["DLUŽNÍK", "VĚŘITEL", "VĚŘIT-NAVR", "SPRÁVCE"];

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct PartyDoc {
    pub case_number: String,
    pub court: String,
    pub person_id: String,
    pub role: Option<String>,
    pub administrator_kind: Option<String>,
    pub kind: Option<String>,
    pub name: Option<String>,
    pub trade_name: Option<String>,
    pub first_name: Option<String>,
    pub title_before: Option<String>,
    pub title_after: Option<String>,
    pub legal_form: Option<String>,
    pub ico: Option<String>,
    pub dic: Option<String>,
    pub birth_number: Option<String>,
    pub birth_date: Option<String>,
    pub addresses: Vec<Address>,
    /// `datumOsobaVeVeciZrusena`: no longer a party from this date.
    pub left_case: Option<String>,
    pub first_action_id: i64,
    pub latest_action_id: i64,
}

/// One action of a case's timeline, as the timeline table holds it and the API serves it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct Event {
    pub action_id: i64,
    pub case_number: String,
    pub court: Option<String>,
    pub type_code: String,
    /// The type's name from the code list when the action was applied (or the
    /// source's when unknown).
    pub type_name: String,
    /// `popisUdalosti` as published.
    pub source_type_name: String,
    pub section: Option<String>,
    pub number_in_section: Option<i64>,
    /// Link to the document in the register, when the action has one.
    pub document_url: Option<String>,
    pub published: String,
    pub created: String,
    /// The first action of this document slot (itself when it opened the slot).
    pub slot_action_id: Option<i64>,
    pub secondary_action: bool,
    pub secondary_document: bool,
    pub legal_force_date: Option<String>,
    pub corrected_published: Option<String>,
    pub annulled: Option<String>,
}

/// The register's document links all begin with this (`dokumentUrl`, PROTOCOL.md): the
/// timeline table stores what follows it (`document_id`), not the link, and its readers
/// put the link back together ([`columns::timeline_sql`]).
pub const DOCUMENT_URL_PREFIX: &str =
    "https://isir.justice.cz:8443/isir_public_ws/doc/Document?idDokument=";

/// The cells of an [`Event`] that the timeline table stores short, equal on reading
/// ([`columns::timeline_sql`]) to the event's fields:
/// - `type_name` is NULL when it is the source's name (`source_type_name`), as it is for
///   nearly every action;
/// - a link that begins with [`DOCUMENT_URL_PREFIX`] is stored as what follows it in
///   `document_id` (`document_url` NULL); any other link whole in `document_url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimelineCells<'a> {
    pub type_name: Option<&'a str>,
    pub document_url: Option<&'a str>,
    pub document_id: Option<&'a str>,
}

impl<'a> TimelineCells<'a> {
    pub fn of(e: &'a Event) -> Self {
        let type_name = (e.type_name != e.source_type_name).then_some(e.type_name.as_str());
        let url = e.document_url.as_deref();
        let id = url.and_then(|u| u.strip_prefix(DOCUMENT_URL_PREFIX));
        TimelineCells {
            type_name,
            document_url: if id.is_some() { None } else { url },
            document_id: id,
        }
    }
}

/// The columns of the timeline (one row an action) as its readers see them, in their
/// order: the table stores `type_name` and `document_url` short ([`TimelineCells`]), with
/// `document_id` after these, and its view serves these whole.
pub const TIMELINE_COLUMNS: &[&str] = &[
    "action_id",
    "case_number",
    "court",
    "type_code",
    "type_name",
    "source_type_name",
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
