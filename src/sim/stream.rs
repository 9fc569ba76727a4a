//! The simulator's deterministic data: a stream of actions of realistic insolvency cases,
//! generated compactly (a few bytes an action) and rendered to full actions on demand.
//!
//! Owns the ground truth of what the simulated register publishes. Everything is a pure
//! function of the seed: the same seed gives the same stream, byte for byte, and the
//! stream can be extended (live rate) without changing what was already published.

use std::collections::VecDeque;

use chrono::{DateTime, Duration, TimeZone, Utc};
use chrono_tz::Europe::Prague;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::source::model::*;
use crate::source::write::note_xml;

/// What an action of a case does. Rendering turns it into an [`Action`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Step {
    Petition,
    DebtorPerson,
    PetitioningCreditor,
    Notice,
    Rejected,
    Decision,
    KonkursDeclared,
    StateChange,
    AdminAppointed,
    AdminPerson,
    CreditorPerson,
    Claim,
    ClaimSecondaryDoc,
    AddressChange,
    Info,
    Correction,
    LegalForce,
    Approval,
    Fulfilled,
    Discharged,
    FinalReport,
    KonkursCancelled,
    Ended,
    FinalLegalForce,
    StruckOff,
    ErasureRequest,
    Erasure,
    /// After an erasure, the register republishes the debtor's person block (a person
    /// change, with or without its role): it must not bring the debtor back.
    DebtorEcho,
    CodeList,
    SchemaChange,
}

/// The track a case follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Track {
    Oddluzeni,
    Konkurs,
    Reorganizace,
    Rejected,
}

/// What the generator knows of a case.
#[derive(Debug, Clone, Copy)]
pub struct CaseInfo {
    pub number: u32,
    pub year: u16,
    pub court: u8,
    pub natural_person: bool,
    pub track: Track,
    pub erased: bool,
    pub admin: u16,
    pub claims: u16,
}

/// One action in compact form: 24 bytes.
#[derive(Debug, Clone, Copy)]
pub struct Ev {
    pub id: i64,
    pub case: u32,
    /// Seconds since [`base_time`].
    pub t: u32,
    pub step: Step,
    pub arg: u16,
}

/// The first simulated action's time: 2 January 2008, 08:00 Prague.
pub fn base_time() -> DateTime<Utc> {
    Prague
        .with_ymd_and_hms(2008, 1, 2, 8, 0, 0)
        .unwrap()
        .with_timezone(&Utc)
}

const COURTS: &[&str] = &[
    "MSPHAAB",
    "KSSTCAB",
    "KSJICCB",
    "KSZPCPM",
    "KSSCEUL",
    "KSSECULP1",
    "KSVYCHK",
    "KSVYCHKP1",
    "KSJIMBM",
    "KSSEMOS",
    "KSSEMOSP1",
    "VSSTCAB",
    "VSSEMOC",
];
const COURT_WEIGHTS: &[u32] = &[14, 12, 6, 6, 9, 4, 6, 4, 13, 14, 6, 1, 1];

