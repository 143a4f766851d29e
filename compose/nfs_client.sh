#!/bin/sh
# One client host of the compose stack (docker-compose.yml's host-a and host-b,
# and the containers `--backend compose` starts): mount the export, then serve
# this host's processes as an agent or run the scenario as the coordinator.
#
# It prints "simfs-client HOST: mounted ..." once the mount is there; the
# compose backend (scenarios/_compose.py) waits for that line, then for the
# agent's "listening on" line.
#
# Environment:
#   HOST         this host's name in the scenario (required)
#   ROLE         agent (default) or coordinator
#   NFS_SERVER   address of the NFS server (default 127.0.0.1)
#   NFS_EXPORT   path the server exports (default /export)
#   NFS_OPTIONS  mount options (default vers=3,nosharecache)
#   AGENT_PORT   the agent's TCP port (default 7700)
#   MOUNT_TRIES  mount attempts, 2 s apart (default 60: the server may start
#                after this container, or on another machine)
#   coordinator only: OTHER (the other host's name), PEER (its machine's
#   address), SCENARIO (default handshake)
set -eu

HOST=${HOST:?HOST must name this host}
ROLE=${ROLE:-agent}
NFS_SERVER=${NFS_SERVER:-127.0.0.1}
NFS_EXPORT=${NFS_EXPORT:-/export}
NFS_OPTIONS=${NFS_OPTIONS:-vers=3,nosharecache}
AGENT_PORT=${AGENT_PORT:-7700}

say() { echo "simfs-client $HOST: $*" >&2; }

case $ROLE in
    agent|coordinator) ;;
    *) say "ROLE=$ROLE: allowed: agent, coordinator"; exit 2 ;;
esac

# A locally built image ships nfs-common; the public python image does not.
if ! command -v mount.nfs >/dev/null 2>&1; then
    say "installing nfs-common"
    apt-get update -qq && apt-get install -y -qq nfs-common >/dev/null
fi

mkdir -p /mnt/nfs
# rpcbind and statd are per machine (per network namespace): start them
# unless the machine already runs them (the server, or another client, may).
# Without statd, NFSv3 locks fail with ENOLCK.
try=0
while [ "$try" -lt "${MOUNT_TRIES:-60}" ]; do
    try=$((try + 1))
    rpcinfo -p 127.0.0.1 >/dev/null 2>&1 || rpcbind || true
    rpcinfo -p 127.0.0.1 2>/dev/null | grep -q status || rpc.statd --no-notify || true
    if mount -t nfs -o "$NFS_OPTIONS" "$NFS_SERVER:$NFS_EXPORT" /mnt/nfs; then break; fi
    sleep 2
done
if ! mountpoint -q /mnt/nfs; then
    say "cannot mount $NFS_SERVER:$NFS_EXPORT after $try tries (is the server up? see compose/README.md, 'When a mount fails')"
    exit 1
fi
say "mounted $NFS_SERVER:$NFS_EXPORT at /mnt/nfs: $(grep ' /mnt/nfs ' /proc/mounts)"

# The project: importable already (a locally built image has its
# dependencies, and runs /src as it is), or installed from /src here.
if python3 -c "import trio, outcome, hypothesis, blake3, safetensors" 2>/dev/null; then
    cd /src
    export PYTHONPATH=/src
else
    mkdir -p /tmp/src
    tar -C /src --exclude=./.venv --exclude=./.git --exclude=./build -cf - . | tar -C /tmp/src -xf -
    pip install -q --root-user-action=ignore /tmp/src
    cd /tmp/src
fi

export NFS_MOUNTS="{\"$HOST\": \"/mnt/nfs\"}"
if [ "$ROLE" = agent ]; then
    exec python3 -m scenarios agent --host "$HOST" --listen "0.0.0.0:$AGENT_PORT"
fi
export NFS_OUT=/results
export NFS_AGENTS="{\"${OTHER:?OTHER must name the other host}\": \"${PEER:-127.0.0.1}:$AGENT_PORT\"}"
sleep 5   # let the other host's agent start listening
exec python3 -m scenarios run "${SCENARIO:-handshake}" --backend real --json "/results/${SCENARIO:-handshake}.json"
