#!/usr/bin/env bash
# Two builds of `isir serve` side by side on the same API fixture: alternating 10-second
# wrk runs of each over the same 2000 cases and 2000 debtor IČOs (machine speed drifts
# between runs; alternating keeps the comparison fair).
#   bench/ab_api.sh OLD_BIN NEW_BIN [DB] [ROUNDS]   (DB: bench/data/api-1000000.db)
set -euo pipefail
OLD="$1"; NEW="$2"; DB="${3:-bench/data/api-1000000.db}"; ROUNDS="${4:-2}"
W="$(mktemp -d)"; trap 'rm -rf "$W"' EXIT
source "$(dirname "$0")/lib.sh"
pick_lookups "$DB" "$W"
cut -d'|' -f1 "$W/cases" >"$W/case_paths"
wrk_script "$W/case_paths" "/v1/cases/%s" "$W/cases.lua"
wrk_script "$W/icos" "/v1/subjects?ico=%s" "$W/icos.lua"
PORT=$((20000 + RANDOM % 20000))
for _ in $(seq "$ROUNDS"); do
    for v in old new; do
        BIN="$OLD"; [ "$v" = new ] && BIN="$NEW"
        serve_sqlite "$BIN" "$DB" "$PORT"
        P=$SERVE_PID
        for t in cases icos; do
            read -r _ n rps p50 p99 errs < <(wrk -t2 -c32 -d10s --latency -s "$W/$t.lua" \
                "http://127.0.0.1:$PORT" | grep RESULT)
            echo "$v $t: $rps req/s, p50 $p50 ms, p99 $p99 ms, errors $errs ($n requests)"
        done
        kill "$P"; wait "$P" 2>/dev/null || true
    done
done
