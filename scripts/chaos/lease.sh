#!/usr/bin/env bash
# Lease chaos, longer than CI: three daemons on one Redis and PostgreSQL with random
# SIGSTOP/SIGCONT longer than the TTL, SIGKILLs and Redis restarts for SECS seconds; the
# checker compares the replica with the simulator, checks that every epoch's writes form
# one contiguous run (no stale commit) and that the simulator's request count stayed
# inside the budget.
#   scripts/chaos/lease.sh [SECS] (default 300)
set -euo pipefail
cd "$(dirname "$0")/../.."
export ISIR_CHAOS_SECS="${1:-300}"
scripts/test.sh --release --test processes -- lease_chaos_random --ignored --nocapture 2>&1 \
    | grep -E "lease chaos|test result|panicked"
