//! Rendering: a compact event of the stream becomes a full [`Action`] with its note
//! (debtors, creditors, administrators, addresses), exactly as the register would
//! publish it.
//!
//! A pure function of the seed, the case table and the event.

use chrono::{DateTime, Duration, Utc};

use super::names::*;
use super::stream::*;
use crate::source::model::*;
use crate::source::write::note_xml;

/// The note of a rendered action as the generator made it, before it is written as XML.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TruthNote {
    /// The action carries no `poznamka`.
    Absent,
    /// A note written from this detail (by [`note_xml`]).
    Model(Box<Detail>),
    /// A note written verbatim, not from a detail (a newer schema, a broken document).
    Raw(String),
}

impl Generator {
    /// The full action of a compact event.
    pub fn render(&self, ev: &Ev) -> Action {
        let (mut action, note) = self.render_model(ev);
        action.note = match note {
            TruthNote::Absent => None,
            TruthNote::Model(d) => Some(note_xml(&d)),
            TruthNote::Raw(s) => Some(s),
        };
        action
    }

    /// The action of a compact event without its note, and the note as the generator
    /// made it: the ground truth the tests compare the projections with, independent of
    /// the note's writer and of the parser.
    pub fn render_model(&self, ev: &Ev) -> (Action, TruthNote) {
        let h = mix(self.seed ^ mix(ev.id as u64));
        let base = base_time() + Duration::seconds(ev.t as i64);
        // Publication can go backwards by weeks; creation is usually a little earlier,
        // sometimes later than publication.
        let published = if h.is_multiple_of(50) {
            base - Duration::days(7 + (h >> 8) as i64 % 35)
        } else {
            base
        };
        let created = if h % 97 == 1 {
            published + Duration::minutes(1 + (h >> 16) as i64 % 300)
        } else {
            published - Duration::seconds(((h >> 20) % 3600) as i64)
        };
        let (case_number, origin, case) = if ev.case == u32::MAX {
            ("INS -1/-1".to_string(), "CCA".to_string(), None)
        } else {
            let c = self.cases[ev.case as usize];
            (
                format!("INS {}/{}", c.number, c.year),
                COURTS[c.court as usize].to_string(),
                Some(c),
            )
        };
        let pdate = |d: DateTime<Utc>| date_str(d);
        let mut detail = Detail {
            schema_version: Some("1_10".into()),
            origin: Some(origin),
            secondary_action: Some(Flag::F),
            secondary_document: Some(Flag::F),
            valid_creditor: Some(Flag::F),
            erroneous_claim_entry: Some(Flag::F),
            ..Default::default()
        };
        let mut doc = true;
        let mut section: Option<(&str, i64)> = None;
        let mut note = true;
        // A note written as it is, not from `detail` (unknown schemas, broken notes).
        let mut raw_note: Option<String> = None;
        let state = |s: &str| {
            Some(CaseBlock {
                state: Some(s.to_string()),
                ..Default::default()
            })
        };
        let code: &str = match ev.step {
            Step::Petition => {
                detail.case = state("NEVYRIZENA");
                section = Some(("A", 1));
                match case.map(|c| c.track) {
                    Some(Track::Oddluzeni) => "6",
                    Some(Track::Reorganizace) => "7",
                    Some(Track::Konkurs) if h.is_multiple_of(3) => "410",
                    _ => "5",
                }
            }
            Step::DebtorPerson
            | Step::PetitioningCreditor
            | Step::AdminPerson
            | Step::CreditorPerson
            | Step::AddressChange
            | Step::DebtorEcho => {
                doc = false;
                let c = case.expect("person of a case");
                detail = Detail {
                    schema_version: Some("1_10".into()),
                    origin: detail.origin,
                    ..Default::default()
                };
                let p = match ev.step {
                    Step::DebtorPerson | Step::AddressChange => {
                        self.debtor(ev.case, &c, ev.step == Step::AddressChange, base)
                    }
                    Step::DebtorEcho => {
                        let mut p = self.debtor(ev.case, &c, false, base);
                        if h.is_multiple_of(2) {
                            p.role = None;
                        }
                        p
                    }
                    Step::PetitioningCreditor => self.company(
                        mix(self.seed ^ ev.case as u64 ^ 0xC0FFEE),
                        "VĚŘIT-NAVR",
                        1,
                        base,
                    ),
                    Step::AdminPerson => self.administrator(c.admin, base),
                    _ => self.company(
                        mix(self.seed ^ ((ev.case as u64) << 16) ^ ev.arg as u64),
                        "VĚŘITEL",
                        2 + ev.arg as u32,
                        base,
                    ),
                };
                detail.person = Some(p);
                if ev.step == Step::AddressChange {
                    "2"
                } else {
                    "1"
                }
            }
            Step::Notice => {
                detail.case = state("NEVYRIZENA");
                section = Some(("A", 2));
                "185"
            }
            Step::Rejected => {
                detail.case = state("VYRIZENA");
                section = Some(("B", 1));
                if h.is_multiple_of(2) { "72" } else { "73" }
            }
            Step::Decision => {
                let c = case.unwrap();
                let deadline = pdate(base + Duration::days(30));
                section = Some(("B", 1));
                let (st, code) = match c.track {
                    Track::Oddluzeni => ("ODDLUŽENÍ", "78"),
                    Track::Reorganizace => ("REORGANIZ", "77"),
                    Track::Konkurs if h.is_multiple_of(2) => ("KONKURS", "76"),
                    _ => ("ÚPADEK", "75"),
                };
                detail.case = Some(CaseBlock {
                    state: Some(st.into()),
                    claims_deadline: Some(deadline),
                    ..Default::default()
                });
                code
            }
            Step::KonkursDeclared => {
                detail.case = state("KONKURS");
                section = Some(("B", 4));
                "94"
            }
            Step::StateChange => {
                doc = false;
                detail.case = state("KONKURS");
                "372"
            }
            Step::AdminAppointed => {
                section = Some(("B", 2));
                detail.administrator_appointed = Some(pdate(base));
                "105"
            }
            Step::Claim => {
                section = Some(("P", ev.arg as i64));
                detail.claim_section_kind = Some("P".into());
                detail.claim_section_number = Some(ev.arg.to_string());
                detail.valid_creditor = Some(Flag::T);
                "63"
            }
            Step::ClaimSecondaryDoc => {
                section = Some(("P", ev.arg as i64));
                detail.secondary_document = Some(Flag::T);
                "63"
            }
            Step::Info => {
                doc = false;
                note = h.is_multiple_of(2);
                "371"
            }
            Step::Correction => {
                section = Some(("B", 2));
                detail.corrected_published = Some(pdate(base - Duration::days(2)));
                "105"
            }
            Step::LegalForce => {
                doc = false;
                section = Some(("B", 1));
                detail.secondary_action = Some(Flag::T);
                detail.legal_force_date = Some(pdate(base - Duration::days(1)));
                "369"
            }
            Step::Approval => {
                section = Some(("B", 5));
                match case.unwrap().track {
                    Track::Reorganizace => "99",
                    _ if h.is_multiple_of(2) => "174",
                    _ => "172",
                }
            }
            Step::Fulfilled => {
                section = Some(("B", 6));
                "177"
            }
            Step::Discharged => {
                section = Some(("B", 7));
                detail.case = state("VYRIZENA");
                "178"
            }
            Step::FinalReport => {
                section = Some(("B", 6));
                "466"
            }
            Step::KonkursCancelled => {
                section = Some(("B", 7));
                detail.case = state("VYRIZENA");
                "95"
            }
            Step::Ended => {
                section = Some(("B", 7));
                detail.case = state("VYRIZENA");
                "473"
            }
            Step::FinalLegalForce => {
                doc = false;
                let slot = if case.unwrap().track == Track::Rejected {
                    1
                } else {
                    7
                };
                section = Some(("B", slot));
                detail.secondary_action = Some(Flag::T);
                detail.legal_force_date = Some(pdate(base - Duration::days(1)));
                detail.case = Some(CaseBlock {
                    state: Some("PRAVOMOCNA".into()),
                    ended: Some(pdate(base - Duration::days(1))),
                    ..Default::default()
                });
                "370"
            }
            Step::StruckOff => {
                doc = false;
                detail.case = state("ODSKRTNUTA");
                "372"
            }
            Step::ErasureRequest => {
                section = Some(("A", 3));
                "1045"
            }
            Step::Erasure => {
                doc = false;
                detail.case = state("ODSKRTNUTA");
                detail.struck_out = Some(pdate(base));
                // The register's note is optional and its schema changes: the type
                // alone must decide the erasure.
                match (h >> 40) % 5 {
                    0 => "636",
                    1 => {
                        note = false;
                        "636"
                    }
                    2 => {
                        note = false;
                        "637"
                    }
                    3 => {
                        raw_note = Some(format!(
                            "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\
                             <ns2:udalost xmlns:ns2=\"http://www.cca.cz/isir/poznamka\" verzeXsd=\"2_0\">\
                             <idOsobyPuvodce>{}</idOsobyPuvodce><znepristupneni><datum>{}</datum>\
                             <paragraf>425</paragraf></znepristupneni></ns2:udalost>",
                            detail.origin.clone().unwrap_or_default(),
                            pdate(base)
                        ));
                        "636"
                    }
                    _ => {
                        raw_note = Some(format!(
                            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ns2:udalost \
                             xmlns:ns2=\"http://www.cca.cz/isir/poznamka\" verzeXsd=\"1_10\">\
                             <idOsobyPuvodce>{}</idOsobyPuvodce><vec><druhStavRizeni>ODSKRTNUTA",
                            detail.origin.clone().unwrap_or_default()
                        ));
                        "637"
                    }
                }
            }
            Step::CodeList => {
                doc = false;
                detail = Detail {
                    schema_version: Some("1_8".into()),
                    origin: Some("CCA".into()),
                    code_list: Some(CodeListEntry {
                        id: Some((ev.arg as u32 + 1000).to_string()),
                        name: Some(format!("Nový druh události {}", ev.arg as u32 + 1000)),
                        created: Some(pdate(base)),
                        cancelled: None,
                        internal: Some(Flag::F),
                    }),
                    ..Default::default()
                };
                "4"
            }
            Step::SchemaChange => {
                doc = false;
                note = false;
                "330"
            }
        };
        let type_name = if ev.step == Step::CodeList {
            crate::codes::event_type_name("4")
                .unwrap_or_default()
                .to_string()
        } else {
            crate::codes::event_type_name(code)
                .unwrap_or("Neznámá událost")
                .to_string()
        };
        let (section, number_in_section) = match section {
            Some(("P", n)) => (Some(format!("P{n}")), Some(1)),
            Some((s, n)) => (Some(s.to_string()), Some(n)),
            None => (None, None),
        };
        let action = Action {
            id: ev.id,
            created: time_str(created),
            published: time_str(published),
            document_url: doc.then(|| {
                format!(
                    "https://isir.justice.cz:8443/isir_public_ws/doc/Document?idDokument={}",
                    40_000_000 + ev.id
                )
            }),
            case_number,
            type_code: code.to_string(),
            type_name,
            section,
            number_in_section,
            note: None,
        };
        let truth = match (note, raw_note) {
            (false, _) => TruthNote::Absent,
            (true, Some(raw)) => TruthNote::Raw(raw),
            (true, None) => TruthNote::Model(Box::new(detail)),
        };
        (action, truth)
    }

