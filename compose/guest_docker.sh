#!/bin/sh
# Inside compose/vm.py's guest (after guest_nfs.sh started knfsd on
# 127.0.0.1:/srv/nfs): start a Docker engine, import the client image that
# compose/build_images.sh built, run a command against that engine, stop it.
#
#   vm.py run --host a=vers=3 --out DIR -- sh compose/guest_docker.sh IMAGE_TAR CMD...
#
# The engine (Debian's docker.io, seen through the guest's read-only view of
# the host's root filesystem) keeps everything on the guest's tmpfs, uses the
# host network only (no bridge, no iptables: every container here runs with
# network_mode host) and overlay2, or vfs where overlayfs cannot be mounted.
# The command gets DOCKER_HOST, NFS_SERVER, NFS_EXPORT, NFS_CLIENT_IMAGE and
# COMPOSE_LOG_DIR set for `python -m scenarios ... --backend compose`.
#
# Exit status: the command's own; 86 when the engine could not be started
# or the image not imported (the reason is printed; nothing ran).
set -u

NO_ENGINE=86
if [ $# -lt 2 ]; then
    echo "usage: $0 IMAGE_TAR CMD [ARGS...]" >&2
    exit 2
fi
image_tar=$1
shift
out=${NFS_OUT:-/tmp}
state=/run/simfs-docker  # tmpfs: overlay2 cannot sit on /tmp, itself an overlay here
mkdir -p "$state" "$out/containers"

# Debian's client, the engine's own version, rather than a newer one on PATH.
if [ -x /usr/bin/docker ]; then docker() { /usr/bin/docker "$@"; }; fi

say() { echo "guest_docker: $(cut -d' ' -f1 /proc/uptime)s $*" >&2; }

# runc needs a cgroup hierarchy; virtme-ng's init may not mount one.
mountpoint -q /sys/fs/cgroup || mount -t cgroup2 cgroup2 /sys/fs/cgroup || true
modprobe overlay 2>/dev/null || true

export DOCKER_HOST="unix://$state/docker.sock"
containerd_pid=""
engine_pid=""

# Wait up to $1 seconds for command $2... to succeed while process $pid lives.
wait_for() {
    limit=$1 pid=$2
    shift 2
    waited=0
    while [ "$waited" -lt "$limit" ]; do
        if "$@" >/dev/null 2>&1; then return 0; fi
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 1
        waited=$((waited + 1))
    done
    return 1
}

# containerd first, on its own: dockerd gives the containerd it starts itself
# about 10 s to answer, and under qemu's emulator it took longer (measured:
# "failed to start containerd: timeout waiting for containerd to start").
start_containerd() {
    say "starting containerd"
    cat >"$state/containerd.toml" <<TOML
version = 2
root = "$state/containerd-root"
state = "$state/containerd-state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$state/containerd.sock"
TOML
    containerd --config "$state/containerd.toml" >"$out/containerd.log" 2>&1 &
    containerd_pid=$!
    if wait_for 600 "$containerd_pid" ctr --address "$state/containerd.sock" version; then
        say "containerd answers"
        return 0
    fi
    say "containerd did not come up; its last lines:"
    tail -n 15 "$out/containerd.log" >&2
    return 1
}

start_engine() {  # $1: storage driver; returns 0 once the engine answers
    say "starting dockerd (storage driver $1)"
    dockerd --data-root "$state/root-$1" --exec-root "$state/exec" \
        --pidfile "$state/dockerd.pid" -H "$DOCKER_HOST" --storage-driver "$1" \
        --containerd "$state/containerd.sock" \
        --iptables=false --ip6tables=false --bridge=none --ip-forward=false \
        --ip-masq=false >"$out/dockerd-$1.log" 2>&1 &
    engine_pid=$!
    if wait_for 600 "$engine_pid" docker version; then
        say "dockerd answers"
        return 0
    fi
    say "dockerd ($1) did not come up; its last lines:"
    tail -n 15 "$out/dockerd-$1.log" >&2
    stop_engine
    return 1
}

stop_pid() {
    [ -n "$1" ] || return 0
    kill "$1" 2>/dev/null
    waited=0
    while kill -0 "$1" 2>/dev/null && [ "$waited" -lt 30 ]; do
        sleep 1
        waited=$((waited + 1))
    done
    kill -9 "$1" 2>/dev/null
}
stop_engine() {
    stop_pid "$engine_pid"
    engine_pid=""
}

if ! start_containerd; then
    say "NO ENGINE: containerd cannot run in this guest (log: containerd.log)"
    stop_pid "$containerd_pid"
    exit $NO_ENGINE
fi
if ! start_engine overlay2 && ! start_engine vfs; then
    say "NO ENGINE: dockerd cannot run in this guest (logs: dockerd-*.log)"
    stop_pid "$containerd_pid"
    exit $NO_ENGINE
fi
docker info 2>/dev/null | grep -E "Server Version|Storage Driver|Cgroup" >&2

started=$(cut -d' ' -f1 /proc/uptime)
if ! docker import "$image_tar" simfs/nfs-client:local >/dev/null; then
    say "NO ENGINE: docker import $image_tar failed"
    stop_engine
    stop_pid "$containerd_pid"
    exit $NO_ENGINE
fi
say "imported simfs/nfs-client:local (from ${started}s)"

export NFS_SERVER=127.0.0.1 NFS_EXPORT=/srv/nfs NFS_CLIENT_IMAGE=simfs/nfs-client:local
export COMPOSE_LOG_DIR="$out/containers"
# Under the emulator two clients took 157 s to mount and start their agents
# (41 s once the image and the checkout shipped bytecode).
export COMPOSE_READY_TIMEOUT="${COMPOSE_READY_TIMEOUT:-900}"
"$@"
status=$?
say "command exited $status; stopping dockerd"
stop_engine
stop_pid "$containerd_pid"
exit $status
