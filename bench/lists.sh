#!/usr/bin/env bash
# Reads at production scale (#20): the API's lookups, name search, filtered lists and
# events feed on the same fixture, on SQLite and on PostgreSQL, side by side in one run:
#   - `isir serve` on SQLite and on PostgreSQL (wrk, loopback),
#   - pgbench running each query's own statement, prepared (the PostgreSQL floor),
#   - Datasette on the same SQLite tables for the filtered lists,
#   - two `isir serve` processes on PostgreSQL at once (does throughput grow?).
#   bench/lists.sh [CASES]   (default 200000; the fixture is bench/api.sh's;
#   PREPARE_ONLY=1 builds the fixtures and stops; ONLY_PG=1 measures an existing
#   PostgreSQL copy alone, its values picked from it, for the queries of its built
#   projections: QUERIES="case court_state court_opened updated" with cases only)
# Needs wrk, sqlite3, pgbench and a PostgreSQL server (ISIR_BENCH_PG, default
# postgres://postgres@127.0.0.1:5432): it makes the database isir_bench_CASES there
# once (the fixture's stream stored straight, projections rebuilt) and keeps it.
set -euo pipefail
cd "$(dirname "$0")/.."
CASES="${1:-200000}"
DUR="${DUR:-10}"
CONN="${CONN:-32}"
DB="bench/data/api-$CASES.db"
PG="${ISIR_BENCH_PG:-postgres://postgres@127.0.0.1:5432}"
PGDB="isir_bench_$CASES"
SUDO=""; if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
command -v wrk >/dev/null || { $SUDO apt-get update -qq; DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq wrk; }
for t in wrk sqlite3 pgbench psql; do
    command -v "$t" >/dev/null || { echo "bench/lists.sh needs $t" >&2; exit 2; }
done
psql "$PG/postgres" -Atqc "SELECT 1" >/dev/null || { echo "no PostgreSQL at $PG (ISIR_BENCH_PG)" >&2; exit 2; }
VENV="${XDG_CACHE_HOME:-$HOME/.cache}/isir/datasette"
[ -x "$VENV/bin/datasette" ] || { python3 -m venv "$VENV"; "$VENV/bin/pip" install -q datasette; }
cargo build --release -q
BIN=target/release/isir
source bench/lib.sh
if [ -z "${ONLY_PG:-}" ]; then
# The PostgreSQL twin first (the same simulator stream stored straight, projections
# rebuilt; `pg_fixture`), then the SQLite fixture. (ONLY_SQLITE=1: SQLite and Datasette
# only.) Disk at a million cases: 30 GB + 11 GB of projections for SQLite, 19 GB +
# projections for PostgreSQL: with PG_DROP_REPLICA=1 the PostgreSQL replica is emptied
# once its projections stand, so both fit 80 GB.
if [ -z "${ONLY_SQLITE:-}" ]; then pg_fixture "$CASES" "$PG" "$PGDB"; fi
api_replica "$CASES" "$DB"
api_projections "$DB"
fi
# Older fixtures get this release's list indexes and name index (`ensure` adds them).
for url in $([ -z "${ONLY_PG:-}" ] && echo "sqlite://$DB") $([ -z "${ONLY_SQLITE:-}" ] && echo "$PG/$PGDB"); do
    [ -n "${ONLY_PG:-}" ] || ISIR_DATABASE__URL="$url" ISIR_LOG=warn $BIN project catch-up >/dev/null
done
# PREPARE_ONLY=1: build the fixture and its PostgreSQL copy, measure nothing.
[ -n "${PREPARE_ONLY:-}" ] && { echo "fixture ready: $DB and $PGDB"; exit 0; }
# A statement on the fixture the values come from (SQLite, or the PostgreSQL copy alone).
q() { if [ -n "${ONLY_PG:-}" ]; then psql "$PG/$PGDB" -Atqc "$1"; else sqlite3 "$DB" "$1"; fi; }
if [ -n "${ONLY_PG:-}" ]; then
    echo "fixture (PostgreSQL copy alone): $(q "SELECT COUNT(*) FROM cases") cases, $(q "SELECT COUNT(*) FROM actions") actions"
else
    echo "fixture: $(q "SELECT COUNT(*) FROM cases") cases, $(q "SELECT COUNT(*) FROM parties") parties, $(q "SELECT COUNT(*) FROM timeline") events"
fi

