"""Run a command against a real Linux NFS client and knfsd server in a VM.

CI machines of this project have no NFS in the host kernel, no Docker engine,
and a /dev/kvm that only runs PVM guests; what works is a stock Debian 6.1
kernel under qemu's TCG emulator, booted by virtme-ng with the host's root
filesystem shared read-only (docs/design.md, "Real NFS").  Inside the guest,
compose/guest_nfs.sh starts knfsd on loopback and mounts its export once per
simulated host with `nosharecache`, so each host has its own client caches.
A host whose options say vers=4.1 or vers=4.2 mounts over NFSv4 as a client
of its own (its own server address and hostname: guest_nfs.sh, v4_hosts).

    python compose/vm.py setup
    python compose/vm.py check
    python compose/vm.py run --host a=vers=3 --host b=vers=3,acdirmin=3 \\
        --out /tmp/vmout -- python3 compose/probe_negative_lookup.py
    python compose/vm.py run --host a=vers=4.1 --host b=vers=4.1 \\
        --out /tmp/v41 -- python3 compose/probe_v41.py

A second kernel release: `setup --kernel 6.12` unpacks Debian's newest 6.12
image (vm_prereqs.py says where and why not into /boot), and `run --kernel
6.12` (or VM_KERNEL=6.12 in the environment, for every action) boots it.
Without either, `run` boots the newest kernel in /boot, as it always has.

`run` exits with the command's exit status; 124 when --timeout expired,
125 when the VM failed to boot or a set-up step failed (named on stderr and
in OUT/vm-setup.log).  Stdlib only: it must work before the project installs.
What the VM needs on this machine, and installing it, is in vm_prereqs.py.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# vm_prereqs sits beside this file; compose/ is no package, so make it
# importable however this file is loaded (as a script, or by tests).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from vm_prereqs import (
    GUEST_SCRIPT,
    VmError,
    check_release,
    find_kernel,
    find_vng,
    install_apt,
    install_kernel,
    install_vng,
    missing_apt_packages,
    problems,
)

EXIT_TIMEOUT = 124  # as timeout(1)
EXIT_VM_FAILED = 125  # as `docker run` when the container could not start

HOST_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
MOUNT_OPTIONS = re.compile(r"[A-Za-z0-9_.:/-]+(=[A-Za-z0-9_.:/-]+)?")
# Environment passed through to the command besides PATH and the virtualenv.
PASSED_ENV = ("PYTHONPATH", "PYTHONHASHSEED", "LANG", "LC_ALL", "TZ", "CI", "TERM")


class UsageError(Exception):
    """The command line asks for something `run` cannot do."""


@dataclass(frozen=True)
class Host:
    """One simulated host: a separate NFS mount of the one export, own caches."""

    name: str
    options: str

    @property
    def mountpoint(self) -> str:
        return f"/mnt/nfs/{self.name}"


def cmd_check(args: argparse.Namespace) -> int:
    """Say whether `run` can boot the VM, and exactly why not."""
    found = problems(args.kernel)
    if found:
        print("vm: the NFS VM cannot start here:")
        for problem in found:
            print(f"  - {problem}")
        kernel = f" --kernel {args.kernel}" if args.kernel else ""
        print(f"  (python compose/vm.py setup{kernel} installs what is missing)")
        return 1
    print(f"vm: ready (kernel {find_kernel(args.kernel)}, vng {find_vng()}, qemu TCG)")
    return 0


def cmd_setup(args: argparse.Namespace) -> int:
    """Install whatever the VM lacks; does nothing (and says so) when all is there."""
    missing = missing_apt_packages() if shutil.which("dpkg-query") else []
    if missing:
        install_apt(missing)
    if find_vng() is None:
        install_vng()
    unpacked = args.kernel is not None and find_kernel(args.kernel) is None
    if unpacked:
        install_kernel(args.kernel)
    found = problems(args.kernel)
    if found:
        print("vm setup: still missing after install:\n  - " + "\n  - ".join(found))
        return 1
    if not missing and not unpacked:
        print("vm setup: everything is installed")
    return 0


# --------------------------------------------------------------------- run


def parse_host(spec: str) -> Host:
    """Parse NAME=OPTIONS (options as for mount -o) into a Host, or explain why not."""
    name, sep, options = spec.partition("=")
    if not sep or not options:
        raise argparse.ArgumentTypeError(f"--host {spec!r}: expected NAME=OPTIONS, e.g. a=vers=3")
    if not HOST_NAME.fullmatch(name):
        raise argparse.ArgumentTypeError(
            f"--host {spec!r}: host name {name!r} must match {HOST_NAME.pattern}"
        )
    for option in options.split(","):
        if not MOUNT_OPTIONS.fullmatch(option):
            raise argparse.ArgumentTypeError(
                f"--host {spec!r}: {option!r} is not a mount option (NAME or NAME=VALUE)"
            )
        if option in ("sharecache", "nosharecache"):
            raise argparse.ArgumentTypeError(
                f"--host {spec!r}: drop {option!r}; every host gets nosharecache, "
                "which is what keeps its caches its own"
            )
    return Host(name, options)


def kernel_release(spec: str) -> str:
    """--kernel RELEASE: MAJOR.MINOR or a full version, else a usage error."""
    try:
        return check_release(spec)
    except VmError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def parse_env(spec: str) -> tuple[str, str]:
    """Parse NAME=VALUE for --env (e.g. SCENARIO=handshake for the command)."""
    name, sep, value = spec.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise argparse.ArgumentTypeError(f"--env {spec!r}: expected NAME=VALUE")
    return name, value


def command_env(
    hosts: Sequence[Host], out: str, extra: Sequence[tuple[str, str]]
) -> dict[str, str]:
    """The command's environment: the caller's PATH and virtualenv, plus NFS_*.

    The guest sees the host's root filesystem at the same paths, so the
    caller's venv interpreter runs unchanged inside.
    """
    path = os.environ.get("PATH", "/usr/bin:/bin")
    env = {"PATH": path}
    if sys.prefix != sys.base_prefix:  # run from a venv: its python comes first
        env["VIRTUAL_ENV"] = sys.prefix
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{path}"
    elif "VIRTUAL_ENV" in os.environ:
        env["VIRTUAL_ENV"] = os.environ["VIRTUAL_ENV"]
    env.update({k: os.environ[k] for k in PASSED_ENV if k in os.environ})
    env.update(
        NFS_MOUNTS=json.dumps({h.name: h.mountpoint for h in hosts}),
        NFS_OUT=out,
        PYTHONDONTWRITEBYTECODE="1",
        HOME="/tmp/vm-home",  # the real HOME is on the read-only root
        TMPDIR="/tmp",
    )
    env.update(extra)
    return env


def write_job(
    ctl: Path, hosts: Sequence[Host], command: Sequence[str], env: dict[str, str], kernel: Path
) -> None:
    """Write the files guest_nfs.sh sources: job.env (set-up), command.env (exports)."""
    version = kernel.name.removeprefix("vmlinuz-")
    job = {
        "VM_CWD": os.getcwd(),
        # The kernel's modules, beside its boot/ (an unpacked one's are not
        # in /lib/modules; guest_nfs.sh mounts them there).
        "VM_MODULES": str(kernel.parent.parent / "lib" / "modules" / version),
        "VM_HOSTS": "\n".join(f"{h.name} {h.options}" for h in hosts),
        "VM_CMD": shlex.join(command),
        "VM_EXPORT_SIZE": "512M",
    }
    (ctl / "job.env").write_text("".join(f"{k}={shlex.quote(v)}\n" for k, v in job.items()))
    (ctl / "command.env").write_text(
        "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    )


def vng_argv(vng: Path, kernel: Path, ctl: Path, cpus: int, memory: str) -> list[str]:
    """The measured vng invocation (docs/design.md, "Real NFS"): TCG, root, one shared rw dir."""
    return [
        str(vng),
        "--run", str(kernel),
        "--disable-kvm",
        "--cpus", str(cpus),
        "--memory", memory,
        "--user", "root",
        f"--rwdir={ctl}",
        "--exec", shlex.join(["sh", str(GUEST_SCRIPT), str(ctl)]),
    ]  # fmt: skip


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill vng and its qemu (one process group): nothing may outlive the run."""
    # qemu outlives vng by a moment, so wait for the whole group, not the leader.
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and group_alive(proc):
            time.sleep(0.1)
        if not group_alive(proc):
            break
    proc.wait()


