//! The one error type of the source boundary. Its variants are what a caller branches on:
//! retry now, stop because the source refused, stop because the answer is unusable, or
//! stop because the request was never granted. It never carries personal data, only
//! positions, codes and short reasons.

use std::time::Duration;

/// Why the gate did not grant a request. The request was not sent.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum GateError {
    /// The daily budget is spent; it resets at the given instant (RFC 3339).
    #[error("daily request budget spent ({used}/{limit}); resets at {resets_at}")]
    BudgetExhausted {
        used: u64,
        limit: u64,
        resets_at: String,
    },
    /// The per-minute limit would be exceeded; try again after the given time.
    #[error("per-minute request limit reached; retry in {retry_after:?}")]
    RateLimited { retry_after: Duration },
    /// The budget's durable counter could not be reached, so nothing may be sent.
    #[error("request budget unavailable: {0}")]
    Unavailable(String),
}

/// What went wrong with one request to the source.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A transient failure: HTTP 5xx, a timeout, a reset connection, a truncated body.
    /// The same request may be sent again (after backoff, with budget).
    #[error("retryable source failure: {0}")]
    Retryable(String),
    /// The source answered with a `CHYBA` status.
    #[error("source refused the request: status CHYBA, code {code:?}: {text:?}")]
    Refused {
        code: Option<String>,
        text: Option<String>,
    },
    /// The source answered with a SOAP Fault.
    #[error("source answered with a SOAP Fault {code:?}: {text:?}")]
    Fault {
        code: Option<String>,
        text: Option<String>,
    },
    /// The answer cannot be accepted: not XML, an unexpected envelope, records out of
    /// order or not above the requested ID, a required field missing, too large.
    #[error("invalid answer from the source: {0}")]
    Invalid(String),
    /// The request was not granted by the gate and was not sent.
    #[error("request not sent: {0}")]
    NotGranted(#[from] GateError),
}

impl SourceError {
    pub fn is_retryable(&self) -> bool {
        matches!(self, SourceError::Retryable(_))
    }
    /// A short machine-readable class, for metrics and outcomes.
    pub fn class(&self) -> &'static str {
        match self {
            SourceError::Retryable(_) => "retryable",
            SourceError::Refused { .. } => "refused",
            SourceError::Fault { .. } => "fault",
            SourceError::Invalid(_) => "invalid",
            SourceError::NotGranted(GateError::BudgetExhausted { .. }) => "budget_exhausted",
            SourceError::NotGranted(GateError::RateLimited { .. }) => "rate_limited",
            SourceError::NotGranted(GateError::Unavailable(_)) => "budget_unavailable",
        }
    }
}
