#!/usr/bin/env bash
# Bulk lookups against one request per IČO, on the API fixture (`bench/api.sh` builds
# it): wrk sends `POST /v1/subjects/lookup` bodies of 1000 random debtor IČOs, then
# `GET /v1/subjects?ico=` for the same IČOs one by one; the figure is IČOs answered a
# second, and the ratio of the two.
#   bench/lookup.sh [DB] [SECS]   (DB: bench/data/api-1000000.db)
set -euo pipefail
cd "$(dirname "$0")/.."
DB="${1:-bench/data/api-1000000.db}"; SECS="${2:-10}"
BIN="${BIN:-target/release/isir}"
[ -f "$DB" ] || { echo "lookup.sh: no fixture $DB (run bench/api.sh first)" >&2; exit 1; }
W="$(mktemp -d)"; trap 'kill $P 2>/dev/null || true; rm -rf "$W"' EXIT
source bench/lib.sh
pick_lookups "$DB" "$W"
wrk_script "$W/icos" "/v1/subjects?ico=%s" "$W/icos.lua"
# Two bodies of 1000 IČOs each (the 2000 picked), sent in turn.
python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
icos = [l.strip() for l in open(f"{w}/icos") if l.strip()]
bodies = [json.dumps({"ico": icos[i:i + 1000]}) for i in (0, 1000)]
with open(f"{w}/lookup.lua", "w") as f:
    f.write("local bodies = {%s}\n" % ", ".join(json.dumps(b) for b in bodies))
    f.write("""local i = 0
request = function()
  i = i % #bodies + 1
  return wrk.format("POST", "/v1/subjects/lookup", {["Content-Type"] = "application/json"}, bodies[i])
end
""")
PY
wrk_done "%.2f" >>"$W/lookup.lua"
PORT=$((20000 + RANDOM % 20000))
ISIR_DATABASE__URL="sqlite://$DB" ISIR_LOG=warn ISIR_API__BIND="127.0.0.1:$PORT" \
    ISIR_API__RATE_PER_SECOND=100000000 ISIR_API__BURST=100000000 "$BIN" serve >/dev/null 2>&1 &
P=$!
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
read -r _ n rps p50 p99 errs < <(wrk -t2 -c8 -d"${SECS}s" --latency -s "$W/lookup.lua" "http://127.0.0.1:$PORT" | grep RESULT)
bulk=$(python3 -c "print(round($rps * 1000))")
echo "lookup of 1000 IČOs: $rps req/s = $bulk IČOs/s, p50 $p50 ms, p99 $p99 ms, errors $errs ($n requests)"
read -r _ n rps1 p50 p99 errs < <(wrk -t2 -c32 -d"${SECS}s" --latency -s "$W/icos.lua" "http://127.0.0.1:$PORT" | grep RESULT)
echo "one request per IČO: $rps1 req/s = $rps1 IČOs/s, p50 $p50 ms, p99 $p99 ms, errors $errs ($n requests)"
python3 -c "print('ratio: %.1fx the IČOs a second of one request each' % ($bulk / $rps1))"
