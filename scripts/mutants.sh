#!/usr/bin/env bash
# Mutation testing of the modules that carry the project's promises, each with the tests
# that guard it (issue 34; the record is in docs/TESTING.md). Not in CI: a full run takes
# hours on two cores.
#
#   scripts/mutants.sh                 every module below
#   scripts/mutants.sh budget lease    only these
#
# Needs cargo-mutants (`cargo install cargo-mutants --locked`), and PostgreSQL and Redis
# as for scripts/test.sh (it starts neither; ISIR_TEST_PG and ISIR_TEST_REDIS as there).
# Results go to mutants.out/<module>/mutants.out/ (mutants.out/<module>-KofN/ for a
# shard): caught.txt, missed.txt, unviable.txt, timeout.txt, outcomes.json.
#
# Environment:
#   MUTANTS_IN_PLACE=1    mutate this tree in place (a scratch worktree of your own, with
#                         a built target/: no copy per module). Without it, cargo-mutants
#                         copies the tree and target/ for every module.
#   MUTANTS_TIMEOUT=S     the longest a test run may take before the mutant counts as
#                         timed out (default: cargo-mutants' own, from the baseline).
#   MUTANTS_ITERATE=1     skip the mutants an earlier run already caught.
#   MUTANTS_SHARD=K/N     only the K-th of N parts of each module's mutants (K from 0),
#                         so that a long module can be run over several sittings.
#   MUTANTS_RE=REGEX      only the mutants whose names match (cargo-mutants' --re), e.g.
#                         'privacy.rs:(2[89]|3)[0-9][0-9]:' to go on from line 280.
#
# Test builds here carry no debug information (CARGO_PROFILE_DEV_DEBUG=0 unless set):
# linking the test binaries of every mutant is most of its time, and a mutant's outcome
# needs no debugger. The first build in a tree is therefore a full one.
set -euo pipefail
cd "$(dirname "$0")/.."

export ISIR_TEST_PG="${ISIR_TEST_PG:-postgres://postgres@127.0.0.1:5432/postgres}"
export ISIR_TEST_REDIS="${ISIR_TEST_REDIS:-redis://127.0.0.1:6379}"
export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-0}"

if ! cargo mutants --version >/dev/null 2>&1; then
    echo "mutants.sh: cargo-mutants is missing: cargo install cargo-mutants --locked" >&2
    exit 2
fi

# module | file | the test targets that guard it | only the tests whose names hold one
# of these (empty: all of those targets' tests) | but not those whose names hold one of
# these
TABLE='
privacy    | src/privacy.rs            | --lib --test privacy                               | |
checkpoint | src/checkpoint.rs         | --lib --test ingest --test outage                  | |
budget     | src/budget.rs             | --lib --test ingest                                | |
lease      | src/lease.rs              | --lib --test ingest                                | |
entries    | src/watchlist/entries.rs  | --lib --test watchlists                            | watchlist:: entries_are_validated |
deliver    | src/watchlist/deliver.rs  | --lib --test watchlists                            | |
purge      | src/export/purge.rs       | --lib --test privacy --test secrets                | erasure_reaches_kept_exports purge_touches_only_its_own the_purge_never export:: |
limit      | src/read/limit.rs         | --lib --test limits --test api                     | |
parse      | src/source/parse/*.rs     | --lib --test parser --test roundtrip --test spoiled | | sigkill_during snapshot_and_erasure
'
# (parse: the parser's own tests, its round trip and every spoiled-record test of the
# poller, but the child processes killed during a backfill and the snapshots, which guard
# the store and the exports; each would add a minute to every one of 272 mutants.)

known() { echo "$TABLE" | awk -F'|' 'NF==5 {gsub(/ /,"",$1); print $1}'; }

if [ $# -eq 0 ]; then set -- $(known); fi
for m in "$@"; do
    if ! known | grep -qx "$m"; then
        echo "mutants.sh: unknown module '$m'; known: $(known | tr '\n' ' ')" >&2
        exit 2
    fi
done

args=()
if [ "${MUTANTS_IN_PLACE:-}" = 1 ]; then args+=(--in-place); else args+=(--copy-target true); fi
if [ -n "${MUTANTS_TIMEOUT:-}" ]; then args+=(--timeout "$MUTANTS_TIMEOUT"); fi
if [ "${MUTANTS_ITERATE:-}" = 1 ]; then args+=(--iterate); fi
if [ -n "${MUTANTS_RE:-}" ]; then args+=(--re "$MUTANTS_RE"); fi
if [ -n "${MUTANTS_SHARD:-}" ]; then
    if ! [[ "$MUTANTS_SHARD" =~ ^[0-9]+/[1-9][0-9]*$ ]]; then
        echo "mutants.sh: MUTANTS_SHARD must be K/N (K from 0 to N-1), not '$MUTANTS_SHARD'" >&2
        exit 2
    fi
    args+=(--shard "$MUTANTS_SHARD")
fi

status=0
for m in "$@"; do
    line="$(echo "$TABLE" | awk -F'|' -v m="$m" 'NF==5 {k=$1; gsub(/ /,"",k); if (k==m) print}')"
    file="$(echo "$line" | awk -F'|' '{gsub(/ /,"",$2); print $2}')"
    read -r -a tests <<<"$(echo "$line" | awk -F'|' '{print $3}')"
    read -r -a only <<<"$(echo "$line" | awk -F'|' '{print $4}')"
    read -r -a skip <<<"$(echo "$line" | awk -F'|' '{print $5}')"
    echo "== $m: $file with ${tests[*]}${only[*]:+ (only ${only[*]})}${skip[*]:+ (but ${skip[*]})}"
    out="mutants.out/$m"
    if [ -n "${MUTANTS_SHARD:-}" ]; then out="$out-${MUTANTS_SHARD%/*}of${MUTANTS_SHARD#*/}"; fi
    mkdir -p "$out"
    # cargo-mutants exits 2 when a mutant was missed, 3 on a timeout: go on with the
    # next module and report at the end.
    # The targets go to every cargo invocation (the build of each mutant too, which
    # would otherwise link every test binary of the package).
    targets=()
    for t in "${tests[@]}"; do targets+=("--cargo-arg=$t"); done
    if [ "${#only[@]}" -gt 0 ] || [ "${#skip[@]}" -gt 0 ]; then
        targets+=("--cargo-test-arg=--")
        for o in "${only[@]}"; do targets+=("--cargo-test-arg=$o"); done
        for o in "${skip[@]}"; do targets+=("--cargo-test-arg=--skip" "--cargo-test-arg=$o"); done
    fi
    cargo mutants "${args[@]}" --no-shuffle -f "$file" -o "$out" "${targets[@]}" || status=$?
done
echo "mutants.sh: results under mutants.out/<module>/mutants.out/ (missed.txt is what a test must kill)"
exit "$status"
