#!/usr/bin/env bash
# Storing pages, side by side in one run: `cargo bench --bench store` (100 pages of 1000
# actions, each page with its checkpoint and epoch check in one transaction) against
# loading the very same 100 000 actions into the same schema with `sqlite3 .import`
# (one transaction, the SQLite bulk path) and PostgreSQL's COPY.
#   bench/store_baseline.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PG_ADMIN="${ISIR_TEST_PG:-postgres://postgres@127.0.0.1:5432/postgres}"
WORK="$(mktemp -d)"
PGDB="isir_bench_copy_$$"
trap 'psql "$PG_ADMIN" -qc "DROP DATABASE IF EXISTS $PGDB" >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
cargo build --release -q
OUT=$(ISIR_DUMP_ACTIONS="$WORK/actions.csv" cargo bench -q --bench store -- --bench 2>/dev/null | grep "^store/")
echo "$OUT"
SQ=$(echo "$OUT" | awk '/sqlite/ {print $(NF-1)}')
PGR=$(echo "$OUT" | awk '/postgres/ {print $(NF-1)}')
N=$(($(python3 -c "import csv,sys; csv.field_size_limit(10**9); print(sum(1 for _ in csv.reader(open(sys.argv[1], encoding='utf-8'))))" "$WORK/actions.csv") - 1))

ISIR_DATABASE__URL="sqlite://$WORK/bulk.db" target/release/isir migrate >/dev/null
S=$(date +%s.%N)
# (The table's first 12 columns are the CSV's; the notes' compressed form, after them,
# stays NULL.)
sqlite3 "$WORK/bulk.db" "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;" ".mode csv" ".import --skip 1 $WORK/actions.csv actions" 2>/dev/null >/dev/null
E=$(date +%s.%N)
python3 -c "r=$N/($E-$S); print(f'sqlite3 .import: {$N} actions in {$E-$S:.2f} s = {r:,.0f} actions/s; isir/bulk = {$SQ/r:.2f}')"

psql "$PG_ADMIN" -qc "DROP DATABASE IF EXISTS $PGDB" -c "CREATE DATABASE $PGDB" >/dev/null
PG_URL="${PG_ADMIN%/*}/$PGDB"
ISIR_DATABASE__URL="$PG_URL" target/release/isir migrate >/dev/null
S=$(date +%s.%N)
# (The CSV's columns by name: the table has the notes' compressed form after them.)
COLS=$(head -1 "$WORK/actions.csv")
psql "$PG_URL" -qc "\\copy actions ($COLS) FROM '$WORK/actions.csv' CSV HEADER"
E=$(date +%s.%N)
python3 -c "r=$N/($E-$S); print(f'PostgreSQL COPY: {$N} actions in {$E-$S:.2f} s = {r:,.0f} actions/s; isir/COPY = {$PGR/r:.2f}')"
