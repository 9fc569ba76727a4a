//! isir: a replica of the Czech insolvency register (ISIR).
//!
//! Data flows one way: source -> poller -> replica + checkpoint -> projectors ->
//! projections -> api / export. See `ARCHITECTURE.md` for the codemap and invariants.

pub mod app;
pub mod budget;
pub mod cli;
pub mod codes;
pub mod config;
pub mod export;
pub mod lease;
pub mod phase;
pub mod poller;
pub mod privacy;
pub mod projection;
pub mod projector;
pub mod redis_conn;
pub mod sim;
pub mod snapshot;
pub mod source;
pub mod status;
pub mod store;

/// mimalloc: the parser and the builders allocate many small strings; it is measurably
/// faster than the system allocator for that (docs/PERFORMANCE.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
pub mod api;
pub mod telemetry;
pub mod web;
