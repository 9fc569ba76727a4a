//! isir: a replica of the Czech insolvency register (ISIR).
//!
//! Data flows one way: source -> poller -> replica + checkpoint -> projectors ->
//! projections -> api / export. See `ARCHITECTURE.md` for the codemap and invariants.

pub mod codes;
pub mod config;
pub mod phase;
pub mod sim;
pub mod source;
