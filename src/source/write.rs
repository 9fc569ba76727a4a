//! Writing the service's messages: requests (for the client) and answers (for the
//! simulator and for round-trip tests). The exact inverse of `parse`.
//!
//! Owns the wire shape: envelope, namespaces, unqualified children, the escaped
//! `poznamka`. It never decides what to send; callers do.

use std::fmt::Write;

use quick_xml::escape::escape;

use super::model::*;
use super::parse::{NOTE_NS, SOAP_ENV_NS, TYPES_NS};

/// The request body of the actions-after-ID operation.
pub fn request_after_id(after: i64) -> String {
    format!(
        "<soapenv:Envelope xmlns:soapenv=\"{SOAP_ENV_NS}\" xmlns:typ=\"{TYPES_NS}\"><soapenv:Body><typ:getIsirWsPublicIdDataRequest><idPodnetu>{after}</idPodnetu></typ:getIsirWsPublicIdDataRequest></soapenv:Body></soapenv:Envelope>"
    )
}

/// The request body of the newest-ID operation.
pub fn request_last_id() -> String {
    format!(
        "<soapenv:Envelope xmlns:soapenv=\"{SOAP_ENV_NS}\" xmlns:typ=\"{TYPES_NS}\"><soapenv:Body><typ:getIsirWsPublicPosledniIdDataRequest/></soapenv:Body></soapenv:Envelope>"
    )
}

const HEAD: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><S:Envelope xmlns:S=\"http://schemas.xmlsoap.org/soap/envelope/\"><S:Body>";
const TAIL: &str = "</S:Body></S:Envelope>";

fn leaf(out: &mut String, name: &str, v: &str) {
    out.push('<');
    out.push_str(name);
    out.push('>');
    out.push_str(&escape(v));
    out.push_str("</");
    out.push_str(name);
    out.push('>');
}

fn opt(out: &mut String, name: &str, v: &Option<String>) {
    if let Some(v) = v {
        leaf(out, name, v);
    }
}

fn flag(out: &mut String, name: &str, v: &Option<Flag>) {
    if let Some(v) = v {
        leaf(out, name, v.as_str());
    }
}

/// Appends one `data` record.
pub fn write_action(out: &mut String, a: &Action) {
    out.push_str("<data>");
    let _ = write!(out, "<id>{}</id>", a.id);
    leaf(out, "datumZalozeniUdalosti", &a.created);
    leaf(out, "datumZverejneniUdalosti", &a.published);
    opt(out, "dokumentUrl", &a.document_url);
    leaf(out, "spisovaZnacka", &a.case_number);
    leaf(out, "typUdalosti", &a.type_code);
    leaf(out, "popisUdalosti", &a.type_name);
    opt(out, "oddil", &a.section);
    if let Some(n) = a.number_in_section {
        let _ = write!(out, "<cisloVOddilu>{n}</cisloVOddilu>");
    }
    opt(out, "poznamka", &a.note);
    out.push_str("</data>");
}

/// A whole answer of the actions-after-ID operation with status OK.
pub fn data_response<'a>(actions: impl IntoIterator<Item = &'a Action>) -> String {
    let mut out = String::with_capacity(64 * 1024);
    out.push_str(HEAD);
    let _ = write!(
        out,
        "<ns2:getIsirWsPublicDataResponse xmlns:ns2=\"{TYPES_NS}\">"
    );
    for a in actions {
        write_action(&mut out, a);
    }
    out.push_str("<status><stav>OK</stav></status></ns2:getIsirWsPublicDataResponse>");
    out.push_str(TAIL);
    out
}

/// A whole answer with status OK cut where its records go: (what comes before the
/// first `data`, what comes after the last). The simulator splices spoiled records in;
/// the quarantine wraps a kept record in it to parse it again.
pub fn data_response_around() -> (String, String) {
    let clean = data_response(std::iter::empty());
    let split = clean.find("<status>").unwrap_or(clean.len());
    (clean[..split].to_string(), clean[split..].to_string())
}

/// An answer with status `CHYBA` for either operation.
pub fn chyba_response(last_id_op: bool, code: &str, text: &str) -> String {
    let wrapper = if last_id_op {
        "getIsirWsPublicPosledniDataResponse"
    } else {
        "getIsirWsPublicDataResponse"
    };
    let mut out = String::new();
    out.push_str(HEAD);
    let _ = write!(
        out,
        "<ns2:{wrapper} xmlns:ns2=\"{TYPES_NS}\"><status><stav>CHYBA</stav>"
    );
    leaf(&mut out, "kodChyby", code);
    leaf(&mut out, "popisChyby", text);
    let _ = write!(out, "</status></ns2:{wrapper}>");
    out.push_str(TAIL);
    out
}

/// A SOAP 1.1 Fault.
pub fn fault_response(code: &str, text: &str) -> String {
    let mut out = String::new();
    out.push_str(HEAD);
    out.push_str("<S:Fault>");
    leaf(&mut out, "faultcode", code);
    leaf(&mut out, "faultstring", text);
    out.push_str("</S:Fault>");
    out.push_str(TAIL);
    out
}

/// An answer of the newest-ID operation.
pub fn last_id_response(id: i64) -> String {
    format!(
        "{HEAD}<ns2:getIsirWsPublicPosledniDataResponse xmlns:ns2=\"{TYPES_NS}\"><cisloPosledniId>{id}</cisloPosledniId><status><stav>OK</stav></status></ns2:getIsirWsPublicPosledniDataResponse>{TAIL}"
    )
}