def group_alive(proc: subprocess.Popen[bytes]) -> bool:
    """Whether any process of vng's group is left (reaping vng itself first)."""
    proc.poll()
    try:
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        return False
    return True


def stream(proc: subprocess.Popen[bytes], tail: collections.deque[str]) -> threading.Thread:
    """Copy the VM console to our stdout as it comes, keeping a tail for errors."""

    def pump() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            sys.stdout.buffer.write(raw)
            sys.stdout.flush()
            tail.append(raw.decode(errors="replace").rstrip())

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return thread


def boot(argv: list[str], vng: Path, timeout: float, tail: collections.deque[str]) -> str:
    """Run vng to completion; 'exited', 'timeout' or 'interrupted'."""
    env = {**os.environ, "PATH": f"{vng.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,  # one group to kill, and our Ctrl-C is ours to handle
    )
    pump = stream(proc, tail)
    try:
        proc.wait(timeout=timeout)
        outcome = "exited"
    except subprocess.TimeoutExpired:
        outcome = "timeout"
    except KeyboardInterrupt:
        outcome = "interrupted"
    finally:
        stop(proc)
        pump.join(timeout=5)
    return outcome


def read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return None


def setup_log_tail(log: Path, lines: int = 8) -> str:
    """The failing set-up command and its output: the log up to the dmesg tail."""
    text = read_text(log) or "(no vm-setup.log)"
    return "\n".join("  " + line for line in text.split("-- dmesg tail")[0].splitlines()[-lines:])


