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
