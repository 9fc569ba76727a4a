# Shared by the bench scripts: build, start a simulator of N actions without usage
# limits on a free port, and point the writer at it with the budget lifted.
# Sets BIN, WORK, PORT, SIM_PID and the ISIR_ variables; cleans up on exit.
bench_setup() {
    local n="$1"
    cargo build --release -q
    BIN=target/release/isir
    WORK="$(mktemp -d)"
    trap 'kill $SIM_PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
    PORT=$((20000 + RANDOM % 20000))
    $BIN sim --port "$PORT" --actions "$n" --daily-limit 0 --per-minute-limit 0 >"$WORK/sim.log" 2>&1 &
    SIM_PID=$!
    for _ in $(seq 300); do curl -sf "http://127.0.0.1:$PORT/_sim/stats" >/dev/null && break; sleep 0.2; done
    export ISIR_SOURCE__URL="http://127.0.0.1:$PORT/isir_public_ws/IsirWsPublicService"
    export ISIR_DATABASE__URL="${ISIR_DATABASE__URL:-sqlite://$WORK/bench.db}"
    export ISIR_BUDGET__DAILY=100000000 ISIR_BUDGET__PER_MINUTE=100000000
    export ISIR_POLL__MAX_BATCHES_PER_TICK=100000000
    export ISIR_LOG=warn
}

# Starts `isir serve` of the binary `$1` on the SQLite file `$2` at port `$3`, without a
# rate limit, and waits until it is ready; sets SERVE_PID (the A/B scripts).
serve_sqlite() {
    serve_url "$1" "sqlite://$2" "$3"
}

# `serve_sqlite` on the database URL `$2` (a SQLite file's or PostgreSQL's).
serve_url() {
    ISIR_DATABASE__URL="$2" ISIR_LOG=warn ISIR_API__BIND="127.0.0.1:$3" \
        ISIR_API__RATE_PER_SECOND=100000000 ISIR_API__BURST=100000000 "$1" serve >/dev/null 2>&1 &
    SERVE_PID=$!
    for _ in $(seq 100); do curl -fs "http://127.0.0.1:$3/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
}