/// The `poznamka` document of a detail, unescaped (as [`Action::note`] holds it).
pub fn note_xml(d: &Detail) -> String {
    let mut out = String::with_capacity(1024);
    let ver = d.schema_version.as_deref().unwrap_or("1_10");
    let _ = write!(
        out,
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?><ns2:udalost xmlns:ns2=\"{NOTE_NS}\" xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\""
    );
    if d.schema_version.is_some() {
        let _ = write!(out, " verzeXsd=\"{}\"", escape(ver));
    }
    let _ = write!(
        out,
        " xsi:schemaLocation=\"https://isir.justice.cz:8443/isir_public_ws/xsd/poznamka_{}.xsd\">",
        escape(ver)
    );
    opt(&mut out, "idOsobyPuvodce", &d.origin);
    if let Some(c) = &d.case {
        out.push_str("<vec>");
        opt(&mut out, "druhStavRizeni", &c.state);
        opt(&mut out, "datumVecZrusena", &c.annulled);
        opt(&mut out, "datumKonecLhutyPrihlasek", &c.claims_deadline);
        opt(&mut out, "datumSkonceniVeci", &c.ended);
        out.push_str("</vec>");
    }
    if let Some(p) = &d.person {
        write_person(&mut out, p);
    }
    if let Some(c) = &d.code_list {
        out.push_str("<cisUdalost>");
        opt(&mut out, "idCisUdalostiProWs", &c.id);
        opt(&mut out, "popisCisUdalosti", &c.name);
        opt(&mut out, "datumZalozeniCisUdalosti", &c.created);
        opt(&mut out, "datumZruseniCisUdalosti", &c.cancelled);
        flag(&mut out, "priznakAnInterniCisUdalost", &c.internal);
        out.push_str("</cisUdalost>");
    }
    opt(&mut out, "datumPravniMoci", &d.legal_force_date);
    flag(&mut out, "priznakAnVedlejsiUdalost", &d.secondary_action);
    flag(&mut out, "priznakAnVedlejsiDokument", &d.secondary_document);
    opt(&mut out, "druhOddilPrihl", &d.claim_section_kind);
    opt(&mut out, "cisloOddiluPrihl", &d.claim_section_number);
    opt(&mut out, "osobaVeritel", &d.creditor);
    flag(&mut out, "priznakPlatnyVeritel", &d.valid_creditor);
    flag(
        &mut out,
        "priznakMylnyZapisVeritelPohled",
        &d.erroneous_claim_entry,
    );
    opt(
        &mut out,
        "datumUstanoveniSpravce",
        &d.administrator_appointed,
    );
    opt(
        &mut out,
        "datumZverejneniOpraveneUdalosti",
        &d.corrected_published,
    );
    opt(&mut out, "datumVyskrtnuti", &d.struck_out);
    opt(&mut out, "idOsoby1", &d.person_id1);
    opt(&mut out, "idOsoby2", &d.person_id2);
    opt(&mut out, "datumSpojeni", &d.joined);
    opt(&mut out, "datumOddeleni", &d.separated);
    opt(&mut out, "datumUdalostZrusena", &d.annulled);
    opt(&mut out, "bcVecICm", &d.incidental_number);
    opt(&mut out, "druhVecICm", &d.incidental_kind);
    opt(&mut out, "rocnikICm", &d.incidental_year);
    opt(&mut out, "senatICm", &d.incidental_senate);
    out.push_str("</ns2:udalost>");
    out
}

fn write_person(out: &mut String, p: &Person) {
    out.push_str("<osoba>");
    leaf(out, "idOsoby", &p.id);
    opt(out, "druhRoleVRizeni", &p.role);
    opt(out, "druhSpravce", &p.administrator_kind);
    opt(out, "nazevOsoby", &p.name);
    opt(out, "nazevOsobyObchodni", &p.trade_name);
    opt(out, "druhOsoby", &p.kind);
    opt(out, "druhPravniForma", &p.legal_form);
    opt(out, "jmeno", &p.first_name);
    opt(out, "titulPred", &p.title_before);
    opt(out, "titulZa", &p.title_after);
    opt(out, "ic", &p.ico);
    opt(out, "dic", &p.dic);
    opt(out, "rc", &p.birth_number);
    for a in &p.addresses {
        out.push_str("<adresa>");
        opt(out, "druhAdresy", &a.kind);
        opt(out, "datumPobytOd", &a.valid_from);
        opt(out, "datumPobytDo", &a.valid_to);
        opt(out, "mesto", &a.city);
        opt(out, "ulice", &a.street);
        opt(out, "cisloPopisne", &a.house_number);
        opt(out, "okres", &a.district);
        opt(out, "zeme", &a.country);
        opt(out, "psc", &a.postcode);
        opt(out, "telefon", &a.phone);
        opt(out, "fax", &a.fax);
        opt(out, "textAdresy", &a.text);
        opt(out, "idAdresy", &a.id);
        out.push_str("</adresa>");
    }
    opt(out, "datumNarozeni", &p.birth_date);
    opt(out, "datumOsobaVeVeciZrusena", &p.left_case);
    out.push_str("</osoba>");
}
