//! isir: a replica of the Czech insolvency register (ISIR).
//!
//! Data flows one way: source -> poller -> replica + checkpoint -> projectors ->
//! projections -> api / export. See `ARCHITECTURE.md` for the codemap and invariants.

pub mod codes;
pub mod config;
pub mod phase;
pub mod sim;
pub mod source;
pub mod store;
pub mod budget;
pub mod lease;
pub mod poller;
pub mod redis_conn;
pub mod app;
pub mod cli;
pub mod status;
pub mod projection;
pub mod projector;

/// mimalloc: the parser and the builders allocate many small strings; it is measurably
/// faster than the system allocator for that (docs/PERFORMANCE.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
pub mod api;
pub mod telemetry;
