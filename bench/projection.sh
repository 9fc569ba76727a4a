#!/usr/bin/env bash
# Projection rebuild speed: backfills N actions (default 2 million) from the simulator
# into a fresh SQLite file, then times `isir project rebuild` of each builder and reports
# actions/s and the peak resident memory.
#   bench/projection.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-2000000}"
. bench/lib.sh
bench_setup "$N"
$BIN poll --once >/dev/null
kill $SIM_PID
for b in cases parties timeline; do
    S=$(date +%s.%N)
    /usr/bin/time -v $BIN project rebuild "$b" >"$WORK/$b.out" 2>"$WORK/$b.time"
    E=$(date +%s.%N)
    RSS=$(grep "Maximum resident" "$WORK/$b.time" | awk '{print $6}')
    python3 -c "import sys; n=$N; s=$E-$S; print(f'rebuild {sys.argv[1]:<9} {n} actions in {s:.1f} s = {n/s:,.0f} actions/s, peak RSS {$RSS/1024:.1f} MiB')" "$b"
done
S=$(date +%s.%N)
$BIN project verify --sample 500 | tail -1
