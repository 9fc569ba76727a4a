//! The feed's phases: `off`, `ingest`, `project`, `serve`, each including the ones before.
//!
//! Owns the names and order only; storing and changing the phase belongs to the store
//! and the command line.

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Nothing runs but the HTTP server's operator pages.
    Off,
    /// The poller writes the replica.
    Ingest,
    /// ... and the builders build the projections.
    Project,
    /// ... and the read API answers.
    Serve,
}

impl Phase {
    pub fn parse(s: &str) -> Option<Phase> {
        match s {
            "off" => Some(Phase::Off),
            "ingest" => Some(Phase::Ingest),
            "project" => Some(Phase::Project),
            "serve" => Some(Phase::Serve),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Off => "off",
            Phase::Ingest => "ingest",
            Phase::Project => "project",
            Phase::Serve => "serve",
        }
    }
    /// Whether the poller writes the replica in this phase.
    pub fn ingests(self) -> bool {
        self >= Phase::Ingest
    }
}
