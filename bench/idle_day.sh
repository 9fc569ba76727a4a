#!/usr/bin/env bash
# Requests an idle day costs, on a day scaled 600:1: the daemon with a tick every second
# (instead of 600 s) and a head check every 6 s (instead of 3600 s) runs 144 s against a
# caught-up replica and a source with no new actions; the simulator's own count of
# requests in that window is the count of a real idle day (144 ticks, 24 head checks).
#   bench/idle_day.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_setup 10000
$BIN poll --once >/dev/null
BEFORE=$(curl -fs "http://127.0.0.1:$PORT/_sim/stats" | python3 -c "import json,sys; print(json.load(sys.stdin)['requests_total'])")
ISIR_POLL__PERIOD_SECS=1 ISIR_POLL__HEAD_CHECK_SECS=6 ISIR_POLL__MAX_BATCHES_PER_TICK=20 \
    ISIR_API__BIND=127.0.0.1:0 timeout -s TERM "${IDLE_SECS:-144}" $BIN run >"$WORK/run.log" 2>&1 || true
AFTER=$(curl -fs "http://127.0.0.1:$PORT/_sim/stats" | python3 -c "import json,sys; print(json.load(sys.stdin)['requests_total'])")
echo "idle day (scaled 600:1): $((AFTER - BEFORE)) requests (minimum: 144 ticks x 1 + 24 head checks = 168); budget 3000"
