#!/usr/bin/env bash
# Two builds of `isir serve` side by side on the same API fixture, for the lists: court +
# opened (a year) and the change feed, alternating runs of each build (machine speed
# drifts between runs; alternating keeps the comparison fair). Each run: 3 s of warm-up,
# then 8 s measured; 500 court + year pairs and 500 feed positions picked once.
#   bench/ab_lists.sh OLD_BIN NEW_BIN [DB] [ROUNDS]   (DB: bench/data/api-1000000.db)
set -euo pipefail
OLD="$1"; NEW="$2"; DB="${3:-bench/data/api-1000000.db}"; ROUNDS="${4:-2}"
W="$(mktemp -d)"; trap 'rm -rf "$W"' EXIT
sqlite3 "$DB" "SELECT court_short || '|' || substr(opened, 1, 4) FROM cases WHERE court_short IS NOT NULL GROUP BY court_short, substr(opened, 1, 4) ORDER BY random() LIMIT 500" >"$W/court_year"
sqlite3 "$DB" "SELECT action_id FROM timeline ORDER BY random() LIMIT 500" >"$W/afters"
cat >"$W/court_opened.lua" <<LUA
local vals = {}
for line in io.lines("$W/court_year") do vals[#vals + 1] = line end
local i = 0
request = function()
  i = i % #vals + 1
  local c, y = vals[i]:match("([^|]+)|([^|]+)")
  return wrk.format("GET", "/v1/cases?court=" .. c .. "&opened_from=" .. y .. "-01-01&opened_to=" .. y .. "-12-31&limit=50")
end
LUA
cat >"$W/events.lua" <<LUA
local vals = {}
for line in io.lines("$W/afters") do vals[#vals + 1] = line end
local i = 0
request = function()
  i = i % #vals + 1
  return wrk.format("GET", "/v1/events?after=" .. vals[i] .. "&limit=50")
end
LUA
PORT=$((20000 + RANDOM % 20000))
for _ in $(seq "$ROUNDS"); do
    for v in old new; do
        BIN="$OLD"; [ "$v" = new ] && BIN="$NEW"
        ISIR_DATABASE__URL="sqlite://$DB" ISIR_LOG=warn ISIR_API__BIND="127.0.0.1:$PORT" \
            ISIR_API__RATE_PER_SECOND=100000000 ISIR_API__BURST=100000000 "$BIN" serve >/dev/null 2>&1 &
        P=$!
        for _ in $(seq 100); do curl -fs "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
        for t in court_opened events; do
            wrk -t2 -c32 -d3s -s "$W/$t.lua" "http://127.0.0.1:$PORT" >/dev/null
            out=$(wrk -t2 -c32 -d8s --latency -s "$W/$t.lua" "http://127.0.0.1:$PORT")
            rss=$(awk '/RssAnon/ {a=$2} /RssFile/ {f=$2} END {printf "own %.0f MiB, mapped file %.0f MiB", a/1024, f/1024}' "/proc/$P/status")
            echo "$v $t: $(echo "$out" | awk '/Requests\/sec/ {print $2}') req/s, p99 $(echo "$out" | awk '$1 == "99%" {print $2}'); $rss"
        done
        kill "$P"; wait "$P" 2>/dev/null || true
    done
done
