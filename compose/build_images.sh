#!/bin/sh
# Build the NFS client image's root filesystem without any container registry:
# Debian's packages (debootstrap) plus this project's dependencies from PyPI,
# as a tarball that `docker import` turns into an image on any engine, e.g.
# the one compose/ci_compose_tier.sh starts inside the VM.
#
#   sh compose/build_images.sh [OUT_DIR]      (default build/compose)
#
# Writes OUT_DIR/nfs-client.tar.  The image it makes has what
# compose/nfs_client.sh would otherwise install at start-up (nfs-common,
# the project's dependencies), so it starts offline; the project itself runs
# from the repository mounted at /src.  Reuses OUT_DIR/rootfs when it is
# there (delete it to rebuild from scratch).  Needs root and apt.
#
# Exit status: 0 built; 3 when a tool could not be installed or the
# packages could not be fetched (the reason is printed).
set -eu

cd "$(dirname "$0")/.."
out=${1:-build/compose}
rootfs=$out/rootfs
suite=${DEBIAN_SUITE:-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
python=${PYTHON:-.venv/bin/python}
[ -x "$python" ] || python=python3

say() { echo "build_images: $*" >&2; }

if ! command -v debootstrap >/dev/null 2>&1; then
    say "installing debootstrap"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }; then
        say "NOT BUILT: debootstrap could not be installed"; exit 3
    fi
fi

mkdir -p "$out"
if [ ! -x "$rootfs/usr/bin/python3" ] || [ ! -x "$rootfs/sbin/mount.nfs" ] \
        || [ ! -f "$rootfs/etc/services" ]; then
    rm -rf "$rootfs"
    say "debootstrap $suite into $rootfs (python3, nfs-common)"
    # netbase: /etc/services and /etc/protocols.  Without them (minbase
    # lacks them) libtirpc cannot resolve "sunrpc": measured in a container,
    # `rpcinfo -p 127.0.0.1` said "RPC: Unknown host" and mount.nfs
    # "Protocol not supported".
    if ! debootstrap --variant=minbase --include=python3,nfs-common,rpcbind,netbase,procps \
            "$suite" "$rootfs" "$mirror" >"$out/debootstrap.log" 2>&1; then
        tail -n 20 "$out/debootstrap.log" >&2
        say "NOT BUILT: debootstrap failed (log: $out/debootstrap.log)"; exit 3
    fi
fi

# The project's dependencies (and the project, shadowed at run time by
# /src), for the image's python3: same minor version and a glibc no older
# than the wheels need (Debian 12: python 3.11, glibc 2.36).
image_python=$(chroot "$rootfs" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
site=$rootfs/usr/local/lib/python$image_python/dist-packages
say "installing the project and its dependencies into $site"
rm -rf "$site" && mkdir -p "$site"
rm -rf "$out/wheels" && mkdir -p "$out/wheels"
if ! { "$python" -m pip wheel -q --no-deps -w "$out/wheels" . \
       && "$python" -m pip install -q --no-compile --target "$site" \
            --python-version "$image_python" --only-binary=:all: "$out"/wheels/*.whl; } \
       >"$out/pip.log" 2>&1; then
    tail -n 20 "$out/pip.log" >&2
    say "NOT BUILT: pip could not install the dependencies (log: $out/pip.log)"; exit 3
fi

# Smaller (docker import in the emulated guest reads every byte): no
# downloaded .debs (42 MB), package lists, docs, or the stdlib's tests.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
    "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/usr/lib/python3*/test \
    "$rootfs"/usr/share/doc \
    "$rootfs"/usr/share/man "$rootfs"/usr/share/locale
# Bytecode, compiled once here by the image's own python3: the containers
# run with PYTHONDONTWRITEBYTECODE, so without it every process compiled
# every module it imported again (importing the project took 3x longer
# without bytecode, measured natively; the emulated guest multiplies that).
chroot "$rootfs" python3 -m compileall -q "${site#"$rootfs"}" >/dev/null || {
    say "NOT BUILT: the image's python3 cannot compile its site-packages"; exit 1; }
chroot "$rootfs" python3 -c 'import trio, hypothesis, blake3, safetensors, scenarios' || {
    say "NOT BUILT: the image's python3 cannot import the project's dependencies"; exit 1; }
tar -C "$rootfs" --numeric-owner -cf "$out/nfs-client.tar.tmp" . && \
    mv "$out/nfs-client.tar.tmp" "$out/nfs-client.tar"
say "built $out/nfs-client.tar ($(du -h "$out/nfs-client.tar" | cut -f1)): docker import it as simfs/nfs-client:local"
