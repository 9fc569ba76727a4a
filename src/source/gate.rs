//! In-process gates: an unlimited one that only counts (tests, benchmarks) and a local
//! limiter. The durable, shared gate is `crate::budget::Budget`.
//!
//! Owns nothing durable; must never be used by the daemon in place of the budget.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use super::client::{Gate, Operation};
use super::error::GateError;

/// Grants every request and counts them.
#[derive(Default)]
pub struct CountingGate {
    pub granted: AtomicU64,
}

#[async_trait::async_trait]
impl Gate for CountingGate {
    async fn acquire(&self, _op: Operation) -> Result<(), GateError> {
        self.granted.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// A process-local limit: at most `total` requests, at most `per_minute` a minute.
pub struct LocalGate {
    limiter: DefaultDirectRateLimiter,
    total: u64,
    used: AtomicU64,
}

impl LocalGate {
    pub fn new(per_minute: u32, total: u64) -> Self {
        let q = Quota::per_minute(NonZeroU32::new(per_minute.max(1)).unwrap());
        Self {
            limiter: RateLimiter::direct(q),
            total,
            used: AtomicU64::new(0),
        }
    }
}

#[async_trait::async_trait]
impl Gate for LocalGate {
    async fn acquire(&self, _op: Operation) -> Result<(), GateError> {
        if let Err(n) = self.limiter.check() {
            return Err(GateError::RateLimited {
                retry_after: n.wait_time_from(DefaultClock::default().now()),
            });
        }
        let used = self.used.fetch_add(1, Ordering::SeqCst);
        if used >= self.total {
            self.used.fetch_sub(1, Ordering::SeqCst);
            return Err(GateError::BudgetExhausted {
                used,
                limit: self.total,
                resets_at: "when this process restarts".into(),
            });
        }
        Ok(())
    }
}