WORK="$(mktemp -d)"
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill $p 2>/dev/null || true; done; rm -rf "$WORK"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The same random values for every server: cases, debtor IČOs, names (a surname's
# first four letters and a given name's first two: what people type; those whose
# words fold to 2-4 characters each, `fold_texts`), court + state
# pairs, court + a year of openings, dates, feed positions.
if [ -n "${ONLY_PG:-}" ]; then
    q "SELECT year || '/' || number || '|' || replace(case_number, ' ', '%20') FROM cases WHERE year <= 2100 ORDER BY random() LIMIT 2000" >"$WORK/cases"
    q "SELECT DISTINCT ico, random() FROM parties WHERE ico IS NOT NULL AND role = 'DLUŽNÍK' ORDER BY 2 LIMIT 2000" | cut -d'|' -f1 >"$WORK/icos"
    q "SELECT substr((doc::jsonb)->>'name', 1, 4) || ' ' || substr((doc::jsonb)->>'first_name', 1, 2) FROM parties WHERE role = 'DLUŽNÍK' AND (doc::jsonb)->>'first_name' IS NOT NULL ORDER BY random() LIMIT 2000" \
        | fold_texts url >"$WORK/names"
    q "SELECT action_id FROM timeline ORDER BY random() LIMIT 2000" >"$WORK/afters"
else
    pick_lookups "$DB" "$WORK"
    sqlite3 "$DB" "SELECT substr(json_extract(doc, '$.name'), 1, 4) || ' ' || substr(json_extract(doc, '$.first_name'), 1, 2) FROM parties WHERE role = 'DLUŽNÍK' AND json_extract(doc, '$.first_name') IS NOT NULL ORDER BY random() LIMIT 2000" \
        | fold_texts url >"$WORK/names"
    sqlite3 "$DB" "SELECT action_id FROM timeline ORDER BY random() LIMIT 2000" >"$WORK/afters"
fi
cut -d'|' -f1 "$WORK/cases" >"$WORK/case_paths"
cut -d'|' -f2 "$WORK/cases" | sed 's/%20/ /' >"$WORK/case_numbers"
q "SELECT court_short || '|' || state FROM cases WHERE court_short IS NOT NULL AND state IS NOT NULL GROUP BY court_short, state ORDER BY random() LIMIT 500" \
    | python3 -c 'import sys, urllib.parse
for l in sys.stdin:
    c, s = l.rstrip("\n").split("|", 1)
    print(f"{c}|{urllib.parse.quote(s)}|{s}")' >"$WORK/court_state"
q "SELECT court_short || '|' || substr(opened, 1, 4) FROM cases WHERE court_short IS NOT NULL GROUP BY court_short, substr(opened, 1, 4) ORDER BY random() LIMIT 500" >"$WORK/court_year"
q "SELECT substr(latest_published, 1, 10) FROM cases ORDER BY random() LIMIT 500" >"$WORK/dates"
awk -F'|' '{print $1 "\t" $2}' "$WORK/court_state" >"$WORK/cs_tab"
CV="cases_v$(q "SELECT version FROM proj_meta WHERE name = 'cases'")"
NAME="$(basename "$DB" .db)"

# wrk scripts: `$1` values file, `$2` path template with `%s` for a value, or with
# `{1}`, `{2}` for the `|`-separated fields of a value.
lua() {
    cat >"$WORK/$3.lua" <<LUA
local vals = {}
for line in io.lines("$1") do vals[#vals + 1] = line end
local i = 0
request = function()
  i = i % #vals + 1
  local v = vals[i]
  local f = {}
  for x in string.gmatch(v, "([^|]+)") do f[#f + 1] = x end
  local p = "$2"
  local esc = function(x) local r = (x or ""):gsub("%%", "%%%%"); return r end
  p = p:gsub("{1}", esc(f[1])):gsub("{2}", esc(f[2]))
  p = p:gsub("%%s", esc(v))
  return wrk.format("GET", p)
end
$(wrk_done "%.0f")
LUA
}
lua "$WORK/case_paths" "/v1/cases/%s" case
lua "$WORK/icos" "/v1/subjects?ico=%s" ico
lua "$WORK/names" "/v1/search?q=%s&limit=50" name
lua "$WORK/court_state" "/v1/cases?court={1}&state={2}&limit=50" court_state
lua "$WORK/court_year" "/v1/cases?court={1}&opened_from={2}-01-01&opened_to={2}-12-31&limit=50" court_opened
lua "$WORK/dates" "/v1/cases?sort=updated&updated_since=%s&limit=50" updated
lua "$WORK/afters" "/v1/events?after=%s&limit=50" events
lua "$WORK/court_state" "/$NAME/$CV.json?court_short={1}&state={2}&_sort=opened&_size=50&_shape=array" ds_court_state
lua "$WORK/court_year" "/$NAME/$CV.json?court_short={1}&opened__gte={2}-01-01&opened__lte={2}-12-31&_sort=opened&_size=50&_shape=array" ds_court_opened
lua "$WORK/dates" "/$NAME/$CV.json?latest_published__gte=%s&_sort_desc=latest_published&_size=50&_shape=array" ds_updated

run_wrk() { # $1 label, $2 port, $3 lua, [$4 connections]
    local out
    # A warm-up first, not counted (WARMUP seconds, default 3): the two back ends' files
    # do not both fit this machine's memory, so whichever ran before left the other cold.
    if [ "${WARMUP:-3}" != 0 ]; then
        wrk -t2 -c"${4:-$CONN}" -d"${WARMUP:-3}s" -s "$WORK/$3.lua" "http://127.0.0.1:$2" >/dev/null
        settle "$2"
    fi
    out=$(wrk -t2 -c"${4:-$CONN}" -d"${DUR}s" --latency -s "$WORK/$3.lua" "http://127.0.0.1:$2" | grep RESULT)
    read -r _ reqs rps p50 p99 errs <<<"$out"
    printf "%-36s %8s req/s  p50 %7s ms  p99 %7s ms  errors %s\n" "$1" "$rps" "$p50" "$p99" "$errs"
    echo "$rps" >"$WORK/$3.$2.rps"
    settle "$2"
}
# Waits (at most 30 s) until the server on port `$1` answers /readyz within 20 ms: wrk
# stops sending at its end, but requests it left in flight (a slow name search's) still
# run on the server and would weigh on the next query's figures.
settle() {
    local t
    for _ in $(seq 60); do
        t=$(curl -s -o /dev/null -w '%{time_total}' "http://127.0.0.1:$1/readyz" || echo 9)
        awk -v t="$t" 'BEGIN { exit !(t < 0.02) }' && return 0
        sleep 0.5
    done
}
serve() { # $1 database URL; sets SERVE_PORT (not in a subshell: PIDS must keep the PID)
    local p; p=$(free_port)
    ISIR_DATABASE__URL="$1" ISIR_LOG=warn ISIR_API__BIND="127.0.0.1:$p" ISIR_API__RATE_PER_SECOND=100000000 \
        ISIR_API__BURST=100000000 ISIR_API__MAX_CONNECTIONS=16 $BIN serve >"$WORK/serve.$p.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 300); do curl -fs "http://127.0.0.1:$p/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
    SERVE_PORT="$p"
}
QUERIES="${QUERIES:-case ico name court_state court_opened updated events}"
echo "wrk: 2 threads, $CONN connections, $DUR s each after ${WARMUP:-3} s of warm-up, loopback; server, wrk and the database share this machine's $(nproc) cores"

if [ -z "${ONLY_PG:-}" ]; then
echo "== isir serve on SQLite"
serve "sqlite://$DB"; PS=$SERVE_PORT
for q in $QUERIES; do run_wrk "sqlite $q" "$PS" "$q"; done
kill "${PIDS[-1]}"; unset 'PIDS[-1]'

echo "== Datasette on the same SQLite tables"
PD=$(free_port)
"$VENV/bin/datasette" serve -i "$DB" --port "$PD" --setting sql_time_limit_ms 5000 >"$WORK/ds.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 300); do curl -fs "http://127.0.0.1:$PD/-/versions.json" >/dev/null 2>&1 && break; sleep 0.2; done
for q in court_state court_opened updated; do run_wrk "datasette $q" "$PD" "ds_$q"; done
kill "${PIDS[-1]}"; unset 'PIDS[-1]'
fi

[ -n "${ONLY_SQLITE:-}" ] && exit 0
echo "== isir serve on PostgreSQL"
serve "$PG/$PGDB"; PP=$SERVE_PORT
for q in $QUERIES; do run_wrk "postgres $q" "$PP" "$q"; done

echo "== pgbench: each query's statement, prepared, $CONN clients, 2 threads"
# The values, in tables pgbench picks from by a random index (the lookup of the value is
# part of the floor's cost, and small).
psql "$PG/$PGDB" -q <<SQL
DROP TABLE IF EXISTS bench_v;
CREATE TABLE bench_v (kind TEXT, i INT, a TEXT, b TEXT, PRIMARY KEY (kind, i));
SQL
load() { # $1 kind, $2 file (fields separated by |), when picked
    [ -f "$2" ] || return 0
    awk -F'|' -v k="$1" '{ printf "%s\t%d\t%s\t%s\n", k, NR, $1, ($3 != "" ? $3 : $2) }' "$2" \
        | psql "$PG/$PGDB" -qc "COPY bench_v FROM STDIN"
}
load case "$WORK/case_numbers"; load ico "$WORK/icos"; load court_state "$WORK/court_state"
load court_year "$WORK/court_year"; load date "$WORK/dates"; load after "$WORK/afters"
# Name texts folded as the API folds them: the exact key and the words' array.
[ -f "$WORK/names" ] && fold_texts sql <"$WORK/names" >"$WORK/names_plain" && load name "$WORK/names_plain"
n() { if [ -f "$1" ]; then wc -l <"$1"; else echo 0; fi; }
V="(SELECT a FROM bench_v WHERE kind = '%s' AND i = :i)"
W="(SELECT b FROM bench_v WHERE kind = '%s' AND i = :i)"
asked() { [[ " $QUERIES " == *" $1 "* ]]; }
pgq() { # $1 label, $2 values count, $3 SQL (only for the queries asked)
    asked "$1" || return 0
    printf '\\set i random(1, %s)\n%s;\n' "$2" "$3" >"$WORK/pg.sql"
    local out
    out=$(pgbench -n -M prepared -c "$CONN" -j 2 -T "$DUR" -f "$WORK/pg.sql" "$PG/$PGDB" 2>&1)
    local tps; tps=$(grep -o 'tps = [0-9.]*' <<<"$out" | head -1 | cut -d' ' -f3)
    local lat; lat=$(grep -o 'latency average = [0-9.]* ms' <<<"$out" | cut -d' ' -f4)
    printf "%-36s %8.0f tps  (average latency %s ms)\n" "pgbench $1" "$tps" "$lat"
}
pgq case "$(n "$WORK/case_numbers")" "SELECT doc FROM cases WHERE case_number = $(printf "$V" case)"
pgq ico "$(n "$WORK/icos")" "SELECT $(party_cells) FROM party_cells WHERE ico = $(printf "$V" ico) ORDER BY case_number, court, person_id LIMIT 51"
# The API's statements for a first page of a name search (`pg_search_sql`).
PGOPTIONS="-c plan_cache_mode=force_generic_plan" pgq name "$(n "$WORK/names")" \
    "$(pg_search_sql "SELECT a AS exact, CAST(b AS TEXT[]) AS w FROM bench_v WHERE kind = 'name' AND i = :i")"
pgq court_state "$(n "$WORK/court_state")" "SELECT doc FROM cases WHERE court_short = $(printf "$V" court_state) AND state = $(printf "$W" court_state) ORDER BY opened, case_number LIMIT 51"
pgq court_opened "$(n "$WORK/court_year")" "SELECT doc FROM cases WHERE court_short = $(printf "$V" court_year) AND opened >= $(printf "$W" court_year) || '-01-01' AND opened <= $(printf "$W" court_year) || '-12-31' ORDER BY opened, case_number LIMIT 51"
pgq updated "$(n "$WORK/dates")" "SELECT doc FROM cases WHERE latest_published >= $(printf "$V" date) ORDER BY latest_published DESC, case_number DESC LIMIT 51"
# The feed's rows as the API reads them: every timeline column in a JSON object.
EV=""; asked events && EV="$(psql "$PG/$PGDB" -Atqc "SELECT 'json_build_object(' || string_agg(format('''%s'', %s', column_name, column_name), ', ' ORDER BY ordinal_position) || ')::text' FROM information_schema.columns WHERE table_name = 'timeline' AND table_schema = 'public'")"
pgq events "$(n "$WORK/afters")" "SELECT $EV FROM timeline WHERE action_id > CAST($(printf "$V" after) AS BIGINT) ORDER BY action_id LIMIT 51"

echo "== two isir serve processes on PostgreSQL at once (wrk per process: 1 thread, $((CONN / 2)) connections)"
serve "$PG/$PGDB"; PP2=$SERVE_PORT
for q in court_state events; do
    asked "$q" || continue
    wrk -t1 -c$((CONN / 2)) -d"${DUR}s" --latency -s "$WORK/$q.lua" "http://127.0.0.1:$PP" | grep RESULT >"$WORK/a" &
    W1=$!
    wrk -t1 -c$((CONN / 2)) -d"${DUR}s" --latency -s "$WORK/$q.lua" "http://127.0.0.1:$PP2" | grep RESULT >"$WORK/b"
    wait "$W1" # (not a bare `wait`: the servers are this shell's children too)
    python3 - "$q" "$WORK/a" "$WORK/b" "$(cat "$WORK/$q.$PP.rps")" <<'PY'
import sys
q, a, b, one = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
ra = [float(x) for x in open(a).read().split()[1:5]]
rb = [float(x) for x in open(b).read().split()[1:5]]
tot = ra[1] + rb[1]
print(f"two processes {q:<22} {tot:8.0f} req/s  (one process: {one:.0f}; x{tot / one:.2f}); p99 {max(ra[3], rb[3]):.2f} ms")
PY
done
