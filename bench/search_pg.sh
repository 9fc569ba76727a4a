#!/usr/bin/env bash
# Name search on PostgreSQL at the scale of a SQLite API fixture, without the whole
# PostgreSQL copy (#20): the fixture's persons, name index and cases are copied into a
# PostgreSQL database (the same rows the parties builder writes), and pgbench runs
#   - this release's statements (the exact names, then the other matches by a walk of
#     the term table, newest first by the person's latest action: what `/v1/search`
#     runs for a page of texts whose words are 2-4 letters), with terms of 2-6 letters
#     and, to compare, 2-8,
#   - the release before's (the other matches from a window of the newest persons by
#     their prefix terms' array, and beyond it by the terms' GIN index),
#   - the one before that (the other matches by `tsvector` prefixes), and
#   - the one statement of the release before that (every match ranked by its case's
#     latest action, joined to the case),
# each prepared, with the texts `bench/lists.sh` uses (a surname's first four letters
# and a given name's first two), on the same tables.
#   bench/search_pg.sh [CASES]   (default 1000000; the fixture bench/data/api-CASES.db
#   must be built: `ONLY_SQLITE=1 PREPARE_ONLY=1 bench/lists.sh CASES`)
# Needs sqlite3, psql, pgbench, python3 and a PostgreSQL server (ISIR_BENCH_PG).
set -euo pipefail
cd "$(dirname "$0")/.."
CASES="${1:-1000000}"
DUR="${DUR:-10}"
CONN="${CONN:-32}"
DB="bench/data/api-$CASES.db"
PG="${ISIR_BENCH_PG:-postgres://postgres@127.0.0.1:5432}"
PGDB="isir_names_$CASES"
[ -f "$DB.done" ] || { echo "no built fixture $DB" >&2; exit 2; }
PV="$(sqlite3 "$DB" "SELECT version FROM proj_meta WHERE name = 'parties'")"
CV="$(sqlite3 "$DB" "SELECT version FROM proj_meta WHERE name = 'cases'")"
if [ "$(psql "$PG/postgres" -Atqc "SELECT COUNT(*) FROM pg_database WHERE datname = '$PGDB'")" != 1 ] \
    || [ "$(psql "$PG/$PGDB" -Atqc "SELECT COUNT(*) FROM pg_class WHERE relname = 'copied'")" != 1 ]; then
    s=$(date +%s)
    psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $PGDB" -c "CREATE DATABASE $PGDB"
    psql "$PG/$PGDB" -q <<SQL
CREATE TABLE names (case_number TEXT NOT NULL, court TEXT NOT NULL, person_id TEXT NOT NULL,
  words TEXT NOT NULL, exact TEXT NOT NULL, birth_year BIGINT, role TEXT, kind TEXT,
  latest BIGINT NOT NULL, PRIMARY KEY (case_number, court, person_id));
CREATE TABLE parties (case_number TEXT NOT NULL, court TEXT NOT NULL, person_id TEXT NOT NULL,
  doc TEXT NOT NULL, PRIMARY KEY (case_number, court, person_id));
CREATE TABLE cases (case_number TEXT PRIMARY KEY, court_short TEXT, latest_action_id BIGINT NOT NULL);
SQL
    sqlite3 -csv "$DB" "SELECT n.case_number, n.court, n.person_id, n.words, n.exact, CAST(substr(COALESCE(p.birth_date, json_extract(p.doc, '$.birth_date')), 1, 4) AS INTEGER), p.role, p.kind, abs(n.rowid) FROM names_v$PV n CROSS JOIN parties_v$PV p ON p.rowid = n.prow" \
        | psql "$PG/$PGDB" -qc "COPY names FROM STDIN WITH (FORMAT csv)"
    sqlite3 -csv "$DB" "SELECT case_number, court, person_id, doc FROM parties" \
        | psql "$PG/$PGDB" -qc "COPY parties FROM STDIN WITH (FORMAT csv)"
    sqlite3 -csv "$DB" "SELECT case_number, court_short, latest_action_id FROM cases_v$CV" \
        | psql "$PG/$PGDB" -qc "COPY cases FROM STDIN WITH (FORMAT csv)"
    # This release's indexes (`projection::names::ddl`), and the previous release's
    # ranking index of the cases.
    psql "$PG/$PGDB" -q <<SQL
