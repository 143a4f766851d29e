"""Run a command against a real Linux NFSv3 client and knfsd server in a VM.

CI machines of this project have no NFS in the host kernel, no Docker engine,
and a /dev/kvm that only runs PVM guests; what works is a stock Debian 6.1
kernel under qemu's TCG emulator, booted by virtme-ng with the host's root
filesystem shared read-only (DESIGN.md section 7).  Inside the guest,
compose/guest_nfs.sh starts knfsd on loopback and mounts its export once per
simulated host with `nosharecache`, so each host has its own client caches.

    python compose/vm.py setup
    python compose/vm.py check
    python compose/vm.py run --host a=vers=3 --host b=vers=3,acdirmin=3 \\
        --out /tmp/vmout -- python3 compose/probe_negative_lookup.py

`run` exits with the command's exit status; 124 when --timeout expired,
125 when the VM failed to boot or a set-up step failed (named on stderr and
in OUT/vm-setup.log).  Stdlib only: it must work before the project installs.
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
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

COMPOSE_DIR = Path(__file__).resolve().parent
GUEST_SCRIPT = COMPOSE_DIR / "guest_nfs.sh"

# Debian packages the VM needs (DESIGN.md s7), and the commands that prove each
# is there.  busybox-static and file: virtme-run builds its initramfs from a
# static busybox and uses file(1) to check that it is static.
APT_PACKAGES: dict[str, tuple[str, ...]] = {
    "qemu-system-x86": ("qemu-system-x86_64",),
    "linux-image-amd64": (),  # checked through find_kernel()
    "nfs-kernel-server": ("rpc.nfsd", "rpc.mountd", "exportfs"),
    "nfs-common": ("rpcbind", "rpc.statd", "mount.nfs"),
    "rpcbind": ("rpcbind",),
    "busybox-static": ("busybox",),
    "file": ("file",),
    "kmod": ("modprobe",),
    "e2fsprogs": ("mkfs.ext4",),
    "iproute2": ("ip",),
}
PIP_PACKAGE = "virtme-ng"

EXIT_TIMEOUT = 124  # as timeout(1)
EXIT_VM_FAILED = 125  # as `docker run` when the container could not start

HOST_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
MOUNT_OPTIONS = re.compile(r"[A-Za-z0-9_.:/-]+(=[A-Za-z0-9_.:/-]+)?")
# Environment passed through to the command besides PATH and the virtualenv.
PASSED_ENV = ("PYTHONPATH", "PYTHONHASHSEED", "LANG", "LC_ALL", "TZ", "CI", "TERM")
SBIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")


class VmError(Exception):
    """The VM could not be prepared, booted or set up; the message says which step."""


@dataclass(frozen=True)
class Host:
    """One simulated host: a separate NFS mount of the one export, own caches."""

    name: str
    options: str

    @property
    def mountpoint(self) -> str:
        return f"/mnt/nfs/{self.name}"


# ---------------------------------------------------------------- discovery


def which(command: str) -> str | None:
    """Find a command on PATH or in the sbin directories a non-login PATH lacks."""
    search = os.pathsep.join([os.environ.get("PATH", ""), *SBIN_DIRS])
    return shutil.which(command, path=search)


def find_vng() -> Path | None:
    """Find vng next to this interpreter first: `setup` pip-installs it there."""
    beside = Path(sys.executable).parent / "vng"
    if beside.is_file():
        return beside
    found = shutil.which("vng")
    return Path(found) if found else None


def find_kernel() -> Path | None:
    """Newest /boot/vmlinuz-* whose modules include nfsd (the server must load)."""
    for image in sorted(Path("/boot").glob("vmlinuz-*"), key=_kernel_sort_key, reverse=True):
        version = image.name.removeprefix("vmlinuz-")
        if any(Path("/lib/modules", version, "kernel/fs/nfsd").glob("nfsd.ko*")):
            return image
    return None


def _kernel_sort_key(image: Path) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", image.name)]


def is_static_elf(path: str) -> bool:
    """True when an ELF file has no PT_INTERP header, i.e. is statically linked."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit only: x86_64 hosts
            return False
        phoff, = struct.unpack_from("<Q", head, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    pt_interp = 3
    return all(
        struct.unpack_from("<I", table, i * phentsize)[0] != pt_interp for i in range(phnum)
    )


# ------------------------------------------------------------------- check


def problems() -> list[str]:
    """Every reason the VM cannot start here, each with the fix; empty when it can."""
    found: list[str] = []
    kernel = find_kernel()
    if kernel is None:
        found.append("no /boot/vmlinuz-* with an nfsd module: apt-get install linux-image-amd64")
    elif not os.access(kernel, os.R_OK):
        found.append(f"{kernel} is not readable by this user: run as root")
    vng = find_vng()
    if vng is None:
        found.append(f"no vng (virtme-ng): {sys.executable} -m pip install {PIP_PACKAGE}")
    elif not (vng.parent / "virtme-run").is_file():
        found.append(f"vng at {vng} has no virtme-run beside it: reinstall {PIP_PACKAGE}")
    for package, commands in APT_PACKAGES.items():
        for command in commands:
            if which(command) is None:
                found.append(f"no {command}: apt-get install {package}")
    busybox = which("busybox")
    if busybox is not None and not is_static_elf(busybox):
        found.append(f"{busybox} is dynamically linked: apt-get install busybox-static")
    if not GUEST_SCRIPT.is_file():
        found.append(f"missing {GUEST_SCRIPT}")
    return found


def cmd_check(_: argparse.Namespace) -> int:
    """Say whether `run` can boot the VM, and exactly why not."""
    found = problems()
    if found:
        print("vm: the NFS VM cannot start here:")
        for problem in found:
            print(f"  - {problem}")
        print("  (python compose/vm.py setup installs what is missing)")
        return 1
    print(f"vm: ready (kernel {find_kernel()}, vng {find_vng()}, qemu TCG)")
    return 0


# ------------------------------------------------------------------- setup


def missing_apt_packages() -> list[str]:
    """Debian packages not installed, asked of dpkg (the commands may be elsewhere)."""
    missing = []
    for package in APT_PACKAGES:
        result = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", package],
            capture_output=True,
            text=True,
            check=False,
        )
        if "install ok installed" not in result.stdout:
            missing.append(package)
    return missing


