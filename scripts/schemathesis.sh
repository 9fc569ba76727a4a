#!/usr/bin/env bash
# Schemathesis (from PyPI) against the read API's own /openapi.json: starts `isir demo`
# on a free loopback port with simulator data (phase serve, the rate limit raised so
# the run is not throttled), and fails on any 5xx or any answer that breaks the
# description (status code, content type, headers, body schema).
#   scripts/schemathesis.sh [extra schemathesis options]
# Run by scripts/test.sh after `cargo test` has built target/debug/isir.
set -euo pipefail
cd "$(dirname "$0")/.."

ST_VERSION="4.32.5"
VENV="${ISIR_ST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/isir/schemathesis-$ST_VERSION}"
SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi

if [ ! -x "$VENV/bin/schemathesis" ]; then
    if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c "import ensurepip" 2>/dev/null; then
        echo "schemathesis.sh: installing python3-venv"
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv
    fi
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "schemathesis==$ST_VERSION"
fi

BIN="${ISIR_BIN:-target/debug/isir}"
[ -x "$BIN" ] || cargo build -q --bin isir
WORK="$(mktemp -d)"
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
# A key scoped to every watchlist, so that the watchlist feed is exercised beyond its
# 403 (Schemathesis sends it with every request; it has no `pii` scope).
ST_KEY="schemathesis-key"
cat >"$WORK/isir.toml" <<TOML
[[api.keys]]
name = "schemathesis"
sha256 = "$(printf %s "$ST_KEY" | sha256sum | cut -d' ' -f1)"
scopes = ["watch:*"]
TOML
export ISIR_CONFIG="$WORK/isir.toml"
ISIR_API__RATE_PER_SECOND=1000000 ISIR_API__BURST=1000000 \
    "$BIN" demo --actions 5000 --period 3600 --live-rate 0 \
    --database "sqlite://$WORK/st.db" --api-bind "127.0.0.1:$PORT" >"$WORK/demo.log" 2>&1 &
DEMO=$!
trap 'kill $DEMO 2>/dev/null || true; wait $DEMO 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 300); do
    if curl -fs "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; then break; fi
    if ! kill -0 $DEMO 2>/dev/null; then cat "$WORK/demo.log" >&2; exit 1; fi
    sleep 0.2
done
curl -fs "http://127.0.0.1:$PORT/readyz" >/dev/null || { echo "schemathesis.sh: the demo never became ready" >&2; cat "$WORK/demo.log" >&2; exit 1; }

# The watchlist the description's example names, over the demo's first cases, with its
# feed from the start (its creation watermark moved back), so the feed has events.
CASES=$(curl -fs -H "X-API-Key: $ST_KEY" "http://127.0.0.1:$PORT/v1/cases?limit=20" \
    | python3 -c 'import json,sys; [print(c["case_number"]) for c in json.load(sys.stdin)["cases"]]')
ARGS=()
while IFS= read -r c; do ARGS+=(--case "$c"); done <<<"$CASES"
ISIR_DATABASE__URL="sqlite://$WORK/st.db" "$BIN" watch add partners "${ARGS[@]}" --roles all >/dev/null
python3 -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute("UPDATE watchlists SET created_watermark = -1, cursor = -1 WHERE name = ?", ("partners",)); c.commit()' "$WORK/st.db"

# One worker thread: CPython 3.11 before 3.11.8 shares the AST module's recursion
# counter between threads (gh-106905, fixed by python/cpython#113035), and with two
# workers Schemathesis's coverage phase died now and then in Hypothesis's lambda
# parsing ("AST constructor recursion depth mismatch", a Runtime Error of the tool, not
# of the API). This machine's python3 is 3.11.7.
"$VENV/bin/schemathesis" run "http://127.0.0.1:$PORT/openapi.json" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance,negative_data_rejection \
    -H "X-API-Key: $ST_KEY" \
    --max-examples "${ISIR_ST_EXAMPLES:-100}" --seed 1 --workers 1 --no-color "$@"
