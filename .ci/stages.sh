# Sourced by .ci/run: each stage timed, and a summary of all of them printed when the run ends (also on a failure).
#
#   stage NAME CMD...                  run CMD; print its time; a failure ends the run with its exit code
#   stage_background NAME CMD...       start CMD beside the next stages (for work that mostly waits: downloads, venvs)
#   stage_lane NAME SUB 'CMD' [SUB 'CMD']...
#                                      start a chain of stages beside the next ones: one after another, each timed with
#                                      its own log, the chain stopping at its first failure
#   stage_wait NAME                    wait for a background stage or lane; print its log's tail and its own time (a
#                                      lane's: each of its stages'); a failure ends the run
# A background stage or lane that has failed also ends the run at the start of the next `stage`, not only when waited
# for: a lint error is reported within seconds of lint ending, not after the suite.
ci_start=$SECONDS
# stage NAME CMD...: runs one stage and prints its time; the summary at the end lists them all.
timings=()
stage() {
    local name=$1 start=$SECONDS
    shift
    stop_if_a_background_stage_failed
    echo "ci: == $name: start ($(date -u +%H:%M:%S) UTC, $((SECONDS - ci_start)) s into the run, load $(load))"
    local rc=0
    "$@" || rc=$?
    local took=$((SECONDS - start)) verdict="ok"
    [ "$rc" = 0 ] || verdict="FAILED (exit $rc)"
    timings+=("$(printf '%-26s %5d s  %s' "$name" "$took" "$verdict")")
    echo "ci: == $name: $verdict in ${took} s (load $(load))"
    [ "$rc" = 0 ] || exit "$rc"
}
# The machine's load average over the last minute (other work on it stretches every stage's time).
load() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?"; }
# stage_background NAME CMD...: starts a stage that mostly waits (downloads, venv installs) beside the next ones, its
# output to a log; stage_wait NAME waits for it, prints its log's tail and records its own time like `stage` does.
bg_dir="$(mktemp -d "${TMPDIR:-/tmp}/ngym-ci.XXXXXX")"
declare -A bg_pids=()
stage_background() {
    local name=$1
    shift
    echo "ci: == $name: start in the background ($(date -u +%H:%M:%S) UTC, $((SECONDS - ci_start)) s into the run; log: $bg_dir/$name.log)"
    # setsid: its own process group, so a failed run can stop the whole stage (pip and all) on exit.
    setsid bash -c 'start=$SECONDS; rc=0; "${@:2}" >"$1.log" 2>&1 || rc=$?; echo "$rc $((SECONDS - start))" >"$1.done"' \
        _ "$bg_dir/$name" "$@" </dev/null &
    bg_pids[$name]=$!
}
# stage_lane NAME SUB 'CMD' ...: a background stage that runs its stages in turn (.ci/lane.sh), each line of
# "$bg_dir/NAME.stages" one finished stage's "SUB RC SECONDS", each stage's output in "$bg_dir/NAME.SUB.log".
stage_lane() {
    local name=$1
    shift
    stage_background "$name" bash "$(dirname "${BASH_SOURCE[0]}")/lane.sh" "$bg_dir/$name" "$@"
}
stage_wait() {
    local name=$1 start=$SECONDS
    wait "${bg_pids[$name]}" || true
    unset "bg_pids[$name]"
    local rc=1 took=0
    [ -f "$bg_dir/$name.done" ] && read -r rc took <"$bg_dir/$name.done"
    local verdict="ok" waited=$((SECONDS - start))
    [ "$rc" = 0 ] || verdict="FAILED (exit $rc)"
    if [ -f "$bg_dir/$name.stages" ]; then  # a lane: each of its stages, as `stage` reports them
        local sub sub_rc sub_took sub_verdict
        while read -r sub sub_rc sub_took; do
            sub_verdict="ok"
            [ "$sub_rc" = 0 ] || sub_verdict="FAILED (exit $sub_rc)"
            timings+=("$(printf '%-26s %5d s  %s' "$sub" "$sub_took" "$sub_verdict (lane $name)")")
            # a passing stage's last lines (pytest's count), a failing one's last 40
            tail -n "$([ "$sub_rc" = 0 ] && echo 3 || echo 40)" "$bg_dir/$name.$sub.log" | sed "s/^/ci:   $sub: /"
            echo "ci: == $sub: $sub_verdict in ${sub_took} s (lane $name)"
        done <"$bg_dir/$name.stages"
        timings+=("$(printf '%-26s %5d s  %s' "$name" "$took" "$verdict (lane; waited $waited s)")")
        echo "ci: == $name: $verdict in ${took} s (a lane beside the stages above; waited for it $waited s)"
    else
        timings+=("$(printf '%-26s %5d s  %s' "$name" "$took" "$verdict (background; waited $waited s)")")
        tail -n 20 "$bg_dir/$name.log" | sed "s/^/ci:   $name: /"
        echo "ci: == $name: $verdict in ${took} s (in the background; waited for it $waited s)"
    fi
    [ "$rc" = 0 ] || exit "$rc"
}
# Called by `stage` before it starts: a background stage or lane that already failed is reported and ends the run.
stop_if_a_background_stage_failed() {
    local name rc
    for name in "${!bg_pids[@]}"; do
        [ -f "$bg_dir/$name.done" ] || continue
        read -r rc _ <"$bg_dir/$name.done"
        [ "$rc" = 0 ] || stage_wait "$name"
    done
}
# On exit: stop what still runs in the background; a lane's stages that had finished keep their times in the summary.
summary() {
    local name sub sub_rc sub_took
    for name in "${!bg_pids[@]}"; do
        kill -TERM -- "-${bg_pids[$name]}" 2>/dev/null || true
        if [ -f "$bg_dir/$name.stages" ]; then
            while read -r sub sub_rc sub_took; do
                timings+=("$(printf '%-26s %5d s  %s' "$sub" "$sub_took" "exit $sub_rc (lane $name)")")
            done <"$bg_dir/$name.stages"
        fi
        timings+=("$(printf '%-26s   (stopped: the run ended before it did)' "$name")")
    done
    echo "ci: stage times (total $((SECONDS - ci_start)) s, load $(load) at the end):"
    for line in "${timings[@]}"; do echo "ci:   $line"; done
}
trap summary EXIT
