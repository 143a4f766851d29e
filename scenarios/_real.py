"""The real-NFS backend: each host is a real mount of one NFSv3 export.

Mount points come from ``NFS_MOUNTS``, a JSON object mapping host names to
mount points, as ``compose/vm.py`` sets it inside its VM (two
``nosharecache`` mounts of one export are two independent client caches).
Each scenario process is a real OS process (forked, so the scenario's
module-level functions run as written), with the host's mount point as its
root; times are real.  Hosts on other machines are reached through agents
(``NFS_AGENTS``, see ``scenarios._agent``).

Mount options are fixed when the export is mounted, so a session checks
that the options a scenario asks for are the ones ``/proc/mounts`` shows,
rather than silently measuring something else.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import traceback
from collections.abc import Iterator, Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

from simfs import MountOptions

from ._base import BackendFailed, ProcessSpec, ScenarioError

# vers too: a v3 mount passed off as a v4.1 host (or back) would check one
# version's facts against the other's client; and local_lock, which says
# which locks stay on the host (nolock shows local_lock=all).
_CHECKED_OPTIONS = ("acregmin", "acregmax", "acdirmin", "acdirmax", "lookupcache", "vers",
                    "local_lock")


def _mount_options(mount_point: str) -> dict[str, str]:
    """The options /proc/mounts shows for an NFS mount point."""
    with open("/proc/mounts", encoding="utf-8") as handle:
        for line in handle:
            fields = line.split()
            if len(fields) >= 4 and fields[1] == mount_point and fields[2].startswith("nfs"):
                return dict(option.partition("=")[::2] for option in fields[3].split(","))
    raise ScenarioError(f"backend real: {mount_point} is not an NFS mount (see /proc/mounts)")


def _check_options(host: str, mount_point: str, wanted: str) -> None:
    expected = MountOptions.parse(wanted)
    actual = _mount_options(mount_point)
    for name in _CHECKED_OPTIONS:
        want = str(getattr(expected, name))
        have = actual.get(name)
        if name == "lookupcache" and have is None:
            have = "all"  # the kernel lists lookupcache only when it is not the default
        if have is not None and have != want and not (name == "lookupcache"
                                                      and have.startswith(want[:3])):
            raise ScenarioError(
                f"backend real: host {host!r} wants {name}={want} but {mount_point} is "
                f"mounted with {name}={have}; remount it (compose/vm.py --host "
                f"{host}={wanted})")


def mountstats(mount_point: str) -> dict[str, int]:
    """Per-operation RPC counts of one mount, from /proc/self/mountstats."""
    with open("/proc/self/mountstats", encoding="utf-8") as handle:
        return parse_mountstats(handle.read(), mount_point)


def parse_mountstats(text: str, mount_point: str) -> dict[str, int]:
    """The "per-op statistics" of the mount at ``mount_point``: operation -> calls."""
    counts: dict[str, int] = {}
    in_mount = in_ops = False
    for line in text.splitlines():
        if line.startswith("device "):
            in_mount = f" mounted on {mount_point} " in line
            in_ops = False
            continue
        if not in_mount:
            continue
        stripped = line.strip()
        if stripped.startswith("per-op statistics"):
            in_ops = True
            continue
        if in_ops and ":" in stripped:
            name, _, numbers = stripped.partition(":")
            values = numbers.split()
            if values and name.isupper() and values[0].isdigit():
                counts[name] = int(values[0])
    return counts


WAITING = "waiting"  # a child's first message: imported, unpickled, waiting for "go"


def _child(connection: Connection, spec: ProcessSpec, root: str, go: Any) -> None:
    try:
        # Only now is this process one event away from starting: a spawned
        # interpreter took about a minute to import the project under qemu's
        # emulator, and a process still importing when "go" came started that
        # much later than its peer (issue 17: the handshake's creator ran
        # before the waiter had made the step directory).
        connection.send((WAITING, None))
        go.wait()  # start with the others, as simulated processes start at one instant
        result = spec.target(root, *spec.args)
        connection.send(("ok", result))
    except BaseException as error:  # report everything to the parent, then exit
        connection.send(("error", (type(error).__name__, str(error),
                                   traceback.format_exc())))
    finally:
        connection.close()


class RealProcessFailed(BackendFailed):
    """A scenario process on a real mount raised; carries its traceback text."""


def await_waiting(receiver: Connection, process: Any, what: str, timeout: float) -> None:
    """Return once the child started by ``process`` waits for "go" (``_child``).

    Args:
        receiver: the parent's end of the child's pipe.
        process: the ``multiprocessing.Process`` (for its exit code).
        what: names the process in errors, e.g. "create_marker on 'trainer'".
        timeout: seconds the child may take to start.

    Raises:
        RealProcessFailed: the child exited, failed, or did not start in time.
    """
    try:
        if not receiver.poll(timeout):
            process.kill()
            raise RealProcessFailed(f"{what} did not start within {timeout:g} s")
        status, payload = receiver.recv()
    except EOFError:
        process.join(5)
        raise RealProcessFailed(f"{what} exited (exit code {process.exitcode}) before it "
                                f"started") from None
    if status == "error":
        name, message, text = payload
        raise RealProcessFailed(f"{what} raised {name}: {message}\n{text}")
    if status != WAITING:
        raise RealProcessFailed(f"{what} sent {status!r} before it started")


class _Trial:
    """One trial's started processes, local and on agents, all waiting for "go"."""

    def __init__(self, processes: Sequence[ProcessSpec], timeout: float, go: Any) -> None:
        self.processes = processes
        self.timeout = timeout
        self.go = go
        self.local: list[tuple[ProcessSpec, Any, Connection]] = []
        self.remote: dict[int, Any] = {}  # index in processes -> _agent.RemoteProcess

    def release(self) -> None:
        self.go.set()
        for process_on_agent in self.remote.values():
            process_on_agent.go()

    def collect(self) -> list[Any]:
        """Every process's result, in the order of ``processes``.

        Raises:
            RealProcessFailed: a process raised or did not finish in time.
        """
        local: list[Any] = []
        for spec, process, receiver in self.local:
            if not receiver.poll(self.timeout):
                self.cancel()
                raise RealProcessFailed(f"{spec.target.__name__} on {spec.host!r} did not "
                                        f"finish within {self.timeout} s")
            status, payload = receiver.recv()
            process.join()
            if status == "error":
                name, message, text = payload
                raise RealProcessFailed(f"{spec.target.__name__} on {spec.host!r} raised "
                                        f"{name}: {message}\n{text}")
            local.append(payload)
        in_order = iter(local)
        return [self.remote[index].result() if index in self.remote else next(in_order)
                for index in range(len(self.processes))]

    def cancel(self) -> None:
        """Stop every process that has not finished; its agent kills its own."""
        for _, process, _ in self.local:
            process.kill()
        for process_on_agent in self.remote.values():
            process_on_agent.cancel()


