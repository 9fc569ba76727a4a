//! Exit codes: each means one thing, whatever the command. Scripts and systemd branch on
//! them; `isir --help` and the README list them.

/// A process exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    /// Done (for `poll --once`: progressed or caught up).
    Ok = 0,
    /// Failed: configuration, database, I/O, a bad snapshot or export; the message says
    /// what.
    Error = 1,
    /// The command line was wrong (clap's own code).
    Usage = 2,
    /// Another process holds the writer's lease.
    LeaseHeld = 3,
    /// Today's request budget is spent.
    BudgetSpent = 4,
    /// The register failed or answered garbage; nothing past it was stored.
    SourceError = 5,
    /// The store failed or the lease was lost mid-tick; nothing past it was stored.
    StoreError = 6,
    /// Ingestion is off in this phase (`isir phase set ingest`).
    Disabled = 7,
    /// A precondition refused the change (`phase set` with lagging or differing
    /// projections); `--force` overrides.
    Refused = 8,
    /// `project verify` found differences.
    Differences = 9,
}

impl Exit {
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The code of one tick's outcome.
    pub fn of_tick(o: &crate::poller::TickOutcome) -> Exit {
        use crate::poller::TickOutcome as T;
        match o {
            T::CaughtUp | T::BatchLimit | T::Interrupted => Exit::Ok,
            T::LeaseNotHeld { .. } => Exit::LeaseHeld,
            T::BudgetSpent { .. } => Exit::BudgetSpent,
            T::SourceError { .. } | T::SourceBehind { .. } => Exit::SourceError,
            T::StoreError { .. } | T::LeaseLost { .. } => Exit::StoreError,
            T::Disabled { .. } => Exit::Disabled,
        }
    }
}

/// The table `--help` shows.
pub const HELP: &str = "\
Exit codes:
  0  done (poll: progressed or caught up)
  1  failed: configuration, database, I/O, bad snapshot or export (see the message)
  2  the command line was wrong
  3  another process holds the writer's lease
  4  today's request budget is spent
  5  the register failed, answered garbage, or is behind the replica (nothing past it
     was stored)
  6  the store failed or the lease was lost mid-tick (nothing past it was stored)
  7  ingestion is off in this phase
  8  a precondition refused the change (--force overrides)
  9  project verify found differences";
