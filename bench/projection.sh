#!/usr/bin/env bash
# Projection rebuild speed: backfills N actions (default 2 million) from the simulator
# into a fresh SQLite file, then times `isir project rebuild` of each builder and reports
# actions/s and the peak resident memory.
#   bench/projection.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-2000000}"
cargo build --release -q
BIN=target/release/isir
WORK="$(mktemp -d)"
trap 'kill $SIM_PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
PORT=$((20000 + RANDOM % 20000))
$BIN sim --port "$PORT" --actions "$N" --daily-limit 0 --per-minute-limit 0 >"$WORK/sim.log" 2>&1 &
SIM_PID=$!
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$PORT/_sim/stats" >/dev/null && break; sleep 0.2; done
export ISIR_SOURCE__URL="http://127.0.0.1:$PORT/isir_public_ws/IsirWsPublicService"
export ISIR_DATABASE__URL="${ISIR_DATABASE__URL:-sqlite://$WORK/p.db}"
export ISIR_BUDGET__DAILY=100000000 ISIR_BUDGET__PER_MINUTE=100000000 ISIR_POLL__MAX_BATCHES_PER_TICK=100000000
export ISIR_LOG=warn
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