def install_apt(packages: Sequence[str]) -> None:
    """apt-get install, noninteractive; apt-get update first, as a fresh machine needs."""
    if shutil.which("apt-get") is None:
        raise VmError(f"no apt-get: install {' '.join(packages)} with this system's tools")
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print(f"vm setup: apt-get install {' '.join(packages)}", flush=True)
    for args in (["update", "-qq"], ["install", "-y", "-qq", *packages]):
        result = subprocess.run(
            [*sudo, "apt-get", *args], env=env, capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise VmError(f"apt-get {args[0]} failed:\n{result.stdout}{result.stderr}")


def install_vng() -> None:
    """pip install virtme-ng into this interpreter's environment (its venv, if any)."""
    print(f"vm setup: {sys.executable} -m pip install {PIP_PACKAGE}", flush=True)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", PIP_PACKAGE],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise VmError(f"pip install {PIP_PACKAGE} failed:\n{result.stdout}{result.stderr}")


def cmd_setup(_: argparse.Namespace) -> int:
    """Install whatever the VM lacks; does nothing (and says so) when all is there."""
    missing = missing_apt_packages() if shutil.which("dpkg-query") else []
    if missing:
        install_apt(missing)
    if find_vng() is None:
        install_vng()
    found = problems()
    if found:
        print("vm setup: still missing after install:\n  - " + "\n  - ".join(found))
        return 1
    if not missing:
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


def parse_env(spec: str) -> tuple[str, str]:
    name, sep, value = spec.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise argparse.ArgumentTypeError(f"--env {spec!r}: expected NAME=VALUE")
    return name, value


def command_env(hosts: Sequence[Host], out: str, extra: Sequence[tuple[str, str]]) -> dict[str, str]:
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


def write_job(ctl: Path, hosts: Sequence[Host], command: Sequence[str], env: dict[str, str]) -> None:
    """Write the files guest_nfs.sh sources: job.env (set-up), command.env (exports)."""
    job = {
        "VM_CWD": os.getcwd(),
        "VM_HOSTS": "\n".join(f"{h.name} {h.options}" for h in hosts),
        "VM_CMD": shlex.join(command),
        "VM_EXPORT_SIZE": "512M",
    }
    (ctl / "job.env").write_text("".join(f"{k}={shlex.quote(v)}\n" for k, v in job.items()))
    (ctl / "command.env").write_text(
        "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    )


def vng_argv(vng: Path, kernel: Path, ctl: Path, cpus: int, memory: str) -> list[str]:
    """The measured vng invocation (DESIGN.md s7): TCG, root, one shared rw dir."""
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
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


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


def collect(ctl: Path, out: Path) -> None:
    """Bring back the command's files ($NFS_OUT) and the two logs into OUT."""
    out.mkdir(parents=True, exist_ok=True)
    if (ctl / "out").is_dir():
        shutil.copytree(ctl / "out", out, dirs_exist_ok=True)
    for name in ("log.txt", "vm-setup.log"):
        if (ctl / name).is_file():
            shutil.copy2(ctl / name, out / name)


def verdict(ctl: Path, outcome: str, timeout: float, tail: Sequence[str]) -> int:
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
        raise VmError(f"set-up step {failed!r} failed in the guest (see vm-setup.log)")
    if step is None:
        raise VmError("boot: the VM exited before the guest script ran:\n" + "\n".join(tail))
    raise VmError(f"the VM stopped during step {step!r} without an exit status")


def cmd_run(args: argparse.Namespace) -> int:
    """Boot the VM, mount one NFS client per --host, run the command, bring back results."""
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise VmError("nothing to run: put the command after --")
    names = [h.name for h in args.host]
    if len(set(names)) != len(names):
        raise VmError(f"--host names must be distinct, got {names}")
    found = problems()
    if found:
        raise VmError("prepare: the VM cannot start here:\n  - " + "\n  - ".join(found))
    vng, kernel = find_vng(), find_kernel()
    assert vng is not None and kernel is not None
    out = Path(args.out).resolve()
    # A fresh shared dir each run, under /tmp so the guest mounts it at the same path.
    ctl = Path(tempfile.mkdtemp(prefix="nfsvm-", dir="/tmp"))
    try:
        env = command_env(args.host, str(ctl / "out"), args.env)
        write_job(ctl, args.host, command, env)
        tail: collections.deque[str] = collections.deque(maxlen=40)
        started = time.monotonic()
        outcome = boot(vng_argv(vng, kernel, ctl, args.cpus, args.memory), vng, args.timeout, tail)
        wall = time.monotonic() - started
        collect(ctl, out)
        try:
            code = verdict(ctl, outcome, args.timeout, tail)
        except VmError:
            record_run(out, args, command, kernel, wall, EXIT_VM_FAILED)
            raise
        record_run(out, args, command, kernel, wall, code)
        print(f"vm: {outcome}, exit status {code}, {wall:.1f} s wall; results in {out}",
              file=sys.stderr)
        return code
    finally:
        shutil.rmtree(ctl, ignore_errors=True)


def record_run(
    out: Path, args: argparse.Namespace, command: Sequence[str], kernel: Path, wall: float, code: int
) -> None:
    """OUT/vm-run.json: what ran where, and how long the whole VM run took."""
    record = {
        "command": list(command),
        "hosts": {h.name: h.options + ",nosharecache" for h in args.host},
        "kernel": str(kernel),
        "cpus": args.cpus,
        "memory": args.memory,
        "exit_status": code,
        "wall_s": round(wall, 1),
    }
    (out / "vm-run.json").write_text(json.dumps(record, indent=2) + "\n")


# --------------------------------------------------------------------- CLI


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="vm.py", description="A real NFSv3 client and knfsd server in a qemu VM."
    )
    sub = top.add_subparsers(dest="action", required=True)
    sub.add_parser("setup", help="install what the VM needs (apt-get, pip)").set_defaults(
        func=cmd_setup
    )
    sub.add_parser("check", help="say whether the VM can start, and why not").set_defaults(
        func=cmd_check
    )
    run = sub.add_parser("run", help="run a command against one NFS mount per --host")
    run.set_defaults(func=cmd_run)
    run.add_argument("--host", type=parse_host, action="append", required=True,
                     metavar="NAME=OPTS", help="a client mount, e.g. b=vers=3,acdirmin=3")
    run.add_argument("--out", required=True, help="directory for results and logs")
    run.add_argument("--timeout", type=float, default=900.0, help="seconds (default 900)")
    run.add_argument("--env", type=parse_env, action="append", default=[],
                     metavar="NAME=VALUE", help="extra environment for the command")
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
    return code


if __name__ == "__main__":
    sys.exit(main())
