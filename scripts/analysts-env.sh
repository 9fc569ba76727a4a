#!/usr/bin/env bash
# A Python environment with the readers analysts use (DuckDB, pyarrow, pandas, Polars),
# from PyPI at pinned versions, for the tests that read our Parquet exports with an
# independent reader and for bench/export.sh. Made once under the user's cache
# directory; prints the path of its python.
#   PY="$(scripts/analysts-env.sh)"
# With --bench, the environment of bench/export.sh instead: DuckDB 1.5.5 with its SQLite
# scanner as a PyPI package (DuckDB installs its extensions from its own server, which
# an offline machine cannot reach; 1.5.5 is the newest DuckDB that the PyPI packages of
# the scanner follow).
#   PY="$(scripts/analysts-env.sh --bench)"
set -euo pipefail
VERSIONS="duckdb==2.0.1 pyarrow==26.0.1 pandas==3.1.1 polars==2.1.0"
CHECK="import duckdb, pyarrow, pandas, polars"
NAME=analysts
case "${1:-}" in
    "") ;;
    --bench)
        VERSIONS="duckdb==1.5.5 duckdb-extension-sqlite-scanner==1.5.5"
        CHECK="import duckdb, duckdb_extension_sqlite_scanner"
        NAME=bench ;;
    *) echo "usage: scripts/analysts-env.sh [--bench]" >&2; exit 2 ;;
esac
TAG="$(printf %s "$VERSIONS" | sha256sum | cut -c1-12)"
VENV="${XDG_CACHE_HOME:-$HOME/.cache}/isir/$NAME-$TAG"
if [ "$NAME" = analysts ] && [ -n "${ISIR_ANALYSTS_VENV:-}" ]; then VENV="$ISIR_ANALYSTS_VENV"; fi
SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "$CHECK" 2>/dev/null; then
    if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c "import ensurepip" 2>/dev/null; then
        echo "analysts-env.sh: installing python3-venv" >&2
        $SUDO apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv >&2
    fi
    rm -rf "$VENV"
    python3 -m venv "$VENV" >&2
    # shellcheck disable=SC2086
    "$VENV/bin/pip" install -q $VERSIONS >&2
fi
echo "$VENV/bin/python"
