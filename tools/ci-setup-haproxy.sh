#!/usr/bin/env bash
# CI (and developer) setup for `ngym run NAME --workers N` with sessions in each process: install Debian's haproxy
# if it is missing (tests/integration/test_affine_workers.py and test_affine_multihost.py start their own; under
# CI=true a missing binary fails them instead of skipping). Also iproute2 for the multi-host test's namespaces.
#
#   bash tools/ci-setup-haproxy.sh      # idempotent
set -euo pipefail

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo -n"; fi
say() { echo "ci-setup-haproxy: $*"; }

missing=()
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || missing+=(iproute2)
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]} (Debian packages)"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
say "$( (command -v haproxy >/dev/null && haproxy -v || /usr/sbin/haproxy -v) | head -1)"
