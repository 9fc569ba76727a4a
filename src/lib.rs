//! isir: a replica of the Czech insolvency register (ISIR).
//!
//! Data flows one way: source -> poller -> replica + checkpoint -> projectors ->
//! projections -> read -> api / web (mounted by http) and export. See `ARCHITECTURE.md`
//! for the codemap and invariants. Modules are listed in that order: the settings and
//! shared vocabulary first, then the writer's path, then the readers'.

// Settings and shared vocabulary.
pub mod codes;
pub mod config;
pub mod logging;
pub mod phase;
pub mod privacy;
pub mod telemetry;

// The writer's path: the register, the lease and budget, the replica and its checkpoint.
pub mod budget;
pub mod checkpoint;
pub mod lease;
pub mod poller;
pub mod quarantine;
pub mod redis_conn;
pub mod sim;
pub mod source;
pub mod store;

// Projections, and what is built from the replica outside them.
pub mod projection;
pub mod projector;
pub mod snapshot;

// The readers: the read side, the HTTP surfaces and the exports.
pub mod api;
pub mod export;
pub mod http;
pub mod read;
pub mod readmodel;
pub mod status;
pub mod watchlist;
pub mod web;

// Composition: the parts built from the settings, the processes, the command line.
pub mod app;
pub mod cli;
pub mod daemon;

/// mimalloc: the parser and the builders allocate many small strings; it is measurably
/// faster than the system allocator for that (docs/PERFORMANCE.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