class RealSession:
    """Real mounts; ``run`` forks one OS process per spec and collects results."""

    def __init__(self, mounts: Mapping[str, str], hosts: Mapping[str, str], *,
                 verify_nfs: bool = True, agents: Mapping[str, str] | None = None) -> None:
        """``verify_nfs=False`` accepts plain directories (tests of the machinery)."""
        self._mounts = {}
        self._agents = dict(agents or {})
        self._options = dict(hosts)
        for host, options in hosts.items():
            if host in self._agents:
                continue  # its agent checks its mount
            if host not in mounts:
                raise ScenarioError(
                    f"backend real: host {host!r} has no mount; NFS_MOUNTS has "
                    f"{', '.join(sorted(mounts)) or 'none'}")
            if verify_nfs:
                _check_options(host, mounts[host], options)
            self._mounts[host] = mounts[host]
        self._context = multiprocessing.get_context("fork")

    def run(self, processes: Sequence[ProcessSpec], *, timeout: float) -> list[Any]:
        trial = self._start(processes, timeout)
        trial.release()
        return trial.collect()

    def run_trials(self, trials: Sequence[Sequence[ProcessSpec]], *, timeout: float
                   ) -> Iterator[list[Any]]:
        """``run`` each trial in turn, each released the moment the previous one ends.

        The next trial's processes are started, and waiting, while the
        previous one runs.  In the simulation one trial begins at the very
        instant the last one ended, with the clients' caches as it left them
        (attributes cached then expire acdirmin later); started only after
        it, the next trial began late by a fork and an agent round trip
        each, which under qemu's emulator shortened the handshake's
        measured stall by up to 0.2 s (issue 17).

        Yields:
            each trial's results, in the order of ``run``'s.
        """
        following = self._start(trials[0], timeout) if trials else None
        try:
            for index in range(len(trials)):
                current, following = following, None
                assert current is not None
                current.release()
                if index + 1 < len(trials):
                    following = self._start(trials[index + 1], timeout)
                yield current.collect()
        finally:  # a failed trial, or a caller that stopped early
            if following is not None:
                following.cancel()

    def _start(self, processes: Sequence[ProcessSpec], timeout: float) -> _Trial:
        """Start every process of one trial; return once each waits for "go"."""
        from ._agent import RemoteProcess

        trial = _Trial(processes, timeout, self._context.Event())
        try:
            for index, spec in enumerate(processes):
                if spec.host in self._agents:
                    trial.remote[index] = RemoteProcess(self._agents[spec.host], spec,
                                                        self._options[spec.host], timeout)
                    continue
                receiver, sender = self._context.Pipe(duplex=False)
                process = self._context.Process(
                    target=_child, args=(sender, spec, self._mounts[spec.host], trial.go),
                    name=spec.name or spec.target.__name__)
                process.start()
                sender.close()
                trial.local.append((spec, process, receiver))
            # Forking takes long under emulation; release every process at
            # once, once every one waits (the agents' did before answering
            # "ready"), so that the trial starts together on all hosts.
            for spec, process, receiver in trial.local:
                await_waiting(receiver, process, f"{spec.target.__name__} on {spec.host!r}",
                              timeout)
        except BaseException:
            trial.cancel()
            raise
        return trial

    def choices(self) -> list[int]:
        return []  # real NFS: the kernel's schedule, not one a replay can give back

    def rpc_counts(self, host: str) -> dict[str, int]:
        if host in self._agents:
            from ._agent import remote_mountstats

            return remote_mountstats(self._agents[host])
        return mountstats(self._mounts[host])

    def close(self) -> str:
        return ""


