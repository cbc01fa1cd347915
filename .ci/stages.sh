# Sourced by .ci/run: each stage timed, and a summary of all of them printed when the run ends (also on a failure).
#
#   stage NAME CMD...             run CMD; print its time; a failure ends the run with its exit code
#   stage_background NAME CMD...  start CMD beside the next stages (for work that mostly waits: downloads, venvs)
#   stage_wait NAME               wait for it; print its log's tail and its own time; a failure ends the run
ci_start=$SECONDS
# stage NAME CMD...: runs one stage and prints its time; the summary at the end lists them all.
timings=()
stage() {
    local name=$1 start=$SECONDS
    shift
    echo "ci: == $name: start ($(date -u +%H:%M:%S) UTC, $((SECONDS - ci_start)) s into the run)"
    local rc=0
    "$@" || rc=$?
    local took=$((SECONDS - start)) verdict="ok"
    [ "$rc" = 0 ] || verdict="FAILED (exit $rc)"
    timings+=("$(printf '%-26s %5d s  %s' "$name" "$took" "$verdict")")
    echo "ci: == $name: $verdict in ${took} s"
    [ "$rc" = 0 ] || exit "$rc"
}
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
stage_wait() {
    local name=$1 start=$SECONDS
    wait "${bg_pids[$name]}" || true
    unset "bg_pids[$name]"
    local rc=1 took=0
    [ -f "$bg_dir/$name.done" ] && read -r rc took <"$bg_dir/$name.done"
    local verdict="ok"
    [ "$rc" = 0 ] || verdict="FAILED (exit $rc)"
    timings+=("$(printf '%-26s %5d s  %s' "$name" "$took" "$verdict (background; waited $((SECONDS - start)) s)")")
    tail -n 20 "$bg_dir/$name.log" | sed "s/^/ci:   $name: /"
    echo "ci: == $name: $verdict in ${took} s (in the background; waited for it $((SECONDS - start)) s)"
    [ "$rc" = 0 ] || exit "$rc"
}
summary() {
    for pid in "${bg_pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
    echo "ci: stage times (total $((SECONDS - ci_start)) s):"
    for line in "${timings[@]}"; do echo "ci:   $line"; done
}
trap summary EXIT
