#!/usr/bin/env bash
# A lane of CI stages (.ci/stages.sh's stage_lane): PREFIX SUB 'CMD' [SUB 'CMD']... runs each CMD in turn with bash -c,
# its output to PREFIX.SUB.log, and appends "SUB RC SECONDS" to PREFIX.stages when it ends; stops at the first failure
# with its exit code.
set -uo pipefail
prefix=$1
shift
while [ "$#" -ge 2 ]; do
    sub=$1 cmd=$2
    shift 2
    start=$SECONDS
    echo "lane: == $sub: start ($(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1 /proc/loadavg))"
    rc=0
    bash -c "$cmd" >"$prefix.$sub.log" 2>&1 </dev/null || rc=$?
    echo "$sub $rc $((SECONDS - start))" >>"$prefix.stages"
    echo "lane: == $sub: exit $rc in $((SECONDS - start)) s"
    [ "$rc" = 0 ] || exit "$rc"
done
