#!/usr/bin/env bash
# run_suites.sh JOBS SUITE... — run the test suites JOBS at a time, in the order given (slowest first,
# so the lanes end together), each one's output held in a log and printed whole when it ends, with its
# time. Exit status 1 if any suite failed or was lost. `make test` calls it with one lane a core and
# one thread a suite (OMP_NUM_THREADS=1): two-thread suites side by side thrash at their barriers.
jobs=$1
shift
[ "$jobs" -ge 1 ] 2>/dev/null || { echo "run_suites.sh: JOBS must be a positive number, not '$jobs'" >&2; exit 2; }
logdir=$(mktemp -d "${TMPDIR:-/tmp}/dspark-suites.XXXXXX") || exit 2
trap 'rm -rf "$logdir"' EXIT
s0=$(date +%s)
fail=0 running=0 reported=0
declare -A name start log
report() { # print a finished suite's log; $1 its pid, $2 its exit status
    [ -n "$1" ] && [ -n "${name[$1]}" ] || { echo "== run_suites.sh: lost track of a suite"; exit 1; }
    local p=$1 rc=$2 t=${name[$1]}
    echo "== $t"
    cat "${log[$p]}"
    echo "== $t: $(( $(date +%s) - ${start[$p]} )) s (ended $(( $(date +%s) - s0 )) s after the start)"
    if [ "$rc" -ne 0 ]; then echo "== $t FAILED (exit $rc)"; fail=1; fi
    unset "name[$p]" "start[$p]" "log[$p]"
    running=$((running - 1)) reported=$((reported + 1))
}
for t in "$@"; do
    while [ "$running" -ge "$jobs" ]; do
        wait -n -p done_pid; rc=$?
        report "$done_pid" "$rc"
    done
    "$t" > "$logdir/$(basename "$t").log" 2>&1 &
    p=$!
    log[$p]=$logdir/$(basename "$t").log
    name[$p]=$t
    start[$p]=$(date +%s)
    running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
    wait -n -p done_pid; rc=$?
    report "$done_pid" "$rc"
done
# a suite that was never reported fails the run: silence is not a pass
if [ "$reported" -ne "$#" ]; then echo "== $reported of $# suites reported"; fail=1; fi
echo "== all suites: $(( $(date +%s) - s0 )) s on $jobs lanes"
exit $fail
