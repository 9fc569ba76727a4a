#!/usr/bin/env bash
# Crash chaos, longer than CI: N SIGKILLs at random points during a backfill (SQLite and
# PostgreSQL), during projection builds, and during exports; after restarts the replica
# equals the simulator's stream (zero lost, zero duplicated) and the projections equal
# a clean rebuild. Prints each test's own summary line.
#   scripts/chaos/crash.sh [KILLS] (default 100)
set -euo pipefail
cd "$(dirname "$0")/../.."
export ISIR_CHAOS_KILLS="${1:-100}"
scripts/test.sh --release --test processes --test export -- \
    sigkill_during killed_export --nocapture 2>&1 | grep -E "crash test|projection crash|killed|test result|panicked"
