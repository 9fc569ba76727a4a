//! The source layer: everything about reading the ISIR public web service.
//!
//! `model` is the typed data, `parse` and `write` the wire format, `client` the HTTP
//! exchange behind a [`Gate`], `error` the one error enum. Nothing here touches the
//! store, the lease or the budget's storage: it is given a gate and returns pages.

pub mod client;
pub mod error;
pub mod gate;
pub mod model;
pub mod parse;
mod repair;
pub mod write;

pub use client::{ClientOptions, Gate, Operation, SourceClient};
pub use error::{GateError, SourceError};
pub use model::*;
