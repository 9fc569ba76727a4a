#!/usr/bin/env bash
# The fuzz targets for a stated time each (cargo fuzz, libFuzzer).
#   scripts/chaos/fuzz.sh [SECONDS per target] (default 300)
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS="${1:-300}"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
for t in page_parser note_parser; do
    mkdir -p "fuzz/corpus/$t"
    # A crash (or any failure of the run) fails the script, with the fuzzer's summary.
    log="$(mktemp)"
    if ! RUSTC_BOOTSTRAP=1 cargo fuzz run "$t" "fuzz/corpus/$t" fuzz/seeds -- -max_total_time="$SECS" >"$log" 2>&1; then
        grep -E "^Done|SUMMARY|crash-|ERROR|panicked" "$log" | tail -20 || tail -40 "$log"
        echo "fuzz.sh: $t failed (a crash or an error): see the lines above" >&2
        rm -f "$log"
        exit 1
    fi
    grep -E "^Done|SUMMARY" "$log" || tail -5 "$log"
    rm -f "$log"
done