    fn address(h: u64, natural: bool, from: DateTime<Utc>) -> Address {
        let (city, district, psc) = pick(h >> 3, CITIES);
        Address {
            kind: Some(if natural { "TRVALÁ" } else { "SÍDLO FY" }.into()),
            valid_from: natural.then(|| date_str(from)),
            valid_to: None,
            city: Some(city.into()),
            street: Some(pick(h >> 11, STREETS).into()),
            house_number: Some(((h >> 17) % 2000 + 1).to_string()),
            district: Some(district.into()),
            country: Some("CZE".into()),
            postcode: Some(psc.into()),
            phone: None,
            fax: None,
            text: None,
            id: Some((9_000_000 + (h >> 24) % 1_000_000).to_string()),
        }
    }

    pub(crate) fn debtor(&self, case: u32, c: &CaseInfo, moved: bool, at: DateTime<Utc>) -> Person {
        let h = mix(self.seed ^ 0xDEB7 ^ ((case as u64) << 8));
        if !c.natural_person {
            let mut p = self.company(h, "DLUŽNÍK", 1, at);
            if moved {
                p.addresses = vec![Self::address(mix(h ^ 7), false, at)];
            }
            return p;
        }
        let female = h.is_multiple_of(2);
        let (first, sur) = if female {
            (pick(h >> 5, FEMALE_FIRST), pick(h >> 13, FEMALE_SUR))
        } else {
            (pick(h >> 5, MALE_FIRST), pick(h >> 13, MALE_SUR))
        };
        let year = 1940 + (h >> 21) % 60;
        let month = 1 + (h >> 27) % 12;
        let day = 1 + (h >> 31) % 28;
        let rc = birth_number(year as i32, month as u32, day as u32, female, h >> 35);
        let birth = format!("{year:04}-{month:02}-{day:02}+01:00");
        let mut id = format!(
            "{}{}{:02}{:02}{:02}",
            upper(sur),
            upper(first),
            day,
            month,
            year % 100
        );
        id.push_str(" 1");
        let mut addrs = vec![Self::address(h, true, at - Duration::days(400))];
        if moved {
            addrs[0].valid_to = Some(date_str(at));
            addrs.push(Self::address(mix(h ^ 7), true, at));
        }
        // A quarter are entrepreneurs: an IČO, and a DIČ that is `CZ` + the birth number.
        let trader = (h >> 45).is_multiple_of(4);
        Person {
            id,
            role: Some("DLUŽNÍK".into()),
            name: Some(sur.into()),
            kind: Some(if trader { "PODNIKATEL" } else { "F" }.into()),
            first_name: Some(first.into()),
            title_before: h.is_multiple_of(11).then(|| "Ing.".into()),
            ico: trader.then(|| ico_from(h >> 9)),
            dic: trader.then(|| format!("CZ{}", rc.replace('/', ""))),
            birth_number: Some(rc),
            addresses: addrs,
            birth_date: Some(birth),
            ..Default::default()
        }
    }

