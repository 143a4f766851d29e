#!/bin/sh
# Validate compose/docker-compose.yml offline: Debian's docker-compose (v1)
# parses, interpolates and schema-checks the file with `config` without a
# Docker engine (docs/design.md, "Real NFS").  Installs docker-compose when
# missing. Exits 1 when the file is invalid, 3 when the checker could not be
# installed (then nothing was checked).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
file=$here/docker-compose.yml

if ! command -v docker-compose >/dev/null 2>&1; then
    echo "validate_compose: installing docker-compose (Debian package)" >&2
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    export DEBIAN_FRONTEND=noninteractive
    if ! { $sudo apt-get update -qq && $sudo apt-get install -y -qq docker-compose >/dev/null; }; then
        echo "validate_compose: NOT CHECKED: docker-compose could not be installed" >&2
        exit 3
    fi
fi

# Interpolation must not depend on the caller's shell: every variable has a
# default in the file, so an empty environment must give a complete config.
rendered=$(env -u NFS_SERVER -u NFS_EXPORT -u NFS_OPTIONS -u SCENARIO -u RESULTS_DIR -u PEER -u HOST_A -u HOST_B \
    docker-compose -f "$file" config)

services=$(docker-compose -f "$file" config --services | sort | tr '\n' ' ')
if [ "$services" != "host-a host-b nfs-server " ]; then
    echo "validate_compose: expected services host-a host-b nfs-server, got: $services" >&2
    exit 1
fi
for want in "privileged: true" "vers=3" "/results" "/src/compose/nfs_client.sh" \
    "ROLE: coordinator" "ROLE: agent" "NFS_EXPORT: /export"; do
    case $rendered in
        *"$want"*) ;;
        *) echo "validate_compose: rendered config lacks '$want'" >&2; exit 1 ;;
    esac
done
# The clients' script, which the file names: both roles are there.
script=$(cat "$here/nfs_client.sh")
for want in "--backend real" "scenarios agent" "NFS_AGENTS" "mount -t nfs"; do
    case $script in
        *"$want"*) ;;
        *) echo "validate_compose: nfs_client.sh lacks '$want'" >&2; exit 1 ;;
    esac
done
# The override for machines without a registry: local client images, and the
# server container only on request.
local_file=$here/docker-compose.local.yml
local_rendered=$(docker-compose -f "$file" -f "$local_file" config)
if [ "$(echo "$local_rendered" | grep -c 'image: simfs/nfs-client:local')" -ne 2 ]; then
    echo "validate_compose: $local_file does not give both clients simfs/nfs-client:local" >&2
    exit 1
fi
case $local_rendered in
    *server-container*) ;;
    *) echo "validate_compose: $local_file does not put nfs-server behind a profile" >&2; exit 1 ;;
esac
echo "validate_compose: $file is valid (services: $services), and so is its local override"