CREATE INDEX names_words ON names USING GIN (to_tsvector('simple', words));
CREATE INDEX names_exact ON names (exact, latest);
CREATE INDEX names_latest ON names (latest);
CREATE INDEX cases_latest ON cases (latest_action_id);
ANALYZE names; ANALYZE parties; ANALYZE cases;
CREATE TABLE copied ();
SQL
    echo "copied $(psql "$PG/$PGDB" -Atqc "SELECT COUNT(*) FROM names") persons in $(( $(date +%s) - s )) s"
fi
# This release's prefix terms (`projection::names::prefix_terms`, here in SQL: each
# word's 2- to 4-letter prefixes, the order of no matter to the index) and their index.
# (An earlier proposal of this script kept them as a `text[]`: replaced.)
if [ "$(psql "$PG/$PGDB" -Atqc "SELECT COUNT(*) FROM information_schema.columns WHERE table_name = 'names' AND column_name = 'terms' AND data_type = 'text'")" != 1 ]; then
    s=$(date +%s)
    psql "$PG/$PGDB" -q <<SQL
ALTER TABLE names DROP COLUMN IF EXISTS terms;
ALTER TABLE names ADD COLUMN terms TEXT;
UPDATE names SET terms = array_to_string(ARRAY(SELECT DISTINCT left(w, l) FROM unnest(string_to_array(words, ' ')) w, generate_series(2, 4) l WHERE length(w) >= l), ' ');
CREATE INDEX names_terms ON names USING GIN ((string_to_array(terms, ' ')));
VACUUM ANALYZE names;
SQL
    echo "prefix terms added in $(( $(date +%s) - s )) s"
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# The texts, folded as the API folds them (`fold_texts` of bench/lib.sh: those whose
# words are 2-4 characters each), with each one's exact key, its text query (the
# previous release's) and its words' array (this release's).
source bench/lib.sh
sqlite3 "$DB" "SELECT substr(json_extract(doc, '$.name'), 1, 4) || ' ' || substr(json_extract(doc, '$.first_name'), 1, 2) FROM parties WHERE role = 'DLUŽNÍK' AND json_extract(doc, '$.first_name') IS NOT NULL ORDER BY random() LIMIT 2000" \
    | fold_texts sql | awk -F'|' '{ q = $2; gsub(/[{}"]/, "", q); gsub(/,/, ":* \\& ", q); printf "%d\t%s\t%s:*\t%s\n", NR, $1, q, $2 }' >"$WORK/texts"
psql "$PG/$PGDB" -q -c "DROP TABLE IF EXISTS bench_t" -c "CREATE TABLE bench_t (i INT PRIMARY KEY, exact TEXT, q TEXT, arr TEXT[])" \
    -c "\\copy bench_t FROM '$WORK/texts'"
