#!/usr/bin/env bash
# Two builds rebuilding one projection on copies of the same SQLite store, alternating
# (each round in the opposite order of the one before): wall time and peak resident
# memory; with CALLGRIND=1 once each under `valgrind --tool=callgrind`, whose
# instruction count does not depend on what else the machine is doing (the figure to
# trust on a shared machine), the per-function counts left in the output directory.
#   bench/ab_rebuild.sh OLD_BIN NEW_BIN STORE BUILDER [ROUNDS]
#   (STORE: a SQLite store with a replica, e.g. bench/data/api-50000.db, or a PostgreSQL
#   database's URL, postgres://host/db; it is only copied, never written. A PostgreSQL
#   store is copied as a database made from it as a template, ab_old_<pid> and
#   ab_new_<pid> on the same server, dropped at the end; nothing may be connected to it.)
set -euo pipefail
OLD="$1"; NEW="$2"; DB="$3"; B="$4"; ROUNDS="${5:-3}"
for f in "$OLD" "$NEW"; do [ -e "$f" ] || { echo "ab_rebuild.sh: no $f" >&2; exit 2; }; done
W="${AB_OUT:-$(mktemp -d)}"; mkdir -p "$W"
echo "copies and callgrind output in $W"
case "$DB" in
postgres://* | postgresql://*)
    server="${DB%/*}"; src="${DB##*/}"
    for v in old new; do
        psql "$server/postgres" -qc "DROP DATABASE IF EXISTS ab_${v}_$$" \
            -c "CREATE DATABASE ab_${v}_$$ TEMPLATE $src"
    done
    trap 'for v in old new; do psql "$server/postgres" -qc "DROP DATABASE IF EXISTS ab_${v}_$$"; done' EXIT
    url() { echo "$server/ab_${1}_$$"; }
    ;;
*)
    [ -e "$DB" ] || { echo "ab_rebuild.sh: no $DB" >&2; exit 2; }
    # Each build on its own copy, so that neither reads what the other wrote.
    for v in old new; do sqlite3 "$DB" ".backup '$W/$v.db'"; done
    url() { echo "sqlite://$W/$1.db"; }
    ;;
esac
run() { # $1 old|new, then the command's prefix
    local v="$1" bin="$OLD"; shift
    [ "$v" = new ] && bin="$NEW"
    ISIR_DATABASE__URL="$(url "$v")" ISIR_LOG=error "$@" "$bin" project rebuild "$B" >/dev/null
}
order="old new"
for r in $(seq "$ROUNDS"); do
    for v in $order; do
        run "$v" /usr/bin/time -o "$W/time" -f "%e %M"
        t="$(tail -1 "$W/time")"
        printf "round %d %-3s %6.2f s wall, peak RSS %6.1f MiB\n" "$r" "$v" "${t% *}" "$(echo "${t#* } / 1024" | bc -l)"
    done
    order="$(echo "$order" | awk '{print $2, $1}')"
done
if [ -n "${CALLGRIND:-}" ]; then
    for v in old new; do
        run "$v" valgrind --tool=callgrind --callgrind-out-file="$W/callgrind.$v" -q
        printf "%-3s %s instructions\n" "$v" "$(callgrind_annotate "$W/callgrind.$v" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')"
    done
    echo "per function: callgrind_annotate $W/callgrind.old | head -40 (and .new)"
fi
