#!/usr/bin/env bash
# Runs every test of the project. Starts PostgreSQL and Redis when they are not already
# running on 127.0.0.1 (installing them from Debian's packages when missing), so the
# tests never skip for want of a service.
set -euo pipefail
cd "$(dirname "$0")/.."

export ISIR_TEST_PG="${ISIR_TEST_PG:-postgres://postgres@127.0.0.1:5432/postgres}"
export ISIR_TEST_REDIS="${ISIR_TEST_REDIS:-redis://127.0.0.1:6379}"

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
APT_UPDATED=""
apt_install() {
    if [ -z "$APT_UPDATED" ]; then $SUDO apt-get update -qq; APT_UPDATED=1; fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@"
}

ensure_redis() {
    if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
        echo "test.sh: installing redis-server"
        apt_install redis-server
    fi
    if redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then return; fi
    echo "test.sh: starting redis-server on 127.0.0.1:6379"
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
        --dir /tmp --logfile /tmp/isir-test-redis.log
    for _ in $(seq 50); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && return; sleep 0.1; done
    echo "test.sh: redis did not start" >&2; exit 1
}

pg_ready() { psql "$ISIR_TEST_PG" -Atc "select 1" >/dev/null 2>&1; }

ensure_postgres() {
    if ! command -v psql >/dev/null || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
        echo "test.sh: installing postgresql"
        apt_install postgresql
    fi
    if pg_ready; then return; fi
    local ver
    ver="$(ls /etc/postgresql 2>/dev/null | sort -V | tail -1 || true)"
    if [ -z "$ver" ]; then
        ver="$(ls /usr/lib/postgresql | sort -V | tail -1)"
        $SUDO pg_createcluster "$ver" main
    fi
    local hba="/etc/postgresql/$ver/main/pg_hba.conf"
    if ! grep -q "isir-test" "$hba" 2>/dev/null; then
        # Loopback trust for the test user only, as on the CI machines.
        $SUDO sed -i '1i host all postgres 127.0.0.1/32 trust # isir-test' "$hba"
    fi
    echo "test.sh: starting PostgreSQL $ver"
    $SUDO pg_ctlcluster --skip-systemctl-redirect "$ver" main start || $SUDO pg_ctlcluster --skip-systemctl-redirect "$ver" main reload
    for _ in $(seq 100); do pg_ready && return; sleep 0.2; done
    echo "test.sh: PostgreSQL did not start" >&2; exit 1
}

ensure_redis
ensure_postgres
# DuckDB, pyarrow, pandas and Polars, the independent readers of the Parquet tests.
ISIR_TEST_PYTHON="$(scripts/analysts-env.sh)"
export ISIR_TEST_PYTHON

# The code's form first: formatted, and no clippy warning (each fails the run).
cargo fmt --check
cargo clippy --all-targets -- -D warnings
# The binary builds as a user builds it: without the tests' dev-dependencies, whose
# features would hide one the code needs and its own build lacks.
cargo check --locked --bin isir
# The API documentation builds without a broken link (ARCHITECTURE.md's codemap points
# into it).
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --lib

cargo test --all-targets "$@"

# Schemathesis against the API's own description (no 5xx, nothing that breaks it).
scripts/schemathesis.sh

# The HTML pages in headless Chromium: they render and show the right numbers.
scripts/browser-test.sh