def collect(ctl: Path, out: Path) -> None:
    """Bring back the command's files ($NFS_OUT) and the two logs into OUT."""
    out.mkdir(parents=True, exist_ok=True)
    if (ctl / "out").is_dir():
        shutil.copytree(ctl / "out", out, dirs_exist_ok=True)
    for name in ("log.txt", "vm-setup.log"):
        if (ctl / name).is_file():
            shutil.copy2(ctl / name, out / name)


def verdict(ctl: Path, out: Path, outcome: str, timeout: float, tail: Sequence[str]) -> int:
    """Turn what the guest left in CTL into an exit status, saying what failed."""
    status = read_text(ctl / "status")
    step = read_text(ctl / "step")
    if outcome == "timeout":
        print(f"vm: timed out after {timeout:g} s during step {step or 'boot'!r}", file=sys.stderr)
        return EXIT_TIMEOUT
    if outcome == "interrupted":
        print(f"vm: interrupted during step {step or 'boot'!r}; VM stopped", file=sys.stderr)
        return 130
    if status is not None:
        return int(status)
    failed = read_text(ctl / "failed-step")
    if failed is not None:
        raise VmError(
            f"set-up step {failed!r} failed in the guest; its last lines "
            f"(all of it in {out / 'vm-setup.log'}):\n" + setup_log_tail(ctl / "vm-setup.log")
        )
    if step is None:
        raise VmError("boot: the VM exited before the guest script ran:\n" + "\n".join(tail))
    raise VmError(f"the VM stopped during step {step!r} without an exit status")


