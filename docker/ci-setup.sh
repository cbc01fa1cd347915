#!/usr/bin/env bash
# CI (and developer) setup for the Docker tests: install Debian's docker.io, debootstrap and docker-compose if missing,
# start dockerd in the background if no engine answers, wait for it, then build (or reuse, by tag) the local base image.
#
#   bash docker/ci-setup.sh            # idempotent; safe to run again
#
# Env: NGYM_BASE_IMAGE (default ngym-base:bookworm), DOCKERD_LOG (default /tmp/ngym-dockerd.log).
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_IMAGE="${NGYM_BASE_IMAGE:-ngym-base:bookworm}"
DOCKERD_LOG="${DOCKERD_LOG:-/tmp/ngym-dockerd.log}"
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo -n"; fi

say() { echo "ci-setup: $*"; }

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
# Compose for tests/docker/test_compose_deploy.py: the v2 plugin if present, else Debian's docker-compose (v1; bookworm
# has no docker-compose-v2 package).
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
    missing+=(docker-compose)
fi
if [ "${#missing[@]}" -gt 0 ]; then
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" ca-certificates iptables >/dev/null
fi

# Every probe has a timeout: a stopped or wedged dockerd accepts connections on its socket and never answers.
engine_answers() {
    local deadline=$((SECONDS + $1))
    while [ "$SECONDS" -lt "$deadline" ]; do
        timeout 5 docker info >/dev/null 2>&1 && return 0
        sleep 1
    done
    return 1
}

# dockerd refuses to start while its pid file names a live process. A machine that was stopped hard leaves the file
# behind, and after a reboot its pid often belongs to some other process: remove it unless it names a dockerd, and
# stop a dockerd that holds it without answering (wedged, or still shutting down), so a fresh one can start.
pid_in() { tr -dc '0-9' < "$1" 2>/dev/null || true; }
comm_of() { cat "/proc/${1:-0}/comm" 2>/dev/null || true; }

stop_process() {  # pid: TERM, up to 20 s, then KILL (a stopped process only dies of KILL)
    $SUDO kill -TERM "$1" 2>/dev/null || true
    for _ in $(seq 1 20); do
        [ -d "/proc/$1" ] || return 0
        sleep 1
    done
    $SUDO kill -KILL "$1" 2>/dev/null || true
    sleep 1
}

# Clears what keeps a new dockerd from starting: dockerd refuses while /var/run/docker.pid names a live process, and
# waits for (then times out on) a containerd its last run left behind. A machine stopped hard leaves both files; after
# a reboot their pids often belong to other processes.
clear_stale_engine() {
    local pidfile=/var/run/docker.pid cpidfile=/var/run/docker/containerd/containerd.pid pid comm
    if [ -f "$pidfile" ]; then
        pid="$(pid_in "$pidfile")"
        comm="$(comm_of "$pid")"
        if [ -n "$pid" ] && [ "$comm" = "dockerd" ]; then
            say "dockerd (pid $pid) holds $pidfile; waiting for it to answer"
            engine_answers 30 && return 0
            say "dockerd (pid $pid) does not answer; stopping it"
            stop_process "$pid"
        else
            say "removing stale $pidfile (pid ${pid:-none} is ${comm:-not running})"
        fi
        $SUDO rm -f "$pidfile"
    fi
    if [ -f "$cpidfile" ]; then
        pid="$(pid_in "$cpidfile")"
        comm="$(comm_of "$pid")"
        if [ -n "$pid" ] && [ "$comm" = "containerd" ]; then
            say "stopping containerd (pid $pid) left by the last dockerd"
            stop_process "$pid"
        fi
        $SUDO rm -f "$cpidfile"
    fi
}

if ! timeout 5 docker info >/dev/null 2>&1; then
    clear_stale_engine
fi
if ! timeout 5 docker info >/dev/null 2>&1; then
    say "starting dockerd (log: $DOCKERD_LOG)"
    # setsid: dockerd outlives this script and is not killed with its process group.
    $SUDO setsid dockerd >"$DOCKERD_LOG" 2>&1 < /dev/null &
    if ! engine_answers 60; then
        say "dockerd did not come up within 60s; its log:"
        tail -n 30 "$DOCKERD_LOG" >&2 || true
        exit 1
    fi
fi
say "docker engine $(docker version --format '{{.Server.Version}}') is up"

bash docker/build-base-image.sh "$BASE_IMAGE"

# The docker SDK the containerize command and its tests use (`make install` installs it too, via .[dev]).
PY=".venv/bin/python"
if [ -x "$PY" ] && ! "$PY" -c 'import docker' >/dev/null 2>&1; then
    say "installing the docker SDK into $PY's environment"
    "$PY" -m pip install --quiet 'docker>=7.1' || say "could not install the docker SDK (make install does it too)"
fi
