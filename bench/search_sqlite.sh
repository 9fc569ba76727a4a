#!/usr/bin/env bash
# Name search on a SQLite API fixture alone (#20): wrk on `/v1/search` with the texts
# `bench/lists.sh` uses (four letters of a debtor's surname and two of the given name,
# those whose words fold to 2-4 letters), 2 threads, 32 connections, DUR seconds twice
# after 3 s of warm-up; prints the index's full-text segments too.
#   bench/search_sqlite.sh [CASES]   (default 300000; builds bench/data/api-CASES.db
#   once, as bench/api.sh does; TEXTS=file keeps the same texts across runs)
# Needs wrk and sqlite3.
set -euo pipefail
cd "$(dirname "$0")/.."
CASES="${1:-300000}"
DUR="${DUR:-10}"
DB="bench/data/api-$CASES.db"
for t in wrk sqlite3; do command -v "$t" >/dev/null || { echo "bench/search_sqlite.sh needs $t" >&2; exit 2; }; done
cargo build --release -q
BIN=target/release/isir
source bench/lib.sh
api_fixture "$CASES" "$DB"
WORK="$(mktemp -d)"
trap 'kill ${SERVE_PID:-} 2>/dev/null || true; rm -rf "$WORK"' EXIT
PV=$(sqlite3 "$DB" "SELECT version FROM proj_meta WHERE name = 'parties'")
TEXTS="${TEXTS:-$WORK/names}"
[ -s "$TEXTS" ] || sqlite3 "$DB" "SELECT substr(json_extract(doc, '$.name'), 1, 4) || ' ' || substr(json_extract(doc, '$.first_name'), 1, 2) FROM parties WHERE role = 'DLUŽNÍK' AND json_extract(doc, '$.first_name') IS NOT NULL ORDER BY random() LIMIT 2000" \
    | fold_texts url >"$TEXTS"
echo "$(wc -l <"$TEXTS") texts; the name index in $(sqlite3 "$DB" "SELECT COUNT(DISTINCT segid) FROM names_v${PV}_idx") segment(s)"
P=$((20000 + RANDOM % 20000))
serve_sqlite "$BIN" "$DB" "$P"
wrk_script "$TEXTS" "/v1/search?q=%s&limit=50" "$WORK/n.lua"
wrk -t2 -c32 -d3s -s "$WORK/n.lua" "http://127.0.0.1:$P" >/dev/null
for _ in 1 2; do
    wrk -t2 -c32 -d"${DUR}s" --latency -s "$WORK/n.lua" "http://127.0.0.1:$P" | grep RESULT \
        | awk '{ printf "name search %s req/s  p50 %s ms  p99 %s ms  errors %s\n", $3, $4, $5, $6 }'
done
