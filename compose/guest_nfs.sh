#!/bin/sh
# Guest half of compose/vm.py: runs as root inside the virtme-ng VM (vng --exec).
#
# It turns the throw-away guest into one machine that is both a knfsd server
# and N independent NFS clients (one mount per simulated host, each with
# `nosharecache`, so each keeps its own attribute and dentry caches), then runs
# the caller's command against those mounts.  A host mounted with vers=4.x is
# its own NFSv4 client (v4_hosts, below).  Recipe and measurements:
# docs/design.md, "Real NFS".
#
# Usage: guest_nfs.sh CTL_DIR
#   CTL_DIR is the --rwdir shared with the host.  The host writes
#   CTL_DIR/job.env (set-up variables) and CTL_DIR/command.env (the command's
#   exports: PATH, NFS_MOUNTS, NFS_OUT, ...), see vm.py:write_job; this script
#   writes back into it:
#     step         the step in progress (so the host can name what failed)
#     failed-step  written only when a set-up step failed
#     vm-setup.log everything the set-up printed, plus a dmesg tail
#     log.txt      the command's stdout and stderr, interleaved
#     status       the command's exit status
#     out/         $NFS_OUT, where the command leaves its results
#
# The guest sees the host's root filesystem read-only over 9p; /etc, /var,
# /srv, /tmp are writable overlays that vanish with the VM, and there is no
# network card: every NFS RPC stays on the guest's loopback.

set -u

CTL=$1
. "$CTL/job.env"

SETUP_LOG=$CTL/vm-setup.log
EXPORT=/srv/nfs
STEP=start
: >"$SETUP_LOG"

# Name the step first, so a failure anywhere after it is reported by name.
step() {
    STEP=$1
    echo "$STEP" >"$CTL/step"
    echo "== $(cut -d' ' -f1 /proc/uptime)s $STEP" >>"$SETUP_LOG"
}

fail() {
    echo "$STEP" >"$CTL/failed-step"
    echo "-- dmesg tail" >>"$SETUP_LOG"
    dmesg | tail -n 60 >>"$SETUP_LOG" 2>&1
    echo "vm guest: set-up step '$STEP' failed (see vm-setup.log)" >&2
    exit 1
}

# Run a set-up command, logging its output; any failure ends the set-up.
run() {
    echo "\$ $*" >>"$SETUP_LOG"
    "$@" >>"$SETUP_LOG" 2>&1 || fail
}

write() {  # write VALUE FILE: a /proc or /sys knob
    echo "\$ echo $1 > $2" >>"$SETUP_LOG"
    echo "$1" >"$2" 2>>"$SETUP_LOG" || fail
}

# A kernel unpacked outside /boot (vm.py --kernel 6.12) keeps its modules
# beside its image.  virtme-ng links them into the guest's /lib/modules, but
# its read-write overlay on /lib hides that link, so modprobe finds nothing:
# bind them onto /lib/modules/$(uname -r) unless that already has them.
link_modules() {
    step modules-link
    target=/lib/modules/$(uname -r)
    [ -e "$target/modules.dep" ] && return 0
    [ -n "${VM_MODULES:-}" ] && [ -e "$VM_MODULES/modules.dep" ] || {
        echo "no modules for $(uname -r) in $target or VM_MODULES=${VM_MODULES:-}" \
            >>"$SETUP_LOG"
        fail
    }
    if [ -L "$target" ]; then run rm "$target"; fi
    run mkdir -p "$target"
    run mount --bind "$VM_MODULES" "$target"
}

load_modules() {
    step modules
    for m in sunrpc lockd nfs_acl grace nfsd nfs nfsv3 nfsv4 loop ext4; do
        run modprobe "$m"
    done
}

# The first lock after a server start blocks for the grace period, about 92 s
# measured (docs/design.md, "Real NFS"): lockd's own grace (nlm_grace_period,
# else 5 * nlm_timeout) and, because locks_in_grace() checks every grace
# manager in the namespace, nfsd's NFSv4 grace (nfsv4gracetime, 90 s) too.
# This server has just booted with no clients to reclaim anything, so shorten
# both before the server starts and end both once it runs (end_grace, below).
shorten_grace() {
    step grace-period
    write 10 /proc/sys/fs/nfs/nlm_grace_period
    run mount -t nfsd nfsd /proc/fs/nfsd
    write 10 /proc/fs/nfsd/nfsv4gracetime
    write 10 /proc/fs/nfsd/nfsv4leasetime
}

# A loop-mounted ext4 image, as measured: a real on-disk filesystem with
# nanosecond mtimes (the change attribute the client revalidates against).
make_export() {
    step export-filesystem
    run mkdir -p /run/nfs-image "$EXPORT"
    run truncate -s "${VM_EXPORT_SIZE:-512M}" /run/nfs-image/export.ext4
    run mkfs.ext4 -q -F /run/nfs-image/export.ext4
    run mount -o loop /run/nfs-image/export.ext4 "$EXPORT"
    run chmod 1777 "$EXPORT"
}