# A wrk script that requests `$2` (a path with one %s) for each line of the file `$1` in
# turn, and prints `RESULT requests req/s p50_ms p99_ms errors` when done; written to `$3`.
wrk_script() {
    cat >"$3" <<LUA
local vals = {}
for line in io.lines("$1") do vals[#vals + 1] = line end
local i = 0
request = function()
  i = i % #vals + 1
  return wrk.format("GET", string.format("$2", vals[i]))
end
$(wrk_done "%.0f")
LUA
}

# The `done` function of a wrk script: prints `RESULT requests req/s p50_ms p99_ms
# errors`, requests a second in the format `$1` (`%.0f`, or `%.2f` for slow requests).
wrk_done() {
    cat <<LUA
done = function(summary, latency, requests)
  io.write(string.format("RESULT %d $1 %.3f %.3f %d\\n", summary.requests,
    summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000,
    latency:percentile(99) / 1000, summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.timeout))
end
LUA
}

# 2000 random cases (`year/number|case number`, the case number URL-encoded) and 2000
# random debtor IČOs of the API fixture `$1`, written to `$2/cases` and `$2/icos`. (The
# simulator's clock runs past 2100 in a long stream; the API takes years 2008-2100.)
pick_lookups() {
    sqlite3 "$1" "SELECT year || '/' || number || '|' || replace(case_number, ' ', '%20') FROM cases WHERE year <= 2100 ORDER BY random() LIMIT 2000" >"$2/cases"
    sqlite3 "$1" "SELECT DISTINCT ico FROM parties WHERE ico IS NOT NULL AND role = 'DLUŽNÍK' ORDER BY random() LIMIT 2000" >"$2/icos"
}

# The API fixture of `$1` cases in the SQLite file `$2`: the simulator's replica stored
# straight (`benches/api_fixture.rs`), projections by the rebuild path, phase serve.
# Built once, kept (delete `$2*` to rebuild). Needs BIN.
api_fixture() {
    api_replica "$1" "$2"
    api_projections "$2"
}

# The replica of the API fixture (`api_fixture`'s first half; marked `$2.replica`).
api_replica() {
    local cases="$1" db="$2"
    if [ ! -f "$db.replica" ]; then
        rm -f "$db" "$db-wal" "$db-shm" "$db.done"
        mkdir -p "$(dirname "$db")"
        ISIR_FIXTURE_DB="sqlite://$db" ISIR_FIXTURE_CASES="$cases" cargo bench -q --bench api_fixture
        touch "$db.replica"
    fi
}

# The projections of the API fixture `$1` (`api_fixture`'s second half; marked `$1.done`).
api_projections() {
    local db="$1"
    if [ ! -f "$db.done" ]; then
        # The rebuild path (bulk, case-ordered) is the fast way to build from a full replica.
        for b in cases parties timeline; do
            local s; s=$(date +%s)
            ISIR_DATABASE__URL="sqlite://$db" ISIR_LOG=warn $BIN project rebuild "$b" >/dev/null
            echo "fixture: $b built in $(( $(date +%s) - s )) s"
        done
        ISIR_DATABASE__URL="sqlite://$db" ISIR_LOG=warn $BIN phase set serve --force >/dev/null
        sqlite3 "$db" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
        touch "$db.done"
    fi
}

# The PostgreSQL twin of the API fixture of `$1` cases in the database `$3` of the server
# `$2`, built as the SQLite one is (the same simulator stream, stored straight by
# `benches/api_fixture.rs`), without a snapshot of the SQLite file: cases rebuilt, then
# parties and timeline side by side, phase serve. PG_DROP_REPLICA=1 empties its replica
# once the projections stand (the read API reads projections only; at a million cases
# both fixtures with both replicas do not fit 80 GB). Kept once in the serve phase.
pg_fixture() {
    local cases="$1" pg="$2" pgdb="$3" s t p1 p2
    if [ "$(psql "$pg/postgres" -Atqc "SELECT COUNT(*) FROM pg_database WHERE datname = '$pgdb'")" = 1 ] \
        && [ "$(psql "$pg/$pgdb" -Atqc "SELECT value FROM settings WHERE key = 'phase'" 2>/dev/null)" = serve ]; then
        return 0
    fi
    [ "$(psql "$pg/postgres" -Atqc "SELECT COUNT(*) FROM pg_database WHERE datname = '$pgdb'")" = 1 ] \
        || psql "$pg/postgres" -qc "CREATE DATABASE $pgdb"
    s=$(date +%s)
    # (Resumes from its checkpoint when an earlier build stopped.)
    ISIR_FIXTURE_DB="$pg/$pgdb" ISIR_FIXTURE_CASES="$cases" cargo bench -q --bench api_fixture
    echo "postgres fixture: replica stored in $(( $(date +%s) - s )) s"
    t=$(date +%s)
    ISIR_DATABASE__URL="$pg/$pgdb" ISIR_LOG=warn $BIN project rebuild cases >/dev/null
    echo "postgres fixture: cases built in $(( $(date +%s) - t )) s"
    t=$(date +%s)
    ISIR_DATABASE__URL="$pg/$pgdb" ISIR_LOG=warn $BIN project rebuild parties >/dev/null & p1=$!
    ISIR_DATABASE__URL="$pg/$pgdb" ISIR_LOG=warn $BIN project rebuild timeline >/dev/null & p2=$!
    wait "$p1"; wait "$p2"
    echo "postgres fixture: parties and timeline built side by side in $(( $(date +%s) - t )) s"
    if [ -n "${PG_DROP_REPLICA:-}" ]; then
        psql "$pg/$pgdb" -qc "TRUNCATE actions"
        echo "postgres fixture: replica emptied (PG_DROP_REPLICA)"
    fi
    # (What autovacuum does in time: the statistics, and the visibility map that lets
    # index-only scans skip the table.)
    psql "$pg/$pgdb" -qc "VACUUM ANALYZE"
    ISIR_DATABASE__URL="$pg/$pgdb" ISIR_LOG=warn $BIN phase set serve --force >/dev/null
    echo "postgres fixture built in $(( $(date +%s) - s )) s"
}

# Search texts, one a line on stdin, folded as the API folds a person's name (lower
# case, diacritics off, split at anything not a letter or digit). `fold_texts url`
# prints those whose every word is 2-4 characters (what the prefix terms alone serve,
# so that the pgbench floor's statement is the API's own), URL-quoted; `fold_texts sql`
# prints each text's exact key (its words sorted, once each) and its words as a
# PostgreSQL array: `key|{"w1","w2"}`.
fold_texts() {
    python3 -c '
import sys, unicodedata, re, urllib.parse
for l in sys.stdin:
    t = urllib.parse.unquote(l.strip())
    f = "".join(c for c in unicodedata.normalize("NFKD", t.lower()) if not unicodedata.combining(c))
    w = [x for x in re.split(r"[^0-9a-z]+", f) if x]
    if not w or not all(2 <= len(x) <= 4 for x in w):
        continue
    if sys.argv[1] == "url":
        print(urllib.parse.quote(t))
    else:
        print(" ".join(sorted(set(w))) + "|{" + ",".join(chr(34) + x + chr(34) for x in w) + "}")' "$1"
}

# The cells the API selects of a person (`readmodel::party_cells::read_columns`, checked
# by tests/party_cells.rs), of the alias `$1` (none if empty), for its document to be put
# together in Rust.
PARTY_CELLS="doc, case_number, court, person_id, role, administrator_kind, kind, name, trade_name, first_name, title_before, title_after, legal_form, ico_text, ico, dic, birth_number_text, rc, birth_date, addresses, left_case, first_action_id, latest_action_id"
party_cells() {
    if [ -n "${1:-}" ]; then sed -E "s/([a-z_]+)/$1.\1/g" <<<"$PARTY_CELLS"; else echo "$PARTY_CELLS"; fi
}

# The API's statements for a first page of a name search on PostgreSQL
# (`read::search`), as a pgbench script: `$1` a statement that picks a text's values
# `exact` (its exact key) and `w` (its words, a `TEXT[]`), stored by `\gset`; then the
# exact names newest first, and the other matches by a walk of the longest word's term
# in the term table newest first, the other word probed by the same key (texts of two
# words of 2-4 letters: each its own term, none rechecked); each page's persons'
# cells joined. The values are binds, as the API sends them; run it with kept generic plans
# (`PGOPTIONS='-c plan_cache_mode=force_generic_plan'`), as the API plans a search.
pg_search_sql() {
    local page="SELECT h.latest, $(party_cells p) FROM h JOIN party_cells p ON p.case_number = h.case_number AND p.court = h.court AND p.person_id = h.person_id ORDER BY h.latest DESC"
    local pick="WITH h AS (SELECT n.latest, n.case_number, n.court, n.person_id FROM"
    local long="length(w[2]) > length(w[1])"
    echo "SELECT exact, CASE WHEN $long THEN w[2] ELSE w[1] END AS walk, COALESCE(CASE WHEN $long THEN w[1] ELSE w[2] END, w[1]) AS probe FROM ($1) v \gset
$pick names n WHERE n.exact = :exact ORDER BY n.latest DESC LIMIT 51) $page;
$pick name_terms t JOIN names n ON n.latest = t.latest WHERE t.term = :walk AND EXISTS (SELECT 1 FROM name_terms x WHERE x.term = :probe AND x.latest = t.latest) AND n.exact <> :exact ORDER BY t.latest DESC LIMIT 51) $page"
}
