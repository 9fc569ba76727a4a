#!/usr/bin/env bash
# A backfill of N actions (default 2 million) from the simulator into a fresh SQLite file
# (or ISIR_DATABASE__URL), with the budget lifted: reports the rate and the peak resident
# memory of the writer, and the simulator's own request count.
#   bench/backfill.sh [N]
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
export ISIR_DATABASE__URL="${ISIR_DATABASE__URL:-sqlite://$WORK/backfill.db}"
export ISIR_BUDGET__DAILY=100000000 ISIR_BUDGET__PER_MINUTE=100000000
export ISIR_POLL__MAX_BATCHES_PER_TICK=100000000
export ISIR_LOG=warn
START=$(date +%s.%N)
/usr/bin/time -v $BIN poll --once >"$WORK/tick.json" 2>"$WORK/time.txt"
END=$(date +%s.%N)
STORED=$(python3 -c "import json;print(json.load(open('$WORK/tick.json'))['actions'])")
RSS=$(grep "Maximum resident" "$WORK/time.txt" | awk '{print $6}')
REQ=$(curl -s "http://127.0.0.1:$PORT/_sim/stats" | python3 -c "import json,sys;print(json.load(sys.stdin)['requests_total'])")
python3 - "$N" "$STORED" "$START" "$END" "$RSS" "$REQ" <<'PY'
import sys
n, stored, s, e, rss, req = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
secs = e - s
print(f"backfill: {stored} of {n} actions in {secs:.1f} s = {stored/secs:,.0f} actions/s; "
      f"peak RSS of the writer {rss/1024:.1f} MiB; {req} requests (minimum {-(-n//1000)} pages + 1 head check)")
PY
