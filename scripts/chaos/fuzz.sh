#!/usr/bin/env bash
# The fuzz targets for a stated time each (cargo fuzz, libFuzzer).
#   scripts/chaos/fuzz.sh [SECONDS per target] (default 300)
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS="${1:-300}"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
for t in page_parser note_parser; do
    mkdir -p "fuzz/corpus/$t"
    RUSTC_BOOTSTRAP=1 cargo fuzz run "$t" "fuzz/corpus/$t" fuzz/seeds -- -max_total_time="$SECS" 2>&1 \
        | grep -E "^Done|SUMMARY|crash-|ERROR" || true
done
