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

use super::names::*;

/// What an action of a case does. Rendering turns it into an [`Action`](crate::source::Action).
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

/// A small stable hash (splitmix64) to derive per-action and per-person randomness
/// without storing it.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

pub(super) fn pick<T: Copy>(h: u64, xs: &[T]) -> T {
    xs[(h % xs.len() as u64) as usize]
}

/// The generator: case table, compact events and the state to extend them.
pub struct Generator {
    pub(super) seed: u64,
    pub(super) rng: StdRng,
    pub cases: Vec<CaseInfo>,
    pub events: Vec<Ev>,
    /// Active cases with their remaining steps.
    pub(super) active: Vec<(u32, VecDeque<(Step, u16)>)>,
    pub(super) next_id: i64,
    pub(super) clock: u32,
    pub(super) year_seq: [u32; 64],
    pub(super) next_code: u32,
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

    pub(super) fn year_of(&self, t: u32) -> u16 {
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
