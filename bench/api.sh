#!/usr/bin/env bash
# Read API throughput and latency on a projection of 1 million cases on SQLite, side by
# side with Datasette serving the same SQLite tables, with wrk on loopback.
#   bench/api.sh [CASES] (default 1000000)
# The fixture (replica + projections, ~20 actions a case) is built once and kept under
# bench/data/; delete it to rebuild. Needs wrk (Debian) and Datasette (PyPI, installed
# into a venv under ~/.cache/isir).
set -euo pipefail
cd "$(dirname "$0")/.."
CASES="${1:-1000000}"
DUR="${DUR:-20}"
CONN="${CONN:-32}"
DB="${API_DB:-bench/data/api-$CASES.db}"
SUDO=""; if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
command -v wrk >/dev/null || { $SUDO apt-get update -qq; DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq wrk; }
VENV="${XDG_CACHE_HOME:-$HOME/.cache}/isir/datasette"
[ -x "$VENV/bin/datasette" ] || { python3 -m venv "$VENV"; "$VENV/bin/pip" install -q datasette; }

cargo build --release -q
BIN=target/release/isir
export ISIR_DATABASE__URL="sqlite://$DB" ISIR_LOG=warn
source bench/lib.sh
api_fixture "$CASES" "$DB"
N_CASES=$(sqlite3 "$DB" "SELECT COUNT(*) FROM cases")
echo "projection: $N_CASES cases, $(sqlite3 "$DB" "SELECT COUNT(*) FROM parties") parties, $(sqlite3 "$DB" "SELECT COUNT(*) FROM timeline") events"

WORK="$(mktemp -d)"
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill $p 2>/dev/null || true; done; rm -rf "$WORK"' EXIT
# 2000 random cases and 2000 random debtor IČOs, the same for both servers.
pick_lookups "$DB" "$WORK"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
lua() { wrk_script "$1" "$2" "$WORK/$3.lua"; } # $1: file of values, $2: path template with %s
cut -d'|' -f1 "$WORK/cases" >"$WORK/isir_cases"
cut -d'|' -f2 "$WORK/cases" >"$WORK/ds_cases"
lua "$WORK/isir_cases" "/v1/cases/%s" isir_case
lua "$WORK/icos" "/v1/subjects?ico=%s" isir_ico
NAME="$(basename "$DB" .db)"
# Datasette reads the projection's own tables (the version the views point at).
CV="cases_v$(sqlite3 "$DB" "SELECT version FROM proj_meta WHERE name = 'cases'")"
PV="parties_v$(sqlite3 "$DB" "SELECT version FROM proj_meta WHERE name = 'parties'")"
lua "$WORK/ds_cases" "/$NAME/$CV.json?case_number=%s&_shape=array" ds_case
lua "$WORK/icos" "/$NAME/$PV.json?ico=%s&_shape=array" ds_ico

run_wrk() { # $1 label, $2 port, $3 lua
    local out
    out=$(wrk -t2 -c"$CONN" -d"${DUR}s" --latency -s "$WORK/$3.lua" "http://127.0.0.1:$2" | grep RESULT)
    read -r _ reqs rps p50 p99 errs <<<"$out"
    printf "%-26s %10s req/s  p50 %7s ms  p99 %7s ms  errors %s (%s requests)\n" "$1" "$rps" "$p50" "$p99" "$errs" "$reqs"
    echo "$rps" >"$WORK/$3.rps"
}
# Peak RSS, and of the RSS now the process's own memory (anonymous) apart from mapped
# file pages (isir serve maps the SQLite file: `api.sqlite_mmap_mib`; those pages are the
# OS's file cache, shared and clean).
rss() { awk '/VmHWM/ {h=$2} /RssAnon/ {a=$2} /RssFile/ {f=$2} END {printf "%.1f MiB (now: %.1f MiB own, %.1f MiB mapped file)", h/1024, a/1024, f/1024}' "/proc/$1/status"; }

P1=$(free_port)
ISIR_API__BIND="127.0.0.1:$P1" ISIR_API__RATE_PER_SECOND=100000000 ISIR_API__BURST=100000000 $BIN serve >"$WORK/serve.log" 2>&1 &
PIDS+=($!); ISIR_PID=$!
for _ in $(seq 300); do curl -fs "http://127.0.0.1:$P1/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
curl -fs "http://127.0.0.1:$P1/v1/cases/$(head -1 "$WORK/isir_cases")" >/dev/null
P2=$(free_port)
"$VENV/bin/datasette" serve -i "$DB" --port "$P2" --setting sql_time_limit_ms 5000 >"$WORK/ds.log" 2>&1 &
PIDS+=($!); DS_PID=$!
for _ in $(seq 300); do curl -fs "http://127.0.0.1:$P2/-/versions.json" >/dev/null 2>&1 && break; sleep 0.2; done
curl -fs "http://127.0.0.1:$P2/$NAME/$CV.json?case_number=$(head -1 "$WORK/ds_cases")&_shape=array" >"$WORK/ds.json"
head -c 160 "$WORK/ds.json"; echo

echo "wrk: 2 threads, $CONN connections, $DUR s each, loopback, the server and wrk on the same 2 cores"
run_wrk "isir case lookup" "$P1" isir_case
run_wrk "isir IČO lookup" "$P1" isir_ico
echo "isir serve peak RSS: $(rss $ISIR_PID)"
run_wrk "datasette case lookup" "$P2" ds_case
run_wrk "datasette IČO lookup" "$P2" ds_ico
echo "datasette peak RSS: $(rss $DS_PID)"
python3 - "$WORK" <<'PY'
import sys
w = sys.argv[1]
r = lambda n: float(open(f"{w}/{n}.rps").read())
print(f"ratio case lookup: {r('isir_case') / r('ds_case'):.1f}x Datasette")
print(f"ratio IČO lookup:  {r('isir_ico') / r('ds_ico'):.1f}x Datasette")
PY
