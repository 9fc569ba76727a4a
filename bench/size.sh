#!/usr/bin/env bash
# Bytes per action at rest, side by side in one run on the same stream: the replica and
# its projections with the notes stored as text (as the release before note
# dictionaries stored them: `ISIR_FIXTURE_PLAIN_NOTES=1`) and compressed with the
# dictionaries a running replica trains (`store::notes`), on SQLite (dbstat: every
# table's and index's pages) and PostgreSQL (pg_total_relation_size: heap, TOAST and
# indexes). Projections are built by `isir project rebuild`, as `bench/lib.sh`'s
# fixtures are.
#   bench/size.sh [CASES]    (default 20 000 cases, about 390 000 actions)
set -euo pipefail
cd "$(dirname "$0")/.."
CASES="${1:-20000}"
PG_ADMIN="${ISIR_TEST_PG:-postgres://postgres@127.0.0.1:5432/postgres}"
PG="${PG_ADMIN%/*}"
WORK="$(mktemp -d)"
trap 'for m in plain dict; do psql "$PG_ADMIN" -qc "DROP DATABASE IF EXISTS isir_size_${m}_$$ WITH (FORCE)" >/dev/null 2>&1 || true; done; rm -rf "$WORK"' EXIT
cargo build --release -q
BIN=target/release/isir

# The replica's tables: the actions, their case index, the note dictionaries.
REPLICA="'actions', 'actions_case', 'note_dicts', 'sqlite_autoindex_note_dicts_1', 'sqlite_autoindex_note_dicts_2'"
for mode in plain dict; do
    plain=0; [ "$mode" = plain ] && plain=1
    db="$WORK/$mode.db"
    ISIR_FIXTURE_PLAIN_NOTES=$plain ISIR_FIXTURE_DB="sqlite://$db" ISIR_FIXTURE_CASES="$CASES" \
        cargo bench -q --bench api_fixture 2>&1 | grep "stored in" || true
    for b in cases parties timeline; do
        ISIR_DATABASE__URL="sqlite://$db" ISIR_LOG=warn $BIN project rebuild "$b" >/dev/null
    done
    sqlite3 "$db" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
    sqlite3 "$db" "SELECT '$mode sqlite: ' || n || ' actions; replica ' || printf('%.0f', r * 1.0 / n) \
        || ' B/action; projections ' || printf('%.0f', (t - r) * 1.0 / n) || ' B/action; total ' \
        || printf('%.0f', t * 1.0 / n) || ' B/action (' || printf('%.1f', t / 1e6) || ' MB)' \
        FROM (SELECT (SELECT COUNT(*) FROM actions) AS n, \
                     (SELECT SUM(pgsize) FROM dbstat WHERE name IN ($REPLICA)) AS r, \
                     (SELECT SUM(pgsize) FROM dbstat) AS t)"
    sqlite3 "$db" "SELECT '  ' || name || ': ' || printf('%.0f', SUM(pgsize) * 1.0 / (SELECT COUNT(*) FROM actions)) || ' B/action' \
        FROM dbstat GROUP BY name HAVING SUM(pgsize) * 1.0 / (SELECT COUNT(*) FROM actions) >= 5 ORDER BY SUM(pgsize) DESC"

    pgdb="isir_size_${mode}_$$"
    psql "$PG_ADMIN" -qc "CREATE DATABASE $pgdb" >/dev/null
    ISIR_FIXTURE_PLAIN_NOTES=$plain ISIR_FIXTURE_DB="$PG/$pgdb" ISIR_FIXTURE_CASES="$CASES" \
        cargo bench -q --bench api_fixture 2>&1 | grep "stored in" || true
    for b in cases parties timeline; do
        ISIR_DATABASE__URL="$PG/$pgdb" ISIR_LOG=warn $BIN project rebuild "$b" >/dev/null
    done
    psql "$PG/$pgdb" -qc "VACUUM ANALYZE" >/dev/null
    psql "$PG/$pgdb" -Atc "SELECT '$mode postgres: ' || n || ' actions; replica ' || round(r::numeric / n) \
        || ' B/action; projections ' || round((t - r)::numeric / n) || ' B/action; total ' \
        || round(t::numeric / n) || ' B/action (' || round(t / 1e6, 1) || ' MB)' \
        FROM (SELECT (SELECT COUNT(*) FROM actions) AS n, \
                     pg_total_relation_size('actions') + pg_total_relation_size('note_dicts') AS r, \
                     (SELECT SUM(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace \
                      WHERE s.nspname = current_schema() AND c.relkind IN ('r', 'm')) AS t) x"
done
