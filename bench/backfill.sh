#!/usr/bin/env bash
# A backfill of N actions (default 2 million) from the simulator into a fresh SQLite file
# (or ISIR_DATABASE__URL), with the budget lifted: reports the rate and the peak resident
# memory of the writer, and the simulator's own request count.
#   bench/backfill.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-2000000}"
. bench/lib.sh
bench_setup "$N"
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
