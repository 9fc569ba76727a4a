#!/usr/bin/env bash
# Exports and snapshots, side by side in one run on the same data:
#   - snapshot create, and restore into an empty SQLite and an empty PostgreSQL (actions/s);
#   - `isir export` per table against `sqlite3 -csv` over the same tables (SQLite) and
#     against `COPY (...) TO STDOUT CSV` (PostgreSQL), with wall time and peak RSS.
#   bench/export.sh [N actions] (default 2000000)
# PostgreSQL from ISIR_TEST_PG (default the local one); a scratch database is created.
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-2000000}"
. bench/lib.sh
bench_setup "$N"
PG_ADMIN="${ISIR_TEST_PG:-postgres://postgres@127.0.0.1:5432/postgres}"
PGDB="isir_bench_export_$$"
psql "$PG_ADMIN" -qc "DROP DATABASE IF EXISTS $PGDB" -c "CREATE DATABASE $PGDB" >/dev/null
PG_URL="${PG_ADMIN%/*}/$PGDB"
trap 'kill $SIM_PID 2>/dev/null || true; psql "$PG_ADMIN" -qc "DROP DATABASE IF EXISTS $PGDB" >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
SRC="$WORK/bench.db"

timed() { # label, then the command; prints seconds and peak RSS (MiB)
    local label="$1"; shift
    local s e
    s=$(date +%s.%N)
    /usr/bin/time -v "$@" >"$WORK/out" 2>"$WORK/time" || { cat "$WORK/time" >&2; exit 1; }
    e=$(date +%s.%N)
    LAST_SECS=$(python3 -c "print(f'{$e-$s:.2f}')")
    LAST_RSS=$(awk '/Maximum resident/ {printf "%.1f", $6/1024}' "$WORK/time")
    printf "%-44s %8s s  peak RSS %7s MiB\n" "$label" "$LAST_SECS" "$LAST_RSS"
}

$BIN poll --once >/dev/null
kill $SIM_PID
for b in cases parties timeline; do $BIN project rebuild "$b" >/dev/null; done
STORED=$(sqlite3 "$SRC" "SELECT COUNT(*) FROM actions")
echo "replica: $STORED actions, $(sqlite3 "$SRC" "SELECT COUNT(*) FROM cases") cases"

# Snapshots.
timed "snapshot create ($STORED actions)" $BIN snapshot create --out "$WORK/snap"
echo "  snapshot size: $(du -sm "$WORK/snap" | cut -f1) MiB in $(ls "$WORK/snap" | grep -c ndjson) chunks"
timed "snapshot restore into SQLite" env ISIR_DATABASE__URL="sqlite://$WORK/restored.db" $BIN snapshot restore "$WORK/snap" --no-project
python3 -c "print(f'  = {$STORED/$LAST_SECS:,.0f} actions/s')"
timed "snapshot restore into PostgreSQL" env ISIR_DATABASE__URL="$PG_URL" $BIN snapshot restore "$WORK/snap" --no-project
python3 -c "print(f'  = {$STORED/$LAST_SECS:,.0f} actions/s')"
for b in cases parties timeline; do ISIR_DATABASE__URL="$PG_URL" $BIN project rebuild "$b" >/dev/null; done

# Exports against sqlite3 -csv and COPY TO, table by table.
compare() { # table, view
    local t="$1" v="$2"
    timed "sqlite3 -csv $v" sqlite3 -csv -header "$SRC" "SELECT * FROM $v"
    local base=$LAST_SECS brss=$LAST_RSS rows
    rows=$(($(wc -l <"$WORK/out") - 1))
    rm -rf "$WORK/e-$t"
    timed "isir export --tables $t (SQLite)" $BIN export --out "$WORK/e-$t" --tables "$t"
    python3 -c "print(f'  {$rows} rows; isir/sqlite3 speed ratio {$base/max($LAST_SECS,0.01):.2f}')"
    timed "COPY (SELECT * FROM $v) TO STDOUT CSV" psql "$PG_URL" -qc "\\copy (SELECT * FROM $v) TO STDOUT CSV HEADER"
    base=$LAST_SECS
    rm -rf "$WORK/p-$t"
    timed "isir export --tables $t (PostgreSQL)" env ISIR_DATABASE__URL="$PG_URL" $BIN export --out "$WORK/p-$t" --tables "$t"
    python3 -c "print(f'  isir/COPY speed ratio {$base/max($LAST_SECS,0.01):.2f}')"
}
compare cases cases
compare parties parties
compare events timeline
