//! The `poznamka` detail document: its parser, and the details of stored actions parsed
//! again for the projections. Matches on local names, ignores unknown elements, keeps
//! every value verbatim; a broken detail never fails a page. Never performs I/O.

use quick_xml::events::Event;

use super::xml::{Doc, XmlError, children, is_blank, leaf_text, local, opt_leaf, unescape};
use crate::source::model::*;

/// Stored actions with their details parsed again (projections read the replica so).
pub fn records(actions: Vec<Action>) -> Vec<Record> {
    actions
        .into_iter()
        .map(|a| {
            let detail = note_of(a.note.as_deref());
            Record { action: a, detail }
        })
        .collect()
}

/// Parses an optional raw `poznamka` into a [`Note`]; a broken detail never fails the page.
pub fn note_of(raw: Option<&str>) -> Note {
    match raw {
        None => Note::Absent,
        Some(s) => match parse_detail(s) {
            Ok(d) => Note::Parsed(d),
            Err(error) => Note::Unparsed { error },
        },
    }
}

// ---------------------------------------------------------------------------------------
// The detail document

/// Parses an unescaped `poznamka` document. Unknown elements are ignored.
pub fn parse_note(xml: &str) -> Result<Detail, String> {
    parse_detail(xml).map(|d| *d)
}

/// [`parse_note`], built in place on the heap (a [`Detail`] is over a kilobyte).
fn parse_detail(xml: &str) -> Result<Box<Detail>, String> {
    let mut r = Doc::new(xml);
    note_doc(&mut r).map_err(|e| match e {
        XmlError::Eof => "poznamka ends before its document closes".to_string(),
        XmlError::Syntax(m) => format!(
            "poznamka is not well-formed XML at byte {}: {m}",
            r.buffer_position()
        ),
        XmlError::Content(m) => format!("poznamka: {m}"),
    })
}

fn note_doc(r: &mut Doc) -> Result<Box<Detail>, XmlError> {
    let mut d = Box::<Detail>::default();
    loop {
        match r.read_event()? {
            Event::Start(e) => {
                if e.local_name().as_ref() != b"udalost" {
                    return Err(XmlError::Content(format!(
                        "root element <{}> is not udalost",
                        local(&e)
                    )));
                }
                for a in e.attributes().with_checks(false) {
                    let a = a.map_err(|e| XmlError::Syntax(e.to_string()))?;
                    if a.key.as_ref() == b"verzeXsd" {
                        d.schema_version = Some(unescape(r.text(&a.value)?)?.into_owned());
                        break;
                    }
                }
                break;
            }
            Event::DocType(_) => return Err(XmlError::Content("DOCTYPE is not allowed".into())),
            Event::Eof => return Err(XmlError::Eof),
            Event::Text(t) if is_blank(&t) => {}
            Event::Text(_) | Event::CData(_) => {
                return Err(XmlError::Content("text before the root element".into()));
            }
            _ => {}
        }
    }
    loop {
        match r.read_event()? {
            Event::Start(e) => match e.local_name().as_ref() {
                b"idOsobyPuvodce" => opt_leaf(r, &mut d.origin)?,
                b"vec" => d.case = Some(case_block(r)?),
                b"osoba" => person(r, d.person.insert(Person::default()))?,
                b"cisUdalost" => d.code_list = Some(code_list(r)?),
                b"datumPravniMoci" => opt_leaf(r, &mut d.legal_force_date)?,
                b"priznakAnVedlejsiUdalost" => {
                    d.secondary_action = Some(Flag::from_text(&leaf_text(r)?))
                }
                b"priznakAnVedlejsiDokument" => {
                    d.secondary_document = Some(Flag::from_text(&leaf_text(r)?))
                }
                b"druhOddilPrihl" => opt_leaf(r, &mut d.claim_section_kind)?,
                b"cisloOddiluPrihl" => opt_leaf(r, &mut d.claim_section_number)?,
                b"osobaVeritel" => opt_leaf(r, &mut d.creditor)?,
                b"priznakPlatnyVeritel" => d.valid_creditor = Some(Flag::from_text(&leaf_text(r)?)),
                b"priznakMylnyZapisVeritelPohled" => {
                    d.erroneous_claim_entry = Some(Flag::from_text(&leaf_text(r)?))
                }
                b"datumUstanoveniSpravce" => opt_leaf(r, &mut d.administrator_appointed)?,
                b"datumZverejneniOpraveneUdalosti" => opt_leaf(r, &mut d.corrected_published)?,
                b"datumVyskrtnuti" => opt_leaf(r, &mut d.struck_out)?,
                b"idOsoby1" => opt_leaf(r, &mut d.person_id1)?,
                b"idOsoby2" => opt_leaf(r, &mut d.person_id2)?,
                b"datumSpojeni" => opt_leaf(r, &mut d.joined)?,
                b"datumOddeleni" => opt_leaf(r, &mut d.separated)?,
                b"datumUdalostZrusena" => opt_leaf(r, &mut d.annulled)?,
                b"bcVecICm" => opt_leaf(r, &mut d.incidental_number)?,
                b"druhVecICm" => opt_leaf(r, &mut d.incidental_kind)?,
                b"rocnikICm" => opt_leaf(r, &mut d.incidental_year)?,
                b"senatICm" => opt_leaf(r, &mut d.incidental_senate)?,
                _ => r.read_to_end(e.name())?,
            },
            Event::End(_) => break,
            Event::Eof => return Err(XmlError::Eof),
            _ => {}
        }
    }
    // Only whitespace, comments or processing instructions may follow the root.
    loop {
        match r.read_event()? {
            Event::Eof => return Ok(d),
            Event::Start(_) => return Err(XmlError::Content("a second root element".into())),
            Event::Text(t) if !is_blank(&t) => {
                return Err(XmlError::Content("text after the root element".into()));
            }
            _ => {}
        }
    }
}

