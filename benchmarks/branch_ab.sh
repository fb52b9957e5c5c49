#!/usr/bin/env bash
# One device call that checks a branch against main: both built side by side, the branch's tests, then
# engine_ab.py's timing alternated (main, branch, main, branch, ...) and its table.
#
#   here:   bash benchmarks/branch_ab.sh pack BRANCH       # archives main and BRANCH into .ab/ (git-ignored)
#   device: OUT=dir bash benchmarks/branch_ab.sh run [--tests "tests/test_ozaki.py ..."] \
#               [--kernels "ozaki ozaki:7"] [--rounds 3] [--overhead]
#           (carry .ab; the checkout itself is not built)
#
# Writes to $OUT: build-main.log, build-branch.log, tests.log (the branch's own tests, run from its tree against
# its build; a tree built at the same commit by an earlier call on this machine is kept), ab-main-N.json and
# ab-branch-N.json (engine_ab.py time), ab.json (engine_ab.py compare: each
# (kernel, shape)'s median over the rounds, the branch against main). With --overhead each round also times
# whole calls at 64^3 and 128^3 (python -m fastsgemm.bench --overhead).
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here" || exit 1

pack() {
    local branch=$1 tree
    rm -rf .ab && mkdir -p .ab/main .ab/branch || exit 1
    git archive main | tar -x -C .ab/main || exit 1
    git archive "$branch" | tar -x -C .ab/branch || exit 1
    git rev-parse --short main > .ab/main/COMMIT
    git rev-parse --short "$branch" > .ab/branch/COMMIT
    for tree in main branch; do echo "$tree: $(cat .ab/$tree/COMMIT)"; done
    grep -qx '/.ab/' .git/info/exclude 2>/dev/null || echo '/.ab/' >> .git/info/exclude
}

run() {
    : "${OUT:?set OUT to the folder for results}"
    local tests="" kernels="" rounds=3 overhead=() tree start r
    while [ $# -gt 0 ]; do
        case "$1" in
            --tests) tests=$2; shift 2 ;;
            --kernels) kernels=$2; shift 2 ;;
            --rounds) rounds=$2; shift 2 ;;
            --overhead) overhead=(--overhead); shift ;;
            *) echo "branch_ab.sh run: unknown argument $1" >&2; return 2 ;;
        esac
    done
    [ -d .ab/main ] && [ -d .ab/branch ] || { echo "no .ab/ trees: run 'branch_ab.sh pack BRANCH' here first" >&2; return 1; }
    start=$(date +%s)
    for tree in main branch; do  # at once: about a minute for both; a tree already built at its commit is kept
        if cmp -s ".ab/$tree/COMMIT" "/tmp/ab-$tree/COMMIT"; then
            echo "kept: $tree $(cat ".ab/$tree/COMMIT") was built by an earlier call" >"$OUT/build-$tree.log"
            continue
        fi
        (rm -rf "/tmp/ab-$tree" && cd ".ab/$tree" && FASTSGEMM_CUDA_ARCHS=${FASTSGEMM_CUDA_ARCHS:-90} \
            python3 -m pip install -q --no-build-isolation --no-deps --target "/tmp/ab-$tree" . \
            >"$OUT/build-$tree.log" 2>&1 && cp COMMIT "/tmp/ab-$tree/COMMIT") &
    done
    wait
    for tree in main branch; do
        [ -d "/tmp/ab-$tree/fastsgemm" ] || { echo "the $tree build failed:"; tail -20 "$OUT/build-$tree.log"; return 1; }
    done
    echo "builds: $(( $(date +%s) - start )) s (main $(cat .ab/main/COMMIT), branch $(cat .ab/branch/COMMIT))"
    if [ -n "$tests" ]; then
        # shellcheck disable=SC2086  # the test list is a list
        (cd .ab/branch && PYTHONPATH=/tmp/ab-branch python3 -m pytest -q -p no:cacheprovider $tests) \
            >"$OUT/tests.log" 2>&1
        echo "tests (branch): $(tail -1 "$OUT/tests.log")"
        grep -h "^FAILED\|^ERROR" "$OUT/tests.log" | head -20
    fi
    local only=()
    # shellcheck disable=SC2206
    [ -n "$kernels" ] && only=(--kernels $kernels)
    for ((r = 1; r <= rounds; ++r)); do
        for tree in main branch; do
            FASTSGEMM_GIT_COMMIT=$(cat ".ab/$tree/COMMIT") PYTHONPATH="/tmp/ab-$tree" python3 benchmarks/engine_ab.py time --label "$([ $tree = main ] && echo base || echo new)" \
                --out "$OUT/ab-$tree-$r.json" "${only[@]}" "${overhead[@]}" >/dev/null 2>>"$OUT/ab.err" ||
                { echo "timing $tree, round $r, failed:"; tail -5 "$OUT/ab.err"; return 1; }
        done
    done
    python3 benchmarks/engine_ab.py compare "$OUT"/ab-*-[0-9]*.json --out "$OUT/ab.json"
    echo "total: $(( $(date +%s) - start )) s"
}

case "${1:-}" in
    pack) shift; [ $# -eq 1 ] || { echo "usage: branch_ab.sh pack BRANCH" >&2; exit 2; }; pack "$1" ;;
    run) shift; run "$@" ;;
    *) echo "usage: branch_ab.sh pack BRANCH | branch_ab.sh run [--tests ...] [--kernels ...] [--rounds N] [--overhead]" >&2
       exit 2 ;;
esac