const MALE_FIRST: &[&str] = &[
    "Jan",
    "Petr",
    "Josef",
    "Pavel",
    "Martin",
    "Tomáš",
    "Jiří",
    "Lukáš",
    "Zdeněk",
    "Miroslav",
    "Václav",
    "Michal",
    "František",
    "Jaroslav",
    "Radek",
    "Ondřej",
];
const FEMALE_FIRST: &[&str] = &[
    "Jana",
    "Marie",
    "Eva",
    "Hana",
    "Anna",
    "Lenka",
    "Kateřina",
    "Věra",
    "Lucie",
    "Alena",
    "Petra",
    "Zuzana",
    "Jitka",
    "Markéta",
    "Šárka",
    "Ivana",
];
const MALE_SUR: &[&str] = &[
    "Novák",
    "Svoboda",
    "Novotný",
    "Dvořák",
    "Černý",
    "Procházka",
    "Kučera",
    "Veselý",
    "Horák",
    "Němec",
    "Pokorný",
    "Marek",
    "Pospíšil",
    "Hájek",
    "Jelínek",
    "Růžička",
    "Beneš",
    "Fiala",
    "Sedláček",
    "Doležal",
    "Zeman",
    "Kolář",
    "Navrátil",
    "Čermák",
    "Šťastný",
    "Kříž",
    "Vaněk",
    "Urban",
    "Blažek",
    "Kříž",
];
const FEMALE_SUR: &[&str] = &[
    "Nováková",
    "Svobodová",
    "Novotná",
    "Dvořáková",
    "Černá",
    "Procházková",
    "Kučerová",
    "Veselá",
    "Horáková",
    "Němcová",
    "Pokorná",
    "Marková",
    "Pospíšilová",
    "Hájková",
    "Jelínková",
    "Růžičková",
    "Benešová",
    "Fialová",
    "Sedláčková",
    "Doležalová",
    "Zemanová",
    "Kolářová",
    "Navrátilová",
    "Čermáková",
    "Šťastná",
    "Křížová",
    "Vaňková",
    "Urbanová",
    "Blažková",
    "Žáková",
];
const COMPANY_WORDS: &[&str] = &[
    "Stavby",
    "Doprava",
    "Agro",
    "Řemesla",
    "Obchod",
    "Elektro",
    "Dřevo",
    "Kovo",
    "Textil",
    "Pekárna",
    "Služby",
    "Reality",
    "Technik",
    "Zámečnictví",
    "Úklid",
    "Gastro",
];
const COMPANY_PLACES: &[&str] = &[
    "Morava",
    "Čechy",
    "Vysočina",
    "Šumava",
    "Krkonoše",
    "Haná",
    "Slezsko",
    "Polabí",
    "Praha",
    "Brno",
];
const LEGAL_FORMS: &[&str] = &["s.r.o.", "a.s.", "v.o.s.", "družstvo", "k.s."];
/// (city, district, postcode)
const CITIES: &[(&str, &str, &str)] = &[
    ("Praha", "Hlavní město Praha", "110 00"),
    ("Brno", "Brno-město", "602 00"),
    ("Ostrava", "Ostrava-město", "702 00"),
    ("Plzeň", "Plzeň-město", "301 00"),
    ("Liberec", "Liberec", "460 01"),
    ("Olomouc", "Olomouc", "779 00"),
    ("České Budějovice", "České Budějovice", "370 01"),
    ("Hradec Králové", "Hradec Králové", "500 02"),
    ("Ústí nad Labem", "Ústí nad Labem", "400 01"),
    ("Pardubice", "Pardubice", "530 02"),
    ("Zlín", "Zlín", "760 01"),
    ("Kladno", "Kladno", "272 01"),
    ("Most", "Most", "434 01"),
    ("Opava", "Opava", "746 01"),
    ("Frýdek-Místek", "Frýdek-Místek", "738 01"),
    ("Karviná", "Karviná", "733 01"),
    ("Jihlava", "Jihlava", "586 01"),
    ("Děčín", "Děčín", "405 02"),
    ("Třebíč", "Třebíč", "674 01"),
    ("Šumperk", "Šumperk", "787 01"),
];
const STREETS: &[&str] = &[
    "Hlavní",
    "Nádražní",
    "Školní",
    "Zahradní",
    "Komenského",
    "Masarykova",
    "Husova",
    "Palackého",
    "Údolní",
    "Jiráskova",
    "Lesní",
    "Polní",
    "Tyršova",
    "Žižkova",
    "Čechova",
];

/// A small stable hash (splitmix64) to derive per-action and per-person randomness
/// without storing it.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn pick<T: Copy>(h: u64, xs: &[T]) -> T {
    xs[(h % xs.len() as u64) as usize]
}

/// The generator: case table, compact events and the state to extend them.
pub struct Generator {
    seed: u64,
    rng: StdRng,
    pub cases: Vec<CaseInfo>,
    pub events: Vec<Ev>,
    /// Active cases with their remaining steps.
    active: Vec<(u32, VecDeque<(Step, u16)>)>,
    next_id: i64,
    clock: u32,
    year_seq: [u32; 64],
    next_code: u32,
}

