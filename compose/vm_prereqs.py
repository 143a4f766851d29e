"""What the NFS VM needs on the machine that boots it: find it, or install it.

The VM (compose/vm.py) boots a Debian 6.1 kernel under qemu TCG with
virtme-ng and runs knfsd inside it (docs/design.md, "Real NFS"); this module
knows which packages that takes, how to tell each is there, and how to install
the missing ones.  Stdlib only.

Other kernel releases (``--kernel 6.12``; the 6.12 client grants a blocked
lock 30 s late, docs/nfs-facts.md, "Locks") are unpacked from Debian's package
into KERNELS_DIR rather than installed: the host's /boot, its initramfs and
bootloader hooks, and the kernel every other VM run picks by default stay as
they were.  virtme-ng finds such a kernel's modules beside its image (the
``lib/modules`` of the directory above ``boot/``) and links them into the
guest's /lib/modules.
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
SYSTEM_ROOT = Path("/")  # where /boot and /lib/modules are; tests point it elsewhere
# Kernels unpacked for the VM, one root per version (boot/, lib/modules/).
# Under /opt, which the guest sees as the host has it (through an overlay);
# not /var/cache, which virtme-ng covers with an empty tmpfs in the guest.
KERNELS_DIR = Path(os.environ.get("VM_KERNELS_DIR", "/opt/simfs-vm/kernels"))
# A release as asked for: "6.12", or a full version "6.12.117+deb12-amd64".
RELEASE = re.compile(r"\d+\.\d+(\.\d+)?([-+][A-Za-z0-9.+-]+)?")
# Debian's generic amd64 image packages (not -cloud-, -rt-, -dbg, -unsigned):
# linux-image-6.1.0-57-amd64, linux-image-6.12.117+deb12-amd64.
KERNEL_PACKAGE = re.compile(r"linux-image-(\d+\.\d+\.\d+(?:-\d+|\+deb\d+)-amd64)")

# Debian packages the VM needs (docs/design.md, "Real NFS"), and the commands
# that prove each is there.  busybox-static and file: virtme-run builds its
# initramfs from a static busybox and uses file(1) to check that it is static.
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


def find_kernel(release: str | None = None) -> Path | None:
    """The kernel image to boot, or None when no suitable one is here.

    Without ``release``: the newest /boot/vmlinuz-* whose modules include nfsd
    (the server must load).  With one ("6.12", or a full version): the
    newest such kernel of that release in /boot or unpacked in KERNELS_DIR.
    """
    for version, image in installed_kernels(include_unpacked=release is not None):
        if release is None or release_matches(version, release):
            return image
    return None


def installed_kernels(include_unpacked: bool = True) -> list[tuple[str, Path]]:
    """(version, image) of every kernel the VM can boot, newest first."""
    roots = [SYSTEM_ROOT]
    if include_unpacked and KERNELS_DIR.is_dir():
        roots += sorted(p for p in KERNELS_DIR.iterdir()
                        if p.is_dir() and not p.name.startswith("."))  # skip partial
    found = []
    for root in roots:
        for image in (root / "boot").glob("vmlinuz-*"):
            version = image.name.removeprefix("vmlinuz-")
            if any((root / "lib/modules" / version / "kernel/fs/nfsd").glob("nfsd.ko*")):
                found.append((version, image))
    return sorted(found, key=lambda pair: version_key(pair[0]), reverse=True)


def check_release(release: str) -> str:
    """``release`` itself when it names a kernel release, else a VmError saying so."""
    if not RELEASE.fullmatch(release):
        raise VmError(f"kernel {release!r} is not a release: give MAJOR.MINOR (e.g. 6.12) "
                      "or a full version (e.g. 6.12.117+deb12-amd64)")
    return release


def release_matches(version: str, release: str) -> bool:
    """Whether kernel ``version`` (6.12.117+deb12-amd64) is of ``release`` (6.12).

    6.1 must not match 6.12: the release is followed by a dot, a dash or
    nothing.
    """
    return version == release or version.startswith((release + ".", release + "-"))


def version_key(version: str) -> list[int]:
    """Sort key: 6.12.117+deb12-amd64 after 6.1.0-57-amd64 after 6.1.0-9-amd64."""
    return [int(n) for n in re.findall(r"\d+", version)]


def describe_installed() -> str:
    """The kernels the VM can boot now, for error messages."""
    versions = [version for version, _ in installed_kernels()]
    return ", ".join(versions) if versions else "none"


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


def problems(release: str | None = None) -> list[str]:
    """Every reason the VM cannot start here, each with the fix; empty when it can."""
    found: list[str] = []
    kernel = find_kernel(release)
    if kernel is None and release is None:
        found.append("no /boot/vmlinuz-* with an nfsd module: apt-get install linux-image-amd64")
    elif kernel is None:
        packaged = packaged_kernels()
        if any(release_matches(version, release) for version in packaged):
            fix = f"python compose/vm.py setup --kernel {release}"
        else:
            fix = f"no Debian package of it either; apt offers {describe_packaged(packaged)}"
        found.append(f"no kernel {release} for the VM (installed: {describe_installed()}): "
                     + fix)
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


# ---------------------------------------------------------- other kernels


def packaged_kernels() -> dict[str, str]:
    """Kernel version -> Debian package, for every generic amd64 image apt offers."""
    if shutil.which("apt-cache") is None:
        return {}
    result = subprocess.run(["apt-cache", "search", "--names-only", "^linux-image-[0-9]"],
                            capture_output=True, text=True, check=False)
    return parse_packaged_kernels(result.stdout)


def parse_packaged_kernels(search_output: str) -> dict[str, str]:
    """Kernel version -> package name, from ``apt-cache search`` lines."""
    found = {}
    for line in search_output.splitlines():
        match = KERNEL_PACKAGE.fullmatch(line.split(" - ", 1)[0].strip())
        if match:
            found[match.group(1)] = match.group(0)
    return found


def describe_packaged(packaged: dict[str, str]) -> str:
    """Releases apt offers, each with its newest version: "6.1 (6.1.0-57-amd64), ..."."""
    newest: dict[str, str] = {}
    for version in sorted(packaged, key=version_key):
        newest[".".join(version.split(".")[:2])] = version
    if not newest:
        return "none (no apt-cache, or no linux-image packages in its lists)"
    return ", ".join(f"{release} ({version})" for release, version in
                     sorted(newest.items(), key=lambda item: version_key(item[0])))


def install_kernel(release: str) -> Path:
    """Unpack the newest Debian kernel of ``release`` into KERNELS_DIR; its image.

    Raises:
        VmError: apt offers no such kernel (the message lists what it offers),
            or downloading or unpacking failed.
    """
    check_release(release)
    packaged = packaged_kernels()
    if not packaged and shutil.which("apt-get"):
        _run_or_fail(["apt-get", "update", "-qq"], "apt-get update")
        packaged = packaged_kernels()
    matching = sorted((v for v in packaged if release_matches(v, release)), key=version_key)
    if not matching:
        raise VmError(f"no Debian package of kernel {release}; apt offers: "
                      f"{describe_packaged(packaged)}")
    version = matching[-1]
    root = KERNELS_DIR / version
    print(f"vm setup: unpacking {packaged[version]} into {root}", flush=True)
    download = KERNELS_DIR / ".download"
    shutil.rmtree(download, ignore_errors=True)
    try:
        download.mkdir(parents=True)
    except OSError as error:
        raise VmError(f"cannot unpack kernels into {KERNELS_DIR} ({error.strerror}): run as "
                      "root, or set VM_KERNELS_DIR to a directory the guest sees "
                      "(not under /var/cache, /var/tmp or /var/log, which it sees empty)") from None
    try:
        # apt-get download runs as the _apt user when it can write the
        # directory; as root into a root-owned one it warns and carries on.
        _run_or_fail(["apt-get", "download", "-q", packaged[version]],
                     f"apt-get download {packaged[version]}", cwd=download)
        (deb,) = download.glob("*.deb")
        staging = KERNELS_DIR / f".{version}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        _run_or_fail(["dpkg-deb", "-x", str(deb), str(staging)], f"dpkg-deb -x {deb.name}")
        # The package leaves modules.dep to its postinst; modprobe needs it.
        _run_or_fail(["depmod", "-b", str(staging), version], f"depmod -b {staging}")
        shutil.rmtree(root, ignore_errors=True)
        staging.rename(root)
    finally:
        shutil.rmtree(download, ignore_errors=True)
    image = find_kernel(version)
    if image is None:
        raise VmError(f"{packaged[version]} unpacked into {root} has no nfsd module")
    return image


def _run_or_fail(argv: list[str], what: str, cwd: Path | None = None) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=cwd)
    if result.returncode != 0:
        raise VmError(f"{what} failed:\n{result.stdout}{result.stderr}")
