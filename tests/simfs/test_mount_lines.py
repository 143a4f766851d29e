"""Whole /proc/mounts lines, verbatim from Linux 6.1, and the kernel's ranges.

Every line below was printed by a Debian 6.1.0-57 client of knfsd in the VM
(``compose/probe_lock_modes.py``; docs/nfs-facts.md, "Mount lines"):

    python compose/vm.py run --memory 6G --host none1=vers=3 ... \\
        --out OUT -- python3 compose/probe_lock_modes.py

Options are printed by ``nfs_show_mount_options`` (fs/nfs/super.c) and read
back by ``nfs_fs_context_parse_param`` (fs/nfs/fs_context.c), whose numbers
are ``fsparam_u32``: kstrtouint in base 0, 0 to 4294967295.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

from simfs import MountOptionError, MountOptions, MountOptionWarning, World

V3_LINES = {
    "none": "127.0.0.1:/srv/nfs /mnt/nfs/none1 nfs rw,relatime,vers=3,rsize=1048576,"
            "wsize=1048576,namlen=255,hard,nosharecache,proto=tcp,timeo=600,retrans=2,"
            "sec=sys,mountaddr=127.0.0.1,mountvers=3,mountport=50403,mountproto=udp,"
            "local_lock=none,addr=127.0.0.1 0 0",
    "nolock": "127.0.0.1:/srv/nfs /mnt/nfs/nolock1 nfs rw,relatime,vers=3,rsize=1048576,"
              "wsize=1048576,namlen=255,hard,nolock,nosharecache,proto=tcp,timeo=600,"
              "retrans=2,sec=sys,mountaddr=127.0.0.1,mountvers=3,mountport=50403,"
              "mountproto=udp,local_lock=all,addr=127.0.0.1 0 0",
    "flock": "127.0.0.1:/srv/nfs /mnt/nfs/flock1 nfs rw,relatime,vers=3,rsize=1048576,"
             "wsize=1048576,namlen=255,hard,nosharecache,proto=tcp,timeo=600,retrans=2,"
             "sec=sys,mountaddr=127.0.0.1,mountvers=3,mountport=50403,mountproto=udp,"
             "local_lock=flock,addr=127.0.0.1 0 0",
    "posix": "127.0.0.1:/srv/nfs /mnt/nfs/posix1 nfs rw,relatime,vers=3,rsize=1048576,"
             "wsize=1048576,namlen=255,hard,nosharecache,proto=tcp,timeo=600,retrans=2,"
             "sec=sys,mountaddr=127.0.0.1,mountvers=3,mountport=50403,mountproto=udp,"
             "local_lock=posix,addr=127.0.0.1 0 0",
    "all": "127.0.0.1:/srv/nfs /mnt/nfs/all1 nfs rw,relatime,vers=3,rsize=1048576,"
           "wsize=1048576,namlen=255,hard,nosharecache,proto=tcp,timeo=600,retrans=2,"
           "sec=sys,mountaddr=127.0.0.1,mountvers=3,mountport=50403,mountproto=udp,"
           "local_lock=all,addr=127.0.0.1 0 0",
    "noac": "127.0.0.1:/srv/nfs /mnt/extra/noac nfs rw,sync,relatime,vers=3,rsize=1048576,"
            "wsize=1048576,namlen=255,acregmin=0,acregmax=0,acdirmin=0,acdirmax=0,hard,noac,"
            "nosharecache,proto=tcp,timeo=600,retrans=2,sec=sys,mountaddr=127.0.0.1,"
            "mountvers=3,mountport=50403,mountproto=udp,local_lock=none,addr=127.0.0.1 0 0",
    "rsize1": "127.0.0.1:/srv/nfs /mnt/extra/rsize1 nfs rw,relatime,vers=3,rsize=4096,"
              "wsize=1048576,namlen=255,hard,nosharecache,proto=tcp,timeo=600,retrans=2,"
              "sec=sys,mountaddr=127.0.0.1,mountvers=3,mountport=50403,mountproto=udp,"
              "local_lock=none,addr=127.0.0.1 0 0",
}
# Mounted with vers=3,ro,sync,noatime,soft,timeo=100,retrans=5,lookupcache=pos,
# nocto,acregmin=7,acregmax=20,acdirmin=8,acdirmax=40,rsize=65536,wsize=32768,
# nconnect=2,nordirplus,noacl,noresvport (nconnect is not shown: the mount
# shared the nfs_client of the earlier ones, which had one connection).
MANY = ("127.0.0.1:/srv/nfs /mnt/extra/many nfs ro,sync,noatime,vers=3,rsize=65536,"
        "wsize=32768,namlen=255,acregmin=7,acregmax=20,acdirmin=8,acdirmax=40,soft,nocto,"
        "noacl,nordirplus,nosharecache,noresvport,proto=tcp,timeo=100,retrans=5,sec=sys,"
        "mountaddr=127.0.0.1,mountvers=3,mountport=50403,mountproto=udp,lookupcache=pos,"
        "local_lock=none,addr=127.0.0.1 0 0")
V4_LINES = {
    "4.1": "127.0.0.1:/ /mnt/v4/v41 nfs4 rw,relatime,vers=4.1,rsize=1048576,wsize=1048576,"
           "namlen=255,hard,nosharecache,proto=tcp,timeo=600,retrans=2,sec=sys,"
           "clientaddr=127.0.0.1,local_lock=none,addr=127.0.0.1 0 0",
    "4.2": "127.0.0.1:/ /mnt/v4/v42 nfs4 rw,relatime,vers=4.2,rsize=1048576,wsize=1048576,"
           "namlen=255,hard,nosharecache,proto=tcp,timeo=600,retrans=2,sec=sys,"
           "clientaddr=127.0.0.1,local_lock=none,addr=127.0.0.1 0 0",
}


def nfs_line_options() -> str:
    line = next(line for line in Path("/proc/mounts").read_text().splitlines()
                if line.split()[2] == "nfs")
    return line.split()[3]


def nfs4_line() -> tuple[str, str]:
    line = next(line for line in Path("/proc/mounts").read_text().splitlines()
                if line.split()[2].startswith("nfs"))
    return line.split()[2], line.split()[3]


@pytest.mark.parametrize("name", V3_LINES)
def test_a_host_mounted_from_a_measured_line_shows_that_line_in_its_proc_mounts(name):
    line = V3_LINES[name]
    world = World()
    host = world.host("a", mount=MountOptions.from_proc_mounts(line))
    shown = world.spawn(host, nfs_line_options)
    world.run()
    assert shown.result() == line.split()[3]


def test_the_measured_lines_set_the_fields_they_name():
    nolock = MountOptions.from_proc_mounts(V3_LINES["nolock"])
    assert (nolock.lock, nolock.local_lock, nolock.sharecache) == (False, "all", False)
    assert MountOptions.from_proc_mounts(V3_LINES["flock"]).local_lock == "flock"
    assert MountOptions.from_proc_mounts(V3_LINES["rsize1"]).rsize == 4096
    noac = MountOptions.from_proc_mounts(V3_LINES["noac"])
    assert noac.noac and noac.sync and noac.attr_timeouts_ns(True) == (0, 0)
    plain = MountOptions.from_proc_mounts(V3_LINES["none"])
    assert (plain.rsize, plain.wsize, plain.timeo, plain.retrans) == (1048576, 1048576,
                                                                      600, 2)


def test_options_that_change_nothing_are_kept_and_shown_with_why():
    options = MountOptions.from_proc_mounts(V3_LINES["none"])
    assert options.kept == ("relatime", "namlen=255", "proto=tcp", "sec=sys",
                            "mountaddr=127.0.0.1", "mountvers=3", "mountport=50403",
                            "mountproto=udp", "addr=127.0.0.1")
    described = "\n".join(options.describe())
    assert "relatime: kept, changes nothing simfs models (the NFS client never updates " \
           "atime itself" in described
    assert "mountport=50403: kept, changes nothing simfs models" in described
    assert "mountport=50403" in options.format()
    assert MountOptions.parse(options.format()) == options


def test_the_many_option_line_is_refused_only_for_nordirplus_which_simfs_does_not_model():
    with pytest.raises(MountOptionError) as caught:
        MountOptions.from_proc_mounts(MANY)
    assert caught.value.option == "nordirplus"
    assert "READDIRPLUS" in str(caught.value)
    # Without it, the rest of that line is taken as the kernel took it.
    options = MountOptions.from_proc_mounts(MANY.replace("nordirplus,", ""))
    assert (options.readonly, options.sync, options.hard, options.cto) == (True, True,
                                                                           False, False)
    assert (options.acregmin, options.acregmax, options.acdirmin, options.acdirmax) == (
        7, 20, 8, 40)
    assert (options.rsize, options.wsize, options.timeo, options.retrans) == (65536, 32768,
                                                                              100, 5)
    assert options.lookupcache == "positive" and "noatime" in options.kept


@pytest.mark.parametrize("version", V4_LINES)
def test_a_host_mounted_from_a_measured_nfsv4_line_shows_that_line_in_its_proc_mounts(version):
    line = V4_LINES[version]
    options = MountOptions.from_proc_mounts(line)
    assert options.vers == version
    world = World()
    host = world.host("a", mount=options)
    shown = world.spawn(host, nfs4_line)
    world.run()
    assert shown.result() == (line.split()[2], line.split()[3])


@pytest.mark.parametrize("text, named, allowed", [
    # Measured: mount.nfs "an incorrect mount option was specified", dmesg
    # "nfs: Bad value for 'acdirmin'".
    ("acdirmin=99999999999999999999", "acdirmin=99999999999999999999", "0 to 4294967295"),
    ("acregmin=-1", "acregmin=-1", "0 to 4294967295"),  # measured: Bad value
    ("timeo=0", "timeo=0", "1 to 2147483647"),  # measured: refused
    ("nconnect=17", "nconnect=17", "1 to 16"),  # measured: refused
    ("mountvers=4", "mountvers=4", "1 to 3"),  # nfs_fs_context_parse_param
    ("port=65536", "port=65536", "0 to 65535"),
    ("mountport=70000", "mountport=70000", "0 to 65535"),
    ("minorversion=3", "minorversion=3", "0 to 2"),
    ("rsize=4294967296", "rsize=4294967296", "0 to 4294967295"),
    ("actimeo=3.5", "actimeo=3.5", "0 to 4294967295"),
    ("proto=sctp", "proto=sctp", "tcp|tcp6|udp|udp6|rdma|rdma6"),
    ("sec=krb6", "sec=krb6", "sys|none|null|krb5"),
    ("addr=nfs-server", "addr=nfs-server", "IP address"),
])
def test_a_value_out_of_the_kernels_range_is_refused_naming_the_option_and_the_range(
        text, named, allowed):
    with pytest.raises(MountOptionError) as caught:
        MountOptions.parse(f"vers=3,{text}")
    assert caught.value.option == named
    assert allowed in caught.value.problem


def test_an_attribute_timeout_that_would_wrap_in_the_kernel_is_refused_with_why():
    # Measured: acdirmin=4294967295 mounts, and /proc/mounts then shows
    # acdirmin=17179868: nfs_init_server multiplies by HZ=250 in an unsigned
    # int.  The largest value that does not wrap is 4294967295 // 250.
    assert MountOptions.parse("acdirmin=17179869,acdirmax=17179869").acdirmin == 17179869
    with pytest.raises(MountOptionError) as caught:
        MountOptions.parse("acdirmin=4294967295")
    assert caught.value.option == "acdirmin=4294967295"
    assert "wraps around" in caught.value.problem and "0 to 17179869" in caught.value.problem


def test_a_minor_version_with_nfsv3_is_refused_as_the_kernel_refuses_it():
    with pytest.raises(MountOptionError, match="a minor version needs vers=4"):
        MountOptions.parse("vers=3,minorversion=1")
    assert "minorversion=0" in MountOptions.parse("vers=3,minorversion=0").kept


@pytest.mark.parametrize("text, value", [("acdirmin=0x10", 16), ("acdirmin=010", 8),
                                         ("acdirmin=+7", 7), ("acdirmin=0", 0)])
def test_numbers_are_read_as_the_kernels_kstrtouint_reads_them_in_base_0(text, value):
    # fsparam_u32 -> fs_param_is_u32 -> kstrtouint(string, 0): kernel source,
    # not measured in the VM.
    assert MountOptions.parse(text).acdirmin == value


@pytest.mark.parametrize("text, size", [("rsize=1", 4096), ("rsize=4294967295", 1048576),
                                        ("rsize=100000", 65536)])
def test_an_rsize_the_kernel_rounds_is_used_rounded_with_a_warning(text, size):
    # Measured: rsize=1 shows rsize=4096, rsize=4294967295 shows 1048576
    # (nfs_block_size, fs/nfs/internal.h; 100000 -> 65536 is from the source).
    with pytest.warns(MountOptionWarning, match=f"the kernel uses {size}"):
        options = MountOptions.parse(text)
    assert options.rsize == size


def test_an_exact_io_size_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert MountOptions.parse("rsize=65536,wsize=32768").wsize == 32768


@pytest.mark.parametrize("text, problem", [
    ("write=eager", "not modelled: write=eager"),
    ("sloppy", "ignore options it does not know"),
    ("migration", "NFSv4.0 migration only"),
    ("namlen=100", "names of 255 bytes"),
    ("acdirmn=3", "unknown or unsupported option"),
    ("relatime=1", "'relatime' is a flag and takes no value"),
])
def test_an_option_simfs_cannot_honour_is_refused_by_name_with_why(text, problem):
    with pytest.raises(MountOptionError) as caught:
        MountOptions.parse(f"vers=3,{text}")
    assert caught.value.option == text and problem in caught.value.problem


def test_a_line_that_is_not_an_nfs_mount_is_refused():
    with pytest.raises(MountOptionError, match="not an NFS line of /proc/mounts"):
        MountOptions.from_proc_mounts("/dev/sda1 / ext4 rw,relatime 0 0")


def test_proto_udp_without_timeo_takes_the_kernels_udp_defaults():
    # NFS_DEF_UDP_TIMEO (11) and NFS_DEF_UDP_RETRANS (3), include/uapi/linux/nfs_fs.h.
    options = MountOptions.parse("vers=3,proto=udp")
    assert (options.timeo, options.retrans) == (11, 3)
    assert MountOptions.parse("vers=3,proto=udp,timeo=600").timeo == 600


def write_and_keep_open(path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"written")
    import time

    time.sleep(100)
    os.close(fd)


def read_later(path: str) -> bytes:
    import time

    time.sleep(0.3)  # before the earliest writeback (0.6 s, docs/nfs-facts.md)
    with open(path, "rb") as handle:
        return handle.read()


@pytest.mark.parametrize("mount, seen", [("vers=3,sync", b"written"), ("vers=3", b"")])
def test_a_sync_mount_sends_each_write_to_the_server_before_it_returns(mount, seen):
    # nfs(5), "The sync mount option": "any system call that writes data to
    # files on that mount point causes that data to be flushed to the server
    # before the system call returns control to user space".
    world = World(seed=0)
    writer = world.host("a", mount=mount)
    reader = world.host("b")
    world.server.mkdir("/shared/d")
    world.server.write_bytes("/shared/d/f", b"")
    world.spawn(writer, write_and_keep_open, "/shared/d/f")
    got = world.spawn(reader, read_later, "/shared/d/f")
    world.run(until=5)
    assert got.result() == seen
    world.close()


def test_vers_4_with_a_minor_version_is_that_version_and_a_bare_vers_4_is_refused():
    # nfs(5): "vers=4,minorversion=1" asks for NFSv4.1; a bare 4 lets client
    # and server settle the minor version, which simfs cannot know.
    assert MountOptions.parse("vers=4,minorversion=1").vers == "4.1"
    assert MountOptions.parse("vers=4,minorversion=2").vers == "4.2"
    with pytest.raises(MountOptionError) as caught:
        MountOptions.parse("vers=4")
    assert caught.value.option == "vers=4"
    assert "vers=3, vers=4.1 and vers=4.2" in str(caught.value)
