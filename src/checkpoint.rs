//! The checkpoint: the ID of the last action the replica holds, the feed's only cursor
//! (dates are not ordered; IDs are). Its contract, in one place:
//!
//! 1. **It moves with what it covers.** The checkpoint moves only in the transaction that
//!    stores the actions up to it ([`crate::store::Store::write_actions`]), so a crash,
//!    a failed request or a database outage never leaves it past data that was not
//!    stored.
//! 2. **Compare-and-set.** A writer states the checkpoint it expects; the move is refused
//!    ([`Refusal::Mismatch`]) if the store holds another, so two writers can never
//!    interleave pages.
//! 3. **Fenced.** A move carries the writer's lease epoch and is refused
//!    ([`Refusal::Fenced`]) below the highest epoch the store has seen, in the same
//!    transaction: a paused ex-holder cannot write after a new grant.
//! 4. **A page follows it.** A page asked after the checkpoint, with strictly ascending
//!    IDs above it ([`follows`]); anything else is [`Refusal::OutOfOrder`].
//! 5. **By hand, only under the lease and with a reason**
//!    ([`crate::poller::by_hand::set_by_hand`]): the operator takes the lease first (so
//!    no daemon is writing), the move is fenced like a write, and the log line names who,
//!    from where to where, and why.
//!
//! The rules ([`admit`], [`follows`]) are pure and run inside the store's transaction;
//! the store calls them and nothing else decides a move. The poller reads the
//! checkpoint it expects at each tick, asks the register after it ([`resume_after`])
//! and states it with every write.
//!
//! The contract sits below the store and the lease: it imports neither.

/// Why a move of the checkpoint was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A newer writer exists: this one's lease is gone and it must stop.
    #[error("fenced: writer epoch {mine} is below the store's epoch {current}")]
    Fenced { mine: i64, current: i64 },
    /// The store's checkpoint is not the one the writer expected.
    #[error("checkpoint mismatch: expected {expected:?}, found {found:?}")]
    Mismatch {
        expected: Option<i64>,
        found: Option<i64>,
    },
    /// The page does not follow the checkpoint.
    #[error("out-of-order page: {0}")]
    OutOfOrder(String),
}

/// The precondition of a write: the writer's `epoch` is not below the store's
/// (`current`), and the store's checkpoint (`found`) is the one it `expected`. Fencing
/// is checked first: a fenced writer learns that it must stop, not that it is behind.
pub fn admit(
    found: Option<i64>,
    current: i64,
    expected: Option<i64>,
    epoch: i64,
) -> Result<(), Refusal> {
    fenced(current, epoch)?;
    if found != expected {
        return Err(Refusal::Mismatch { expected, found });
    }
    Ok(())
}

/// The precondition of a move by hand: only the epoch.
pub fn fenced(current: i64, epoch: i64) -> Result<(), Refusal> {
    if epoch < current {
        return Err(Refusal::Fenced {
            mine: epoch,
            current,
        });
    }
    Ok(())
}

/// Checks that a page asked `after` an ID, holding `ids`, may follow `checkpoint`:
/// asked after the checkpoint itself, strictly ascending, all above it.
pub fn follows(
    checkpoint: Option<i64>,
    after: i64,
    ids: impl IntoIterator<Item = i64>,
) -> Result<(), Refusal> {
    if let Some(c) = checkpoint
        && after != c
    {
        return Err(Refusal::OutOfOrder(format!(
            "page asked after {after}, but the checkpoint is {c}"
        )));
    }
    let mut prev = checkpoint.unwrap_or(i64::MIN);
    for id in ids {
        if id <= prev {
            return Err(Refusal::OutOfOrder(format!(
                "action {id} does not follow {prev}"
            )));
        }
        prev = id;
    }
    Ok(())
}

/// The ID polling asks after: the checkpoint, or `poll.start_id` before the first
/// action is stored (the register answers the actions with a greater ID).
pub fn resume_after(checkpoint: Option<i64>, start_id: i64) -> i64 {
    checkpoint.unwrap_or(start_id)
}

/// A checkpoint for people: the ID, or `none` before the first action.
pub fn show(c: Option<i64>) -> String {
    c.map(|c| c.to_string()).unwrap_or_else(|| "none".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rules_of_a_move() {
        // Fencing wins over a mismatch: a stale writer must stop, not retry.
        assert_eq!(
            admit(Some(5), 7, Some(3), 6),
            Err(Refusal::Fenced {
                mine: 6,
                current: 7
            })
        );
        assert_eq!(
            admit(Some(5), 7, Some(3), 7),
            Err(Refusal::Mismatch {
                expected: Some(3),
                found: Some(5)
            })
        );
        assert_eq!(admit(None, 0, None, 1), Ok(()));
        assert!(follows(Some(10), 10, [11, 12, 20]).is_ok());
        assert!(follows(None, -1, [1, 2]).is_ok());
        assert!(matches!(
            follows(Some(10), 9, [11]),
            Err(Refusal::OutOfOrder(_))
        ));
        assert!(matches!(
            follows(Some(10), 10, [10]),
            Err(Refusal::OutOfOrder(_))
        ));
        assert!(matches!(
            follows(Some(10), 10, [12, 11]),
            Err(Refusal::OutOfOrder(_))
        ));
        assert_eq!(show(None), "none");
        assert_eq!(resume_after(None, -1), -1);
        assert_eq!(resume_after(Some(79_500_000), -1), 79_500_000);
    }
}