impl Generator {
    pub fn new(seed: u64, start_id: i64) -> Self {
        Self {
            seed,
            rng: StdRng::seed_from_u64(seed),
            cases: Vec::new(),
            events: Vec::new(),
            active: Vec::new(),
            next_id: start_id.max(1),
            clock: 0,
            year_seq: [0; 64],
            next_code: 1066,
        }
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Generates until `n` actions exist.
    pub fn extend_to(&mut self, n: usize) {
        self.events.reserve(n.saturating_sub(self.events.len()));
        while self.events.len() < n {
            self.step();
        }
    }

    fn year_of(&self, t: u32) -> u16 {
        use chrono::Datelike;
        (base_time() + Duration::seconds(t as i64))
            .with_timezone(&Prague)
            .year() as u16
    }

    fn step(&mut self) {
        // Time moves 5 s to 10 min an action.
        self.clock += self.rng.gen_range(5..600);
        let roll: f64 = self.rng.r#gen();
        if roll < 0.0002 {
            let code = self.next_code;
            self.next_code += 1;
            self.push(u32::MAX, Step::CodeList, (code - 1000) as u16);
            return;
        }
        if roll < 0.00025 {
            self.push(u32::MAX, Step::SchemaChange, 0);
            return;
        }
        if self.active.is_empty() || (self.active.len() < 4000 && roll < 0.08) {
            self.open_case();
            return;
        }
        // Recent cases move faster than old ones.
        let n = self.active.len();
        let i = if self.rng.gen_bool(0.6) {
            n - 1 - self.rng.gen_range(0..n.min(50))
        } else {
            self.rng.gen_range(0..n)
        };
        let case = self.active[i].0;
        let (st, arg) = self.active[i].1.pop_front().expect("active case has steps");
        if self.active[i].1.is_empty() {
            self.active.swap_remove(i);
        }
        self.push(case, st, arg);
    }

    fn push(&mut self, case: u32, step: Step, arg: u16) {
        // Non-public actions consume IDs: gaps of 1-3 about a third of the time.
        let gap = if self.rng.gen_bool(0.3) {
            self.rng.gen_range(1..4)
        } else {
            0
        };
        self.next_id += gap;
        let id = self.next_id;
        self.next_id += 1;
        self.events.push(Ev {
            id,
            case,
            t: self.clock,
            step,
            arg,
        });
    }

    fn open_case(&mut self) {
        let year = self.year_of(self.clock);
        let yi = (year as usize - 2008).min(63);
        self.year_seq[yi] += self.rng.gen_range(1..3);
        let total: u32 = COURT_WEIGHTS.iter().sum();
        let mut w = self.rng.gen_range(0..total);
        let mut court = 0;
        for (i, cw) in COURT_WEIGHTS.iter().enumerate() {
            if w < *cw {
                court = i;
                break;
            }
            w -= cw;
        }
        let natural = self.rng.gen_bool(0.75);
        let track = match self.rng.gen_range(0..100) {
            0..=14 => Track::Rejected,
            15..=24 => Track::Konkurs,
            25..=27 => Track::Reorganizace,
            _ if !natural => Track::Konkurs,
            _ => Track::Oddluzeni,
        };
        let erased = self.rng.gen_bool(0.01);
        let claims = match track {
            Track::Rejected => 0,
            _ => self.rng.gen_range(1..9),
        };
        let info = CaseInfo {
            number: self.year_seq[yi],
            year,
            court: court as u8,
            natural_person: natural,
            track,
            erased,
            admin: self.rng.gen_range(0..300),
            claims,
        };
        let idx = self.cases.len() as u32;
        self.cases.push(info);
        let mut steps: VecDeque<(Step, u16)> = VecDeque::new();
        let r = &mut self.rng;
        steps.push_back((Step::DebtorPerson, 0));
        if r.gen_bool(0.3) {
            steps.push_back((Step::PetitioningCreditor, 0));
        }
        steps.push_back((Step::Notice, 0));
        if r.gen_bool(0.15) {
            steps.push_back((Step::Info, 0));
        }
        match track {
            Track::Rejected => {
                steps.push_back((Step::Rejected, 0));
                steps.push_back((Step::LegalForce, 0));
                steps.push_back((Step::FinalLegalForce, 0));
            }
            _ => {
                steps.push_back((Step::Decision, 0));
                steps.push_back((Step::AdminAppointed, 0));
                steps.push_back((Step::AdminPerson, 0));
                if r.gen_bool(0.1) {
                    steps.push_back((Step::Correction, 0));
                }
                for c in 1..=claims {
                    steps.push_back((Step::CreditorPerson, c));
                    steps.push_back((Step::Claim, c));
                    if r.gen_bool(0.2) {
                        steps.push_back((Step::ClaimSecondaryDoc, c));
                    }
                }
                steps.push_back((Step::LegalForce, 0));
                if r.gen_bool(0.2) {
                    steps.push_back((Step::AddressChange, 0));
                }
                match track {
                    Track::Konkurs => {
                        if r.gen_bool(0.5) {
                            steps.push_back((Step::KonkursDeclared, 0));
                            steps.push_back((Step::StateChange, 1));
                        }
                        steps.push_back((Step::FinalReport, 0));
                        steps.push_back((Step::KonkursCancelled, 0));
                    }
                    Track::Reorganizace => {
                        steps.push_back((Step::Approval, 0));
                        steps.push_back((Step::Ended, 0));
                    }
                    _ => {
                        steps.push_back((Step::Approval, 0));
                        steps.push_back((Step::Fulfilled, 0));
                        steps.push_back((Step::Discharged, 0));
                    }
                }
                steps.push_back((Step::FinalLegalForce, 0));
            }
        }
        if r.gen_bool(0.5) {
            steps.push_back((Step::StruckOff, 0));
        }
        if erased {
            steps.push_back((Step::ErasureRequest, 0));
            steps.push_back((Step::Erasure, 0));
            // Without a draw from the generator's RNG: the rest of the stream keeps
            // its shape.
            if mix(self.seed ^ 0xEC40 ^ idx as u64).is_multiple_of(2) {
                steps.push_back((Step::DebtorEcho, 0));
            }
        }
        self.push(idx, Step::Petition, 0);
        self.active.push((idx, steps));
    }

    // -----------------------------------------------------------------------------------
    // Rendering

    /// The full action of a compact event.
    pub fn render(&self, ev: &Ev) -> Action {
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
        Action {
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
            note: note.then(|| raw_note.unwrap_or_else(|| note_xml(&detail))),
        }
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

fn upper(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_whitespace() && *c != '.')
        .flat_map(|c| c.to_uppercase())
        .collect()
}

/// A valid 8-digit IČO (weighted mod-11 check digit).
pub fn ico_from(h: u64) -> String {
    let base = 1_000_000 + h % 9_000_000; // 7 digits
    let sum: u64 = format!("{base:07}")
        .bytes()
        .enumerate()
        .map(|(i, d)| (d - b'0') as u64 * (8 - i as u64))
        .sum();
    let check = match sum % 11 {
        0 => 1,
        1 => 0,
        r => 11 - r,
    } % 10;
    format!("{base:07}{check}")
}

/// A birth number `YYMMDD/XXXX` divisible by 11 (women: month + 50).
pub fn birth_number(year: i32, month: u32, day: u32, female: bool, h: u64) -> String {
    let mm = if female { month + 50 } else { month };
    let head = format!("{:02}{:02}{:02}", year % 100, mm, day);
    let prefix: u64 = head.parse::<u64>().unwrap() * 1000 + h % 1000;
    let check = (prefix % 11) % 10;
    format!("{head}/{:03}{check}", h % 1000)
}

/// `2015-01-05T10:23:08.000+01:00` in Prague time.
pub fn time_str(t: DateTime<Utc>) -> String {
    t.with_timezone(&Prague)
        .format("%Y-%m-%dT%H:%M:%S%.3f%:z")
        .to_string()
}

/// `2015-08-21+02:00` in Prague time.
pub fn date_str(t: DateTime<Utc>) -> String {
    t.with_timezone(&Prague).format("%Y-%m-%d%:z").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_extendable() {
        let mut a = Generator::new(7, 1246);
        a.extend_to(3000);
        let mut b = Generator::new(7, 1246);
        b.extend_to(1000);
        b.extend_to(3000);
        for i in [0usize, 999, 1000, 2999] {
            assert_eq!(a.render(&a.events[i]), b.render(&b.events[i]));
        }
        let mut c = Generator::new(8, 1246);
        c.extend_to(10);
        assert_ne!(a.render(&a.events[5]), c.render(&c.events[5]));
    }

    #[test]
    fn ids_ascend_with_gaps() {
        let mut g = Generator::new(1, 1246);
        g.extend_to(5000);
        assert!(g.events.windows(2).all(|w| w[0].id < w[1].id));
        let span = g.events.last().unwrap().id - g.events[0].id + 1;
        assert!(span > 5000, "IDs must have gaps");
    }

    #[test]
    fn birth_numbers_and_icos_check() {
        let rc = birth_number(1985, 1, 1, true, 123);
        let digits: String = rc.chars().filter(|c| c.is_ascii_digit()).collect();
        let prefix: u64 = digits[..9].parse().unwrap();
        assert_eq!((prefix % 11 % 10).to_string(), &digits[9..], "{rc}");
        let ico = ico_from(42);
        assert_eq!(ico.len(), 8);
    }
}
