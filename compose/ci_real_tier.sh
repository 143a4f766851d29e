#!/bin/sh
# CI's real-NFS tier, run after the fast tier: the given command runs inside
# the VM against real NFSv3 mounts (compose/vm.py, docs/design.md, "Real NFS").
#
#   sh compose/ci_real_tier.sh python -m pytest -m real tests
#
# Exit status: the command's own; 3 when the VM cannot be set up or started
# here (the reason is printed: the tier did NOT run, so nothing passed);
# 124 when it ran past VM_TIMEOUT; 2 for a usage error.
#
# Environment (all optional):
#   PYTHON      interpreter for vm.py and the guest (default: .venv/bin/python
#               if present, else python3); its venv is the guest's venv
#   VM_HOSTS    space-separated NAME=OPTIONS (default "a=vers=3 b=vers=3")
#   VM_OUT      results directory (default /tmp/nfs-real-tier)
#   VM_TIMEOUT  seconds for the whole VM run (default 600)
#   VM_KERNEL   kernel release to boot, e.g. 6.12 (default: the newest in
#               /boot); `vm.py setup` unpacks Debian's image of it if needed.
#               The parity tests check the profile of the kernel they run on.
#   VM_NFS_VERS 4.1 or 4.2: every host of VM_HOSTS mounts that version
#               instead of vers=3, and the command sees PARITY_NFS_VERS set
#               to it (tests/parity/conftest.py checks that version's facts)
set -u

EXIT_CANNOT_START=3
cd "$(dirname "$0")/.." || exit 2
tier="real tier${VM_KERNEL:+ (kernel $VM_KERNEL)}"

if [ $# -eq 0 ]; then
    echo "usage: $0 CMD [ARGS...]   (the command to run inside the VM)" >&2
    exit 2
fi
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi

echo "$tier: setting up the NFS VM"
if ! "$PYTHON" compose/vm.py setup; then
    echo "$tier: NOT RUN: the VM's packages could not be installed (above)" >&2
    exit $EXIT_CANNOT_START
fi
if ! "$PYTHON" compose/vm.py check; then
    echo "$tier: NOT RUN: the VM cannot start on this machine (reasons above)" >&2
    exit $EXIT_CANNOT_START
fi

hosts=""
for spec in ${VM_HOSTS:-a=vers=3 b=vers=3}; do
    if [ -n "${VM_NFS_VERS:-}" ]; then
        spec=$(echo "$spec" | sed "s/vers=3/vers=$VM_NFS_VERS/")
    fi
    hosts="$hosts --host $spec"
done
if [ -n "${VM_NFS_VERS:-}" ]; then
    hosts="$hosts --env PARITY_NFS_VERS=$VM_NFS_VERS"
    tier="$tier (NFSv$VM_NFS_VERS)"
fi

started=$(date +%s)
# shellcheck disable=SC2086  # $hosts is a list of --host words
"$PYTHON" compose/vm.py run $hosts --out "${VM_OUT:-/tmp/nfs-real-tier}" \
    --timeout "${VM_TIMEOUT:-600}" -- "$@"
status=$?
elapsed=$(( $(date +%s) - started ))

case $status in
    125)
        echo "$tier: NOT RUN: the VM failed to boot or set up NFS (step above;" \
            "logs in ${VM_OUT:-/tmp/nfs-real-tier}/vm-setup.log)" >&2
        exit $EXIT_CANNOT_START ;;
    124)
        echo "$tier: FAILED: timed out after ${VM_TIMEOUT:-600} s" >&2 ;;
    0)
        echo "$tier: command passed in the VM (${elapsed} s)" ;;
    *)
        echo "$tier: FAILED: command exited $status in the VM (${elapsed} s)" >&2 ;;
esac
exit $status
