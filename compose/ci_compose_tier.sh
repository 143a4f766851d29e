#!/bin/sh
# CI's compose tier: the compose stack for real, with no Docker engine on the
# machine and no registry.  Boots the NFS VM (compose/vm.py), starts dockerd
# inside it (compose/guest_docker.sh), imports the client image built here
# without a registry (compose/build_images.sh), and runs the handshake's
# fidelity table through `--backend compose`: two client containers, each
# mounting the guest's knfsd with nosharecache, so two independent clients.
#
#   sh compose/ci_compose_tier.sh [FIDELITY ARGS...]
#       default: handshake --trials 3 --param mount=vers=3,acdirmin=3,acdirmax=3
#
# Prints one verdict line, "compose tier: PASSED|FAILED|NOT RUN (...)", and
# exits 0 (PASSED), 1 (FAILED: the stack or the fidelity table failed) or 3
# (NOT RUN: what the tier needs could not be installed, the VM did not
# start, or dockerd cannot run in the guest; nothing was checked).
#
# Environment (all optional):
#   PYTHON       interpreter (default .venv/bin/python, else python3)
#   VM_OUT       results directory (default /tmp/nfs-compose-tier)
#   VM_TIMEOUT   seconds for the whole VM run (default 2400; passing runs
#                took 316 s and 563 s in all on 2 cores shared with another
#                VM, the VM run 305 s and 524 s: room for a busier machine)
#   VM_MEMORY    guest memory (default 3G: the engine's images live in RAM)
set -u

cd "$(dirname "$0")/.." || exit 2
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
out=${VM_OUT:-/tmp/nfs-compose-tier}
started=$(date +%s)

verdict() {  # verdict STATUS WORDS...: print the verdict line and exit
    status=$1
    shift
    echo "compose tier: $* ($(( $(date +%s) - started )) s)"
    exit "$status"
}

if [ $# -eq 0 ]; then
    set -- handshake --trials 3 --param mount=vers=3,acdirmin=3,acdirmax=3
fi

# The engine runs in the guest but comes from the host's root filesystem.
if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
    echo "compose tier: installing docker.io (Debian)" >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io \
        >/dev/null; } || verdict 3 "NOT RUN: docker.io could not be installed"
fi
if ! "$PYTHON" -c "import docker" 2>/dev/null; then
    "$PYTHON" -m pip install -q 'docker>=7,<8' \
        || verdict 3 "NOT RUN: the docker SDK (the compose extra) could not be installed"
fi
"$PYTHON" compose/vm.py setup || verdict 3 "NOT RUN: the VM's packages could not be installed"
"$PYTHON" compose/vm.py check || verdict 3 "NOT RUN: the VM cannot start on this machine"

sh compose/build_images.sh build/compose
case $? in
    0) ;;
    3) verdict 3 "NOT RUN: the client image could not be built (above)" ;;
    *) verdict 1 "FAILED: the client image is broken (above)" ;;
esac

# The containers run this checkout from /src, read-only and with
# PYTHONDONTWRITEBYTECODE: compile it here, or every process in the
# emulated guest compiles the project again (build_images.sh does the
# same for the image's dependencies).
"$PYTHON" -m compileall -q scenarios simfs reference >/dev/null \
    || verdict 1 "FAILED: the project does not compile"

rm -rf "$out"
"$PYTHON" compose/vm.py run --host vm=vers=3 --memory "${VM_MEMORY:-3G}" --out "$out" \
    --timeout "${VM_TIMEOUT:-2400}" -- \
    sh compose/guest_docker.sh build/compose/nfs-client.tar \
    "$PYTHON" -m scenarios fidelity "$@" --backend compose
status=$?
case $status in
    0) verdict 0 "PASSED (fidelity table above; container logs in $out/containers)" ;;
    86) verdict 3 "NOT RUN: dockerd could not start in the VM (logs in $out)" ;;
    125) verdict 3 "NOT RUN: the VM failed to boot or set up NFS ($out/vm-setup.log)" ;;
    124) verdict 1 "FAILED: timed out after ${VM_TIMEOUT:-2400} s" ;;
    *) verdict 1 "FAILED: exit $status in the VM (container logs in $out/containers)" ;;
esac
