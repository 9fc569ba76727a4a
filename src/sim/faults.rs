//! Faults the simulator can inject: at given request numbers or at a random rate, and
//! record-level defects at given positions of the stream (`KIND@rN`: the N-th action,
//! 1-based, is sent spoiled whenever a page holds it; see `spoil`).
//!
//! Owns the fault plan and its parsing from the command line (`--faults`). It decides
//! which fault a request gets; `sim::server` produces it.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub use super::spoil::RecordDefect;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// HTTP 500 with an HTML body.
    Http500,
    /// A body cut in half (well-formed HTTP, truncated XML).
    Truncate,
    /// A SOAP Fault.
    SoapFault,
    /// A `CHYBA` status.
    Chyba,
    /// Bytes that are not XML.
    Garbage,
    /// A correct answer, but late (`slow_ms`).
    Slow,
    /// The connection is dropped after the headers.
    Reset,
}

impl FaultKind {
    pub const ALL: [FaultKind; 7] = [
        FaultKind::Http500,
        FaultKind::Truncate,
        FaultKind::SoapFault,
        FaultKind::Chyba,
        FaultKind::Garbage,
        FaultKind::Slow,
        FaultKind::Reset,
    ];

    pub fn parse(s: &str) -> Option<FaultKind> {
        Some(match s {
            "500" | "http500" => FaultKind::Http500,
            "truncate" => FaultKind::Truncate,
            "fault" | "soapfault" => FaultKind::SoapFault,
            "chyba" => FaultKind::Chyba,
            "garbage" => FaultKind::Garbage,
            "slow" => FaultKind::Slow,
            "reset" => FaultKind::Reset,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::Http500 => "500",
            FaultKind::Truncate => "truncate",
            FaultKind::SoapFault => "fault",
            FaultKind::Chyba => "chyba",
            FaultKind::Garbage => "garbage",
            FaultKind::Slow => "slow",
            FaultKind::Reset => "reset",
        }
    }
}

/// Which requests fail, and how.
#[derive(Debug, Clone)]
pub struct FaultPlan {
    /// Request number (1-based, SOAP requests only) to fault.
    pub at: BTreeMap<u64, FaultKind>,
    /// Probability that any other request gets a random fault from `kinds`.
    pub rate: f64,
    pub kinds: Vec<FaultKind>,
    /// Record defects by position of the action in the stream (1-based).
    pub records: BTreeMap<u64, RecordDefect>,
    rng: StdRng,
}

impl Default for FaultPlan {
    fn default() -> Self {
        Self {
            at: BTreeMap::new(),
            rate: 0.0,
            kinds: FaultKind::ALL.to_vec(),
            records: BTreeMap::new(),
            rng: StdRng::seed_from_u64(0),
        }
    }
}

impl FaultPlan {
    pub fn none() -> Self {
        Self::default()
    }

    pub fn at(mut self, n: u64, kind: FaultKind) -> Self {
        self.at.insert(n, kind);
        self
    }

    pub fn random(rate: f64, kinds: Vec<FaultKind>, seed: u64) -> Self {
        Self {
            rate,
            kinds,
            rng: StdRng::seed_from_u64(seed),
            ..Self::default()
        }
    }

    /// Spoils the `n`-th action of the stream (1-based) with `defect` whenever it is sent.
    pub fn record(mut self, n: u64, defect: RecordDefect) -> Self {
        self.records.insert(n, defect);
        self
    }

    /// The defect of the action at 0-based position `i` of the stream, if any.
    pub fn defect_at(&self, i: usize) -> Option<RecordDefect> {
        self.records.get(&(i as u64 + 1)).copied()
    }

    /// Parses `500@3,truncate@5,rate=0.1,kinds=500+reset,seed=7,cp1250@r12,nocase@r40`.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut p = FaultPlan::default();
        let mut seed = 0u64;
        for part in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if let Some(r) = part.strip_prefix("rate=") {
                p.rate = r.parse().map_err(|_| format!("bad fault rate {r:?}"))?;
                if !(0.0..=1.0).contains(&p.rate) {
                    return Err(format!("fault rate {r} is not between 0 and 1"));
                }
            } else if let Some(k) = part.strip_prefix("kinds=") {
                p.kinds = k
                    .split('+')
                    .map(|k| FaultKind::parse(k).ok_or_else(|| format!("unknown fault kind {k:?}")))
                    .collect::<Result<_, _>>()?;
            } else if let Some(s) = part.strip_prefix("seed=") {
                seed = s.parse().map_err(|_| format!("bad fault seed {s:?}"))?;
            } else if let Some((k, n)) = part
                .split_once('@')
                .and_then(|(k, n)| Some((k, n.strip_prefix('r')?)))
            {
                let d =
                    RecordDefect::parse(k).ok_or_else(|| format!("unknown record defect {k:?}"))?;
                let n: u64 = n
                    .parse()
                    .map_err(|_| format!("bad stream position {n:?}"))?;
                if n == 0 {
                    return Err("stream positions start at 1".into());
                }
                p.records.insert(n, d);
            } else if let Some((k, n)) = part.split_once('@') {
                let kind =
                    FaultKind::parse(k).ok_or_else(|| format!("unknown fault kind {k:?}"))?;
                let n: u64 = n.parse().map_err(|_| format!("bad request number {n:?}"))?;
                p.at.insert(n, kind);
            } else {
                return Err(format!(
                    "bad fault spec {part:?}: expected KIND@N, DEFECT@rN, rate=R, kinds=K+K or seed=S \
                     (kinds: 500, truncate, fault, chyba, garbage, slow, reset; record defects: \
                     cp1250, cp1250note, nocase, badnumber, backid, undecodable)"
                ));
            }
        }
        p.rng = StdRng::seed_from_u64(seed);
        Ok(p)
    }

    /// The fault for request number `n`, if any.
    pub fn decide(&mut self, n: u64) -> Option<FaultKind> {
        if let Some(k) = self.at.get(&n) {
            return Some(*k);
        }
        if self.rate > 0.0 && !self.kinds.is_empty() && self.rng.gen_bool(self.rate) {
            let i = self.rng.gen_range(0..self.kinds.len());
            return Some(self.kinds[i]);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn parses_specs() {
        let mut p = FaultPlan::parse("500@3,truncate@5,rate=0.5,kinds=reset+slow,seed=9").unwrap();
        assert_eq!(p.decide(3), Some(FaultKind::Http500));
        assert_eq!(p.decide(5), Some(FaultKind::Truncate));
        let random: Vec<_> = (10..200).filter_map(|n| p.decide(n)).collect();
        assert!(
            random
                .iter()
                .all(|k| matches!(k, FaultKind::Reset | FaultKind::Slow))
        );
        assert!(random.len() > 50 && random.len() < 140);
        assert!(FaultPlan::parse("boom@1").is_err());
        let p = FaultPlan::parse("cp1250@r1,nocase@r7,500@2").unwrap();
        assert_eq!(p.defect_at(0), Some(RecordDefect::Cp1250));
        assert_eq!(p.defect_at(6), Some(RecordDefect::NoCase));
        assert_eq!(p.defect_at(1), None);
        assert_eq!(p.at.get(&2), Some(&FaultKind::Http500));
        assert!(FaultPlan::parse("cp1250@r0").is_err());
        assert!(FaultPlan::parse("boom@r3").is_err());
        assert!(FaultPlan::parse("rate=2").is_err());
    }
}
