#!/usr/bin/env bash
# Two builds of `isir serve` side by side on the same API fixture, for the lists: court +
# opened (a year) and the change feed, alternating runs of each build (machine speed
# drifts between runs; alternating keeps the comparison fair). Each run: 3 s of warm-up,
# then 8 s measured; 500 court + year pairs and 500 feed positions picked once. Prints
# each run's req/s and p99, and the server's own and mapped-file memory.
#   bench/ab_lists.sh OLD_BIN NEW_BIN [DB] [ROUNDS]   (DB: bench/data/api-1000000.db)
set -euo pipefail
OLD="$1"; NEW="$2"; DB="${3:-bench/data/api-1000000.db}"; ROUNDS="${4:-2}"
W="$(mktemp -d)"; trap 'rm -rf "$W"' EXIT
source "$(dirname "$0")/lib.sh"
sqlite3 "$DB" "SELECT 'court=' || court_short || '&opened_from=' || substr(opened, 1, 4) || '-01-01&opened_to=' || substr(opened, 1, 4) || '-12-31' FROM cases WHERE court_short IS NOT NULL GROUP BY court_short, substr(opened, 1, 4) ORDER BY random() LIMIT 500" >"$W/court_year"
sqlite3 "$DB" "SELECT action_id FROM timeline ORDER BY random() LIMIT 500" >"$W/afters"
wrk_script "$W/court_year" "/v1/cases?%s&limit=50" "$W/court_opened.lua"
wrk_script "$W/afters" "/v1/events?after=%s&limit=50" "$W/events.lua"
PORT=$((20000 + RANDOM % 20000))
for _ in $(seq "$ROUNDS"); do
    for v in old new; do
        BIN="$OLD"; [ "$v" = new ] && BIN="$NEW"
        serve_sqlite "$BIN" "$DB" "$PORT"
        for t in court_opened events; do
            wrk -t2 -c32 -d3s -s "$W/$t.lua" "http://127.0.0.1:$PORT" >/dev/null
            read -r _ n rps p50 p99 errs < <(wrk -t2 -c32 -d8s --latency -s "$W/$t.lua" \
                "http://127.0.0.1:$PORT" | grep RESULT)
            mem=$(awk '/RssAnon/ {a=$2} /RssFile/ {f=$2} END {printf "own %.0f MiB, mapped file %.0f MiB", a/1024, f/1024}' "/proc/$SERVE_PID/status")
            echo "$v $t: $rps req/s, p50 $p50 ms, p99 $p99 ms, errors $errs ($n requests); $mem"
        done
        kill "$SERVE_PID"; wait "$SERVE_PID" 2>/dev/null || true
    done
done
