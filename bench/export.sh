#!/usr/bin/env bash
# Exports and snapshots, side by side in one run on the same data:
#   - snapshot create, and restore into an empty SQLite and an empty PostgreSQL (actions/s);
#   - `isir export` per table against `sqlite3 -csv` over the same tables (SQLite) and
#     against `COPY (...) TO STDOUT CSV` (PostgreSQL), with wall time and peak RSS;
#   - `isir export --format parquet` table by table against `--format csv` (time, size)
#     and against DuckDB's own writer, `COPY (SELECT ...) TO '...' (FORMAT parquet)` over
#     the SQLite file (bench/parquet_duckdb.py), on both back ends;
#   - all tables with --format csv, parquet and csv,parquet (both from one read);
#   - debtors per court and month in DuckDB over our Parquet, our CSV and the SQLite file
#     (DuckDB's sqlite scanner).
#   bench/export.sh [N actions] (default 2000000)
# PARTS (default "snapshot csv parquet") picks the parts; the replica and both back ends'
# projections are built whatever it says.
# PostgreSQL from ISIR_TEST_PG (default the local one); a scratch database is created.
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-2000000}"
case "$N" in ""|*[!0-9]*) echo "usage: bench/export.sh [N actions]" >&2; exit 2 ;; esac
. bench/lib.sh
bench_setup "$N"
PG_ADMIN="${ISIR_TEST_PG:-postgres://postgres@127.0.0.1:5432/postgres}"
PGDB="isir_bench_export_$$"
psql "$PG_ADMIN" -qc "DROP DATABASE IF EXISTS $PGDB" -c "CREATE DATABASE $PGDB" >/dev/null
PG_URL="${PG_ADMIN%/*}/$PGDB"
# KEEP=1 keeps the work directory (the replica, the exports) and names it at the end.
trap 'kill $SIM_PID 2>/dev/null || true; psql "$PG_ADMIN" -qc "DROP DATABASE IF EXISTS $PGDB" >/dev/null 2>&1 || true; if [ -n "${KEEP:-}" ]; then echo "kept: $WORK"; else rm -rf "$WORK"; fi' EXIT
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

PARTS="${PARTS:-snapshot csv parquet}"
has() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# Snapshots (the PostgreSQL side is restored from one whatever PARTS says).
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
if has csv; then
    compare cases cases
    compare parties parties
    compare events timeline
fi
has parquet || exit 0

