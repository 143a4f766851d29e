"""What the NFS VM needs on the machine that boots it: find it, or install it.

The VM (compose/vm.py) boots a Debian 6.1 kernel under qemu TCG with
virtme-ng and runs knfsd inside it (DESIGN.md section 7); this module knows
which packages that takes, how to tell each is there, and how to install the
missing ones.  Stdlib only.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
from collections.abc import Sequence
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
    "nfs-common": ("rpc.statd", "mount.nfs"),
    "rpcbind": ("rpcbind",),
    "busybox-static": ("busybox",),
    "file": ("file",),
    "kmod": ("modprobe",),
    "e2fsprogs": ("mkfs.ext4",),
    "iproute2": ("ip",),
}
PIP_PACKAGE = "virtme-ng"

SBIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")


class VmError(Exception):
    """The VM could not be prepared, booted or set up; the message says which step."""


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
        (phoff,) = struct.unpack_from("<Q", head, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    pt_interp = 3
    return all(struct.unpack_from("<I", table, i * phentsize)[0] != pt_interp for i in range(phnum))


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


# ------------------------------------------------------------------ install


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