N=$(wc -l <"$WORK/texts")
E="(SELECT exact FROM bench_t WHERE i = :i)"
Q="to_tsquery('simple', (SELECT q FROM bench_t WHERE i = :i))"
PAGE="SELECT h.latest::text || '|' || p.doc FROM h JOIN parties p ON p.case_number = h.case_number AND p.court = h.court AND p.person_id = h.person_id ORDER BY h.latest DESC"
run() { # $1 label, $2 script
    printf '\\set i random(1, %s)\n%s\n' "$N" "$2" >"$WORK/pg.sql"
    local out tps lat
    out=$(pgbench -n -M prepared -c "$CONN" -j 2 -T "$DUR" -f "$WORK/pg.sql" "$PG/$PGDB" 2>&1)
    tps=$(grep -o 'tps = [0-9.]*' <<<"$out" | head -1 | cut -d' ' -f3)
    lat=$(grep -o 'latency average = [0-9.]* ms' <<<"$out" | cut -d' ' -f4)
    printf "%-44s %8.1f tps  (average latency %s ms)\n" "$1" "${tps:-0}" "$lat"
}
echo "pgbench: $CONN clients, 2 threads, $DUR s, prepared; $(nproc) cores shared with PostgreSQL"
# The release before this one's (`3e86054`..`46deec9`): the exact names, then the
# other matches among the 10 000 newest persons by their prefix terms' array, then older
# ones by the terms' GIN index, each page's documents joined (all three, as for a rare
# text).
A="(SELECT arr FROM bench_t WHERE i = :i)"
OLDPICK="WITH h AS (SELECT n.latest, n.case_number, n.court, n.person_id FROM"
OLDTERMS="string_to_array(n.terms, ' ') @> $A AND n.exact <> $E"
run "the release before: exact, window, beyond" "$OLDPICK names n WHERE n.exact = $E ORDER BY n.latest DESC LIMIT 51) $PAGE;
$OLDPICK (SELECT * FROM names ORDER BY latest DESC LIMIT 10000) n WHERE $OLDTERMS ORDER BY n.latest DESC LIMIT 51) $PAGE;
$OLDPICK names n WHERE $OLDTERMS AND n.latest < (SELECT MIN(latest) FROM (SELECT latest FROM names ORDER BY latest DESC LIMIT 10000) w HAVING COUNT(*) = 10000) ORDER BY n.latest + 0 DESC LIMIT 51) $PAGE;"
run "two releases before: exact tier + tsvector tier" "WITH h AS (SELECT n.latest, n.case_number, n.court, n.person_id FROM names n WHERE n.exact = $E ORDER BY n.latest DESC LIMIT 51) $PAGE;
WITH h AS (SELECT n.latest, n.case_number, n.court, n.person_id FROM names n WHERE to_tsvector('simple', n.words) @@ $Q AND n.exact <> $E ORDER BY n.latest DESC LIMIT 51) $PAGE;"
run "three releases before: every match ranked" "WITH h AS (SELECT CASE WHEN n.exact = $E THEN 0 ELSE 1 END AS tier, c.latest_action_id AS latest, n.case_number, n.court, n.person_id FROM names n JOIN cases c ON c.case_number = n.case_number WHERE to_tsvector('simple', n.words) @@ $Q ORDER BY tier, latest DESC, n.case_number, n.court, n.person_id LIMIT 51) SELECT CAST(h.tier AS TEXT) || '|' || h.latest::text || '|' || p.doc FROM h JOIN parties p ON p.case_number = h.case_number AND p.court = h.court AND p.person_id = h.person_id ORDER BY h.tier, h.latest DESC, h.case_number, h.court, h.person_id;"

# This release's (issue 37): a term table, one row per (prefix term, person) keyed by
# the person's latest action, its primary key in that order, so that a page is a walk
# of one term's rows newest first that stops at the page's end (FTS5's walk, on a
# B-tree), each row's other words probed by the same key (`pg_search_sql`). TERMS_L: the
# longest prefixes kept as terms to compare (each word's prefixes of 2 to L characters;
# default "6 8"; the release keeps 6, `readmodel::keys::PG_TERMS`).
for L in ${TERMS_L:-6 8}; do
    T="name_terms_$L"
    if [ "$(psql "$PG/$PGDB" -Atqc "SELECT COUNT(*) FROM pg_class WHERE relname = '$T'")" != 1 ]; then
        s=$(date +%s)
        psql "$PG/$PGDB" -q <<SQL
CREATE TABLE $T (term TEXT NOT NULL, latest BIGINT NOT NULL);
INSERT INTO $T SELECT DISTINCT left(w, l), latest FROM names, unnest(string_to_array(words, ' ')) w, generate_series(2, $L) l WHERE length(w) >= l;
ALTER TABLE $T ADD PRIMARY KEY (term, latest);
VACUUM ANALYZE $T;
SQL
        echo "$T built in $(( $(date +%s) - s )) s"
    fi
    echo "$T: $(psql "$PG/$PGDB" -Atqc "SELECT COUNT(*) || ' rows, ' || pg_size_pretty(pg_total_relation_size('$T')) || ' (names ' || pg_size_pretty(pg_total_relation_size('names')) || ', ' || (SELECT COUNT(*) FROM names) || ' persons)' FROM $T")"
    psql "$PG/$PGDB" -q -c "CREATE OR REPLACE VIEW name_terms AS SELECT * FROM $T"
    PGOPTIONS="-c plan_cache_mode=force_generic_plan" run "this release, terms of 2-$L letters: exact, walk" \
        "$(pg_search_sql "SELECT exact, arr AS w FROM bench_t WHERE i = :i");"
done