start_server() {
    step rpcbind
    run mkdir -p /run/rpcbind /var/lib/nfs/sm /var/lib/nfs/sm.bak
    run ip link set lo up
    # Plain rpcbind: `-h 127.0.0.1` crashes on this release (docs/design.md,
    # "Real NFS").
    run rpcbind
    step rpc.statd
    run rpc.statd --no-notify
    step exportfs
    : >/etc/exports
    run exportfs -o rw,sync,no_subtree_check,no_root_squash,insecure,fsid=1 \
        "127.0.0.1:$EXPORT"
    step rpc.mountd
    run rpc.mountd
    if [ -n "$V4_HOSTS" ]; then
        # NFSv4 needs a real local filesystem as its pseudo-root: knfsd
        # cannot export the 9p guest root above $EXPORT, so every v4 mount
        # of 127.0.0.1:$EXPORT fails ("No such file or directory").  The
        # same ext4, bind-mounted on its own path and exported with fsid=0,
        # is the v4 root; v4 hosts mount ADDRESS:/ and see the v3 export's
        # files.
        step v4-root
        run mkdir -p "$V4ROOT"
        run mount --bind "$EXPORT" "$V4ROOT"
        run exportfs -o rw,sync,no_subtree_check,no_root_squash,insecure,fsid=0 \
            "127.0.0.0/8:$V4ROOT"
    fi
    step rpc.nfsd
    # One server address per v4 host (v4_hosts); v3 runs keep 127.0.0.1 only.
    listen="-H 127.0.0.1"
    k=1
    for _ in $V4_HOSTS; do
        [ "$k" -gt 1 ] && listen="$listen -H 127.0.0.$k"
        k=$((k + 1))
    done
    # shellcheck disable=SC2086  # $listen is a list of -H words
    run rpc.nfsd $listen 8
    run cat /proc/fs/nfsd/versions
}

# Measured: with only the 10 s grace above, a lock taken 4 s after rpc.nfsd
# blocked 11.2 s; after end_grace, one taken 5 s after it returned at once.
end_grace() {
    step end-grace
    write Y /proc/fs/lockd/nlm_end_grace
    write Y /proc/fs/nfsd/v4_end_grace
    # Both files read Y once their grace period is over.
    run grep -q Y /proc/fs/lockd/nlm_end_grace
    run grep -q Y /proc/fs/nfsd/v4_end_grace
}

# The hosts whose options ask for NFSv4 (vers=4.x or nfsvers=4.x), in order.
# Two v4 mounts of one server address share one nfs_client, that is one v4
# clientid, and knfsd neither recalls a delegation nor refuses a share when
# the conflicting opener is that same client: they would not be two hosts.
# So the k-th v4 host (k = 1, 2, ...) mounts the server at its own address,
# 127.0.0.k, and does so in a UTS namespace of its own with hostname
# vm-NAME: the client's EXCHANGE_ID owner string carries the nodename, so
# each host is a client of its own in /proc/fs/nfsd/clients.
v4_hosts() {
    echo "$VM_HOSTS" | while read -r name opts; do
        case ",$opts," in
            *,vers=4*|*,nfsvers=4*) echo "$name" ;;
        esac
    done
}
V4_HOSTS=$(v4_hosts)
V4ROOT=/srv/v4root

# One mount per simulated host.  `nosharecache` gives each its own superblock,
# hence its own caches, although all share one kernel (docs/design.md, "Real
# NFS": locks only conflict between different OS processes).
mount_hosts() {
    step mount-hosts
    # /mnt is on the read-only root: put a scratch tmpfs over it.
    run mount -t tmpfs -o mode=0755 vm-mnt /mnt
    echo "$VM_HOSTS" | while read -r name opts; do
        [ -n "$name" ] || continue
        step "mount-host-$name"
        run mkdir -p "/mnt/nfs/$name"
        case ",$opts," in
            *,vers=4*|*,nfsvers=4*)
                k=$(echo "$V4_HOSTS" | grep -n -x "$name" | cut -d: -f1)
                run unshare --uts sh -c "hostname vm-$name && exec mount -t nfs \
                    -o '$opts,nosharecache' 127.0.0.$k:/ /mnt/nfs/$name" ;;
            *)
                run mount -t nfs -o "$opts,nosharecache" "127.0.0.1:$EXPORT" "/mnt/nfs/$name" ;;
        esac
    done || exit 1
    step mount-table
    grep " nfs4* " /proc/mounts >>"$SETUP_LOG"
    if [ -n "$V4_HOSTS" ]; then
        # Each v4 host a client of its own (v4_hosts): one entry per host.
        cat /proc/fs/nfsd/clients/*/info >>"$SETUP_LOG" 2>&1
    fi
}

log_ready() {
    step ready
    echo "-- dmesg tail" >>"$SETUP_LOG"
    dmesg | tail -n 25 >>"$SETUP_LOG" 2>&1
}

# The caller's command, with the caller's cwd, PATH and virtualenv; stdin is
# closed so a stray read cannot hang the VM on the console.
run_command() {
    mkdir -p "$CTL/out" /tmp/vm-home
    cd "$VM_CWD" || { STEP=cwd; fail; }
    echo "== $(cut -d' ' -f1 /proc/uptime)s command: $VM_CMD" >>"$SETUP_LOG"
    echo command >"$CTL/step"
    {
        ( . "$CTL/command.env" && eval "exec $VM_CMD" ) </dev/null 2>&1
        echo $? >"$CTL/status"
    } | tee "$CTL/log.txt"
    echo "== $(cut -d' ' -f1 /proc/uptime)s command exited $(cat "$CTL/status")" >>"$SETUP_LOG"
    echo done >"$CTL/step"
}

link_modules
load_modules
shorten_grace
make_export
start_server
end_grace
mount_hosts
log_ready
run_command
exit "$(cat "$CTL/status")"