    fn company(&self, h: u64, role: &str, n: u32, at: DateTime<Utc>) -> Person {
        let form = pick(h >> 7, LEGAL_FORMS);
        let mut name = format!(
            "{} {} {}",
            pick(h >> 9, COMPANY_WORDS),
            pick(h >> 15, COMPANY_PLACES),
            form
        );
        // Names come from filings: now and then one a spreadsheet would run.
        if (h >> 50).is_multiple_of(60) {
            name = format!("=HYPERLINK(\"http://127.0.0.1/\";\"Zaplatit\") {form}");
        }
        let ico = ico_from(h >> 20);
        let id = format!(
            "{}{} {}",
            upper(&name).chars().take(10).collect::<String>(),
            ico,
            n
        );
        Person {
            id,
            role: Some(role.into()),
            name: Some(name),
            kind: Some("P".into()),
            legal_form: Some(form.into()),
            ico: Some(ico.clone()),
            dic: h.is_multiple_of(3).then(|| format!("CZ{ico}")),
            addresses: vec![Self::address(h, false, at)],
            ..Default::default()
        }
    }

    fn administrator(&self, admin: u16, at: DateTime<Utc>) -> Person {
        let h = mix(self.seed ^ 0xAD ^ ((admin as u64) << 20));
        let female = h.is_multiple_of(2);
        let (first, sur) = if female {
            (pick(h >> 5, FEMALE_FIRST), pick(h >> 13, FEMALE_SUR))
        } else {
            (pick(h >> 5, MALE_FIRST), pick(h >> 13, MALE_SUR))
        };
        Person {
            id: format!("SPRAVCE{admin:05}          "),
            role: Some("SPRÁVCE".into()),
            administrator_kind: Some("INS".into()),
            name: Some(sur.into()),
            kind: Some("SPRÁV_INS".into()),
            first_name: Some(first.into()),
            title_before: Some(pick(h >> 17, &["Mgr.", "JUDr.", "Ing.", "Bc."]).into()),
            ico: Some(ico_from(h >> 23)),
            addresses: vec![Self::address(h, false, at)],
            ..Default::default()
        }
    }
}