# Parquet: ours against our CSV and against DuckDB's own writer, table by table.
BPY="$(scripts/analysts-env.sh --bench)"
echo "DuckDB $("$BPY" -c 'import duckdb; print(duckdb.__version__)') (its writer and the query: $(nproc) threads)"
RESULTS="$WORK/parquet.tsv"
: >"$RESULTS"
for be in sqlite postgres; do
    url="sqlite://$SRC"
    [ "$be" = postgres ] && url="$PG_URL"
    for t in cases parties events stats; do
        for f in csv parquet; do
            rm -rf "$WORK/$f-$be-$t"
            timed "isir export --tables $t --format $f ($be)" env ISIR_DATABASE__URL="$url" \
                $BIN export --out "$WORK/$f-$be-$t" --tables "$t" --format "$f"
            read -r bytes rows < <(python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print(sum(f['bytes'] for f in m['files']), sum(f['rows'] for f in m['files']))" "$WORK/$f-$be-$t/manifest.json")
            printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$be" "$t" "$f" "$LAST_SECS" "$bytes" "$rows" "$LAST_RSS" >>"$RESULTS"
        done
    done
done
# The floor: DuckDB over the SQLite file, the columns and types of our manifests.
python3 - "$WORK" >"$WORK/manifest-all.json" <<'PY'
import json, sys
w = sys.argv[1]
files = []
for t in ("cases", "parties", "events", "stats"):
    files += json.load(open(f"{w}/parquet-sqlite-{t}/manifest.json"))["files"]
print(json.dumps({"files": files}))
PY
"$BPY" bench/parquet_duckdb.py floor "$SRC" "$WORK/manifest-all.json" "$WORK/duckdb" | tee -a "$WORK/floor.txt"
python3 - "$RESULTS" "$WORK/floor.txt" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
floor = {l.split()[1]: (float(l.split()[2]), int(l.split()[3]), int(l.split()[4])) for l in open(sys.argv[2]) if l.startswith("FLOOR")}
r = {(b, t, f): (float(s), int(by), int(n), rss) for b, t, f, s, by, n, rss in rows}
print()
print(f"{'back end':9} {'table':8} {'rows':>9} {'CSV s':>7} {'Parquet s':>9} {'×CSV':>5} {'CSV MB':>8} {'Parquet MB':>10} {'×size':>6} {'DuckDB s':>8} {'×DuckDB':>7} {'DuckDB MB':>9} {'RSS MiB':>8}")
for b in ("sqlite", "postgres"):
    tot = [0.0, 0.0, 0, 0, 0.0]
    for t in ("cases", "parties", "events", "stats"):
        cs, cb, n, _ = r[(b, t, "csv")]
        ps, pb, pn, rss = r[(b, t, "parquet")]
        ds, db, dn = floor[t]
        assert n == pn == dn, ("rows differ", b, t, n, pn, dn)
        tot = [tot[0] + cs, tot[1] + ps, tot[2] + cb, tot[3] + pb, tot[4] + ds]
        print(f"{b:9} {t:8} {n:9} {cs:7.2f} {ps:9.2f} {ps/cs:5.2f} {cb/1e6:8.2f} {pb/1e6:10.2f} {pb/cb:6.3f} {ds:8.2f} {ps/ds:7.2f} {db/1e6:9.2f} {rss:>8}")
    cs, ps, cb, pb, ds = tot
    print(f"{b:9} {'all':8} {'':9} {cs:7.2f} {ps:9.2f} {ps/cs:5.2f} {cb/1e6:8.2f} {pb/1e6:10.2f} {pb/cb:6.3f} {ds:8.2f} {ps/ds:7.2f}")
PY

# All tables in one export: each format alone, then both (each table read once for both,
# except PostgreSQL's events).
for be in sqlite postgres; do
    url="sqlite://$SRC"
    [ "$be" = postgres ] && url="$PG_URL"
    for f in csv parquet csv,parquet; do
        rm -rf "$WORK/all-$be"
        timed "isir export --format $f, all tables ($be)" env ISIR_DATABASE__URL="$url" \
            $BIN export --out "$WORK/all-$be" --format "$f"
        eval "ALL_${f/,/_}=$LAST_SECS"
    done
    rm -rf "$WORK/all-$be"
    python3 -c "print(f'  $be: csv + parquet one at a time {$ALL_csv+$ALL_parquet:.2f} s, both in one export {$ALL_csv_parquet:.2f} s: {$ALL_csv_parquet/($ALL_csv+$ALL_parquet):.2f}x')"
done

# Debtors per court and month, in DuckDB over each source (both back ends' files).
for be in sqlite postgres; do
    mkdir -p "$WORK/q-$be"
    for f in csv parquet; do
        for t in cases parties; do ln -sf "$WORK/$f-$be-$t/$t.$f" "$WORK/q-$be/"; done
    done
    echo "debtors per court and month, $be's export:"
    "$BPY" bench/parquet_duckdb.py query "$SRC" "$WORK/q-$be" "$WORK/q-$be" "$WORK/duckdb" 5 | tee "$WORK/query-$be.txt"
    python3 - "$WORK/query-$be.txt" <<'PY'
import sys
best = {(l.split()[1], l.split()[2]): float(l.split()[3]) for l in open(sys.argv[1]) if l.startswith("QUERY")}
for form in ("date", "text"):
    p, d, c, s = (best[(form, x)] for x in ("parquet", "duckdb-parquet", "csv", "sqlite"))
    print(f"  month by {form}: parquet {p*1e3:.1f} ms, CSV {c*1e3:.1f} ms: {c/p:.1f}x; DuckDB's parquet {c/d:.1f}x; sqlite scanner {s*1e3:.1f} ms")
PY
done