def _agents_from(text: str) -> dict[str, str]:
    """``NFS_AGENTS``: host name -> "address:port" of the agent serving it."""
    if not text:
        return {}
    try:
        agents = json.loads(text)
    except json.JSONDecodeError as error:
        raise ScenarioError(f"NFS_AGENTS is not JSON ({error}): {text!r}") from None
    if not isinstance(agents, dict) or not all(
            isinstance(v, str) and ":" in v for v in agents.values()):
        raise ScenarioError(f"NFS_AGENTS must map host names to 'address:port', not {text!r}")
    return agents


class RealBackend:
    """``--backend real``: scenario hosts are the mounts named in NFS_MOUNTS."""

    name = "real"

    def __init__(self, mounts: Mapping[str, str], *, verify_nfs: bool = True,
                 agents: Mapping[str, str] | None = None) -> None:
        self.mounts = dict(mounts)
        self.agents = dict(agents or {})
        self._verify_nfs = verify_nfs

    @classmethod
    def from_environment(cls) -> RealBackend:
        """The mounts of ``NFS_MOUNTS``.

        Raises:
            ScenarioError: NFS_MOUNTS is unset or not a JSON object of paths.
        """
        text = os.environ.get("NFS_MOUNTS")
        if not text:
            raise ScenarioError(
                "backend real needs NFS_MOUNTS, a JSON object of host name -> NFS mount point "
                "(compose/vm.py sets it inside its VM; see compose/README.md)")
        try:
            mounts = json.loads(text)
        except json.JSONDecodeError as error:
            raise ScenarioError(f"NFS_MOUNTS is not JSON ({error}): {text!r}") from None
        if not isinstance(mounts, dict) or not all(isinstance(v, str) for v in mounts.values()):
            raise ScenarioError(f"NFS_MOUNTS must map host names to paths, not {text!r}")
        return cls(mounts, agents=_agents_from(os.environ.get("NFS_AGENTS", "")))

    def session(self, hosts: Mapping[str, str], seed: int) -> RealSession:
        return RealSession(self.mounts, hosts, verify_nfs=self._verify_nfs, agents=self.agents)
