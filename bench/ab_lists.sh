#!/usr/bin/env bash
# Two builds of `isir serve` side by side on the same API fixture, for the lists: court +
# opened (a year) and the change feed (QUERIES adds court_state and case), alternating
# runs of each build (machine speed drifts between runs; alternating keeps the comparison
# fair). Each run: 3 s of warm-up, then 8 s measured; 500 values of each query picked
# once. Prints each run's req/s and p99, and the server's own and mapped-file memory.
#   bench/ab_lists.sh OLD_BIN NEW_BIN [DB] [ROUNDS] [NEW_DB]
# DB: a SQLite file (default bench/data/api-1000000.db) or a PostgreSQL URL
# (postgres://postgres@127.0.0.1:5432/isir_bench_1000000, `bench/lists.sh`'s twin).
# NEW_DB: the store NEW_BIN serves, where the two builds store the projections
# differently (the same fixture, its projections rebuilt by NEW_BIN); DB by default.
# QUERIES may also name ico (`/v1/subjects?ico=`) and name (`/v1/search`, 50 a page).
set -euo pipefail
OLD="$1"; NEW="$2"; DB="${3:-bench/data/api-1000000.db}"; ROUNDS="${4:-2}"; NEW_DB="${5:-$DB}"
QUERIES="${QUERIES:-court_opened events}"
W="$(mktemp -d)"; trap 'rm -rf "$W"' EXIT
source "$(dirname "$0")/lib.sh"
case "$DB" in
    postgres://* | postgresql://*) URL="$DB"; NEW_URL="$NEW_DB"; DOC="doc::json"; q() { psql "$DB" -Atqc "$1"; } ;;
    *) URL="sqlite://$DB"; NEW_URL="sqlite://$NEW_DB"; DOC="doc"; q() { sqlite3 "$DB" "$1"; } ;;
esac
q "SELECT 'court=' || court_short || '&opened_from=' || substr(opened, 1, 4) || '-01-01&opened_to=' || substr(opened, 1, 4) || '-12-31' FROM cases WHERE court_short IS NOT NULL GROUP BY court_short, substr(opened, 1, 4) ORDER BY random() LIMIT 500" >"$W/court_year"
q "SELECT action_id FROM timeline ORDER BY random() LIMIT 500" >"$W/afters"
# (The states URL-quoted: wrk refuses a request line with bytes beyond ASCII.)
q "SELECT 'court=' || court_short || '&state=' || state FROM cases WHERE court_short IS NOT NULL AND state IS NOT NULL GROUP BY court_short, state ORDER BY random() LIMIT 500" \
    | python3 -c 'import sys, urllib.parse
for l in sys.stdin: print(urllib.parse.quote(l.rstrip("\n"), safe="=&"))' >"$W/court_state"
q "SELECT year || '/' || number FROM cases WHERE year <= 2100 ORDER BY random() LIMIT 500" >"$W/cases"
q "SELECT DISTINCT ico FROM parties WHERE ico IS NOT NULL AND role = 'DLUŽNÍK' ORDER BY random() LIMIT 500" >"$W/icos"
# (A party's document as JSON: `->>` reads it on both back ends.)
q "SELECT substr($DOC->>'name', 1, 4) || ' ' || substr($DOC->>'first_name', 1, 2) FROM parties WHERE role = 'DLUŽNÍK' AND $DOC->>'first_name' IS NOT NULL ORDER BY random() LIMIT 500" >"$W/names"
python3 -c 'import sys, urllib.parse
for l in open(sys.argv[1]).read().splitlines(): print(urllib.parse.quote(l))' "$W/names" >"$W/names.q"
wrk_script "$W/icos" "/v1/subjects?ico=%s" "$W/ico.lua"
wrk_script "$W/names.q" "/v1/search?q=%s&limit=50" "$W/name.lua"
wrk_script "$W/court_year" "/v1/cases?%s&limit=50" "$W/court_opened.lua"
wrk_script "$W/afters" "/v1/events?after=%s&limit=50" "$W/events.lua"
wrk_script "$W/court_state" "/v1/cases?%s&limit=50" "$W/court_state.lua"
wrk_script "$W/cases" "/v1/cases/%s" "$W/case.lua"
PORT=$((20000 + RANDOM % 20000))
for _ in $(seq "$ROUNDS"); do
    for v in old new; do
        BIN="$OLD"; U="$URL"; [ "$v" = new ] && BIN="$NEW" && U="$NEW_URL"
        serve_url "$BIN" "$U" "$PORT"
        for t in $QUERIES; do
            wrk -t2 -c32 -d3s -s "$W/$t.lua" "http://127.0.0.1:$PORT" >/dev/null
            read -r _ n rps p50 p99 errs < <(wrk -t2 -c32 -d8s --latency -s "$W/$t.lua" \
                "http://127.0.0.1:$PORT" | grep RESULT)
            mem=$(awk '/RssAnon/ {a=$2} /RssFile/ {f=$2} END {printf "own %.0f MiB, mapped file %.0f MiB", a/1024, f/1024}' "/proc/$SERVE_PID/status")
            echo "$v $t: $rps req/s, p50 $p50 ms, p99 $p99 ms, errors $errs ($n requests); $mem"
        done
        kill "$SERVE_PID"; wait "$SERVE_PID" 2>/dev/null || true
    done
done