def cmd_run(args: argparse.Namespace) -> int:
    """Boot the VM, mount one NFS client per --host, run the command, bring back results."""
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise UsageError("nothing to run: put the command after --")
    names = [h.name for h in args.host]
    if len(set(names)) != len(names):
        raise UsageError(f"--host names must be distinct, got {names}")
    found = problems(args.kernel)
    if found:
        raise VmError("prepare: the VM cannot start here:\n  - " + "\n  - ".join(found))
    vng, kernel = find_vng(), find_kernel(args.kernel)
    assert vng is not None and kernel is not None
    out = Path(args.out).resolve()
    # A fresh shared dir each run, under /tmp so the guest mounts it at the same path.
    ctl = Path(tempfile.mkdtemp(prefix="nfsvm-", dir="/tmp"))
    try:
        env = command_env(args.host, str(ctl / "out"), args.env)
        write_job(ctl, args.host, command, env, kernel)
        tail: collections.deque[str] = collections.deque(maxlen=40)
        started = time.monotonic()
        outcome = boot(vng_argv(vng, kernel, ctl, args.cpus, args.memory), vng, args.timeout, tail)
        wall = time.monotonic() - started
        collect(ctl, out)
        try:
            code = verdict(ctl, out, outcome, args.timeout, tail)
        except VmError:
            record_run(out, args, command, kernel, wall, EXIT_VM_FAILED)
            raise
        record_run(out, args, command, kernel, wall, code)
        print(
            f"vm: {outcome}, exit status {code}, {wall:.1f} s wall; results in {out}",
            file=sys.stderr,
        )
        return code
    finally:
        shutil.rmtree(ctl, ignore_errors=True)


def record_run(
    out: Path,
    args: argparse.Namespace,
    command: Sequence[str],
    kernel: Path,
    wall: float,
    code: int,
) -> None:
    """OUT/vm-run.json: what ran where, and how long the whole VM run took."""
    record = {
        "command": list(command),
        "hosts": {h.name: h.options + ",nosharecache" for h in args.host},
        "kernel": str(kernel),
        "kernel_version": kernel.name.removeprefix("vmlinuz-"),
        "cpus": args.cpus,
        "memory": args.memory,
        "exit_status": code,
        "wall_s": round(wall, 1),
    }
    (out / "vm-run.json").write_text(json.dumps(record, indent=2) + "\n")


# --------------------------------------------------------------------- CLI


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="vm.py", description="A real NFS client and knfsd server in a qemu VM."
    )
    sub = top.add_subparsers(dest="action", required=True)
    setup = sub.add_parser("setup", help="install what the VM needs (apt-get, pip)")
    setup.set_defaults(func=cmd_setup)
    check = sub.add_parser("check", help="say whether the VM can start, and why not")
    check.set_defaults(func=cmd_check)
    run = sub.add_parser("run", help="run a command against one NFS mount per --host")
    run.set_defaults(func=cmd_run)
    for action in (setup, check, run):
        action.add_argument(
            "--kernel",
            type=kernel_release,
            default=os.environ.get("VM_KERNEL") or None,
            metavar="RELEASE",
            help="kernel release to boot, e.g. 6.12 or 6.12.117+deb12-amd64 "
            "(default: $VM_KERNEL, else the newest in /boot)",
        )
    run.add_argument(
        "--host",
        type=parse_host,
        action="append",
        required=True,
        metavar="NAME=OPTS",
        help="a client mount, e.g. b=vers=3,acdirmin=3 or b=vers=4.1",
    )
    run.add_argument("--out", required=True, help="directory for results and logs")
    run.add_argument("--timeout", type=float, default=900.0, help="seconds (default 900)")
    run.add_argument(
        "--env",
        type=parse_env,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment for the command",
    )
    run.add_argument("--cpus", type=int, default=2)
    run.add_argument("--memory", default="2G")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except VmError as error:
        print(f"vm: {error}", file=sys.stderr)
        return EXIT_VM_FAILED
    except UsageError as error:
        print(f"vm.py run: error: {error}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
