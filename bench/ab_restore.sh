#!/usr/bin/env bash
# Two builds restoring the same snapshot into an empty SQLite, alternating.
#   bench/ab_restore.sh OLD_BIN NEW_BIN SNAPSHOT_DIR [ROUNDS]
set -euo pipefail
OLD="$1"; NEW="$2"; SNAP="$3"; ROUNDS="${4:-2}"
W="$(mktemp -d)"; trap 'rm -rf "$W"' EXIT
for _ in $(seq "$ROUNDS"); do
    for v in old new; do
        BIN="$OLD"; [ "$v" = new ] && BIN="$NEW"
        rm -f "$W"/r.db*
        r=$(ISIR_DATABASE__URL="sqlite://$W/r.db" ISIR_LOG=error /usr/bin/time -f "%e s wall, peak RSS %M KB" \
            "$BIN" snapshot restore --no-project "$SNAP" 2>&1 | tr '\n' ' ')
        echo "$v: $r"
    done
done