fn case_block(r: &mut Doc) -> Result<CaseBlock, XmlError> {
    let mut c = CaseBlock::default();
    children(r, |r, name| {
        let slot = match name {
            b"druhStavRizeni" => &mut c.state,
            b"datumVecZrusena" => &mut c.annulled,
            b"datumKonecLhutyPrihlasek" => &mut c.claims_deadline,
            b"datumSkonceniVeci" => &mut c.ended,
            _ => return Ok(false),
        };
        opt_leaf(r, slot)?;
        Ok(true)
    })?;
    Ok(c)
}

fn person(r: &mut Doc, p: &mut Person) -> Result<(), XmlError> {
    let mut id = None;
    children(r, |r, name| {
        let slot = match name {
            b"idOsoby" => &mut id,
            b"druhRoleVRizeni" => &mut p.role,
            b"druhSpravce" => &mut p.administrator_kind,
            b"nazevOsoby" => &mut p.name,
            b"nazevOsobyObchodni" => &mut p.trade_name,
            b"druhOsoby" => &mut p.kind,
            b"druhPravniForma" => &mut p.legal_form,
            b"jmeno" => &mut p.first_name,
            b"titulPred" => &mut p.title_before,
            b"titulZa" => &mut p.title_after,
            b"ic" => &mut p.ico,
            b"dic" => &mut p.dic,
            b"rc" => &mut p.birth_number,
            b"datumNarozeni" => &mut p.birth_date,
            b"datumOsobaVeVeciZrusena" => &mut p.left_case,
            b"adresa" => {
                p.addresses.push(address(r)?);
                return Ok(true);
            }
            _ => return Ok(false),
        };
        opt_leaf(r, slot)?;
        Ok(true)
    })?;
    p.id = id.ok_or_else(|| XmlError::Content("osoba without idOsoby".into()))?;
    Ok(())
}

fn address(r: &mut Doc) -> Result<Address, XmlError> {
    let mut a = Address::default();
    children(r, |r, name| {
        let slot = match name {
            b"druhAdresy" => &mut a.kind,
            b"datumPobytOd" => &mut a.valid_from,
            b"datumPobytDo" => &mut a.valid_to,
            b"mesto" => &mut a.city,
            b"ulice" => &mut a.street,
            b"cisloPopisne" => &mut a.house_number,
            b"okres" => &mut a.district,
            b"zeme" => &mut a.country,
            b"psc" => &mut a.postcode,
            b"telefon" => &mut a.phone,
            b"fax" => &mut a.fax,
            b"textAdresy" => &mut a.text,
            b"idAdresy" => &mut a.id,
            _ => return Ok(false),
        };
        opt_leaf(r, slot)?;
        Ok(true)
    })?;
    Ok(a)
}

fn code_list(r: &mut Doc) -> Result<CodeListEntry, XmlError> {
    let mut c = CodeListEntry::default();
    let mut internal = None;
    children(r, |r, name| {
        let slot = match name {
            b"idCisUdalostiProWs" => &mut c.id,
            b"popisCisUdalosti" => &mut c.name,
            b"datumZalozeniCisUdalosti" => &mut c.created,
            b"datumZruseniCisUdalosti" => &mut c.cancelled,
            b"priznakAnInterniCisUdalost" => &mut internal,
            _ => return Ok(false),
        };
        opt_leaf(r, slot)?;
        Ok(true)
    })?;
    c.internal = internal.as_deref().map(Flag::from_text);
    Ok(c)
}
