"""Option strings Linux accepts though they likely say something else: the kernel's rules.

Sources: fs/nfs/fs_context.c ``nfs_fs_context_parse_param`` assigns each
option's field as it parses it (a repeated option's last value wins);
fs/nfs/client.c ``nfs_init_server`` copies acregmin/acregmax/acdirmin/acdirmax
unchecked; fs/nfs/inode.c ``nfs_update_inode`` starts ``attrtimeo`` at the
minimum after a change and, after an unchanged revalidation, doubles it and
caps it at the maximum, so with min > max the first timeout is the minimum
and later ones the maximum.
"""

import warnings

import pytest

from simfs import MountOptions, MountOptionWarning, posix

from .helpers import create_marker, two_hosts


def test_a_repeated_option_keeps_its_last_value_and_warns():
    with pytest.warns(MountOptionWarning, match=r"'acdirmin' given more than once "
                      r"\('acdirmin=3', then 'acdirmin=5'\): the last one wins"):
        options = MountOptions.parse("vers=3,acdirmin=3,acdirmin=5")
    assert options.acdirmin == 5


@pytest.mark.parametrize("text", ["vers=3,acdirmin=3,acdirmin=5", "acregmin=90"])
def test_an_option_string_that_warns_warns_each_time_it_is_parsed(text):
    # Strings parsed without a warning are kept (each example of a search
    # mounts its hosts with the same few); one that warns is parsed anew.
    for _ in range(3):
        with pytest.warns(MountOptionWarning):
            MountOptions.parse(text)


def test_an_identical_repeat_and_a_later_actimeo_override_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert MountOptions.parse("vers=3,vers=3,actimeo=5,acdirmin=2").acdirmin == 2


@pytest.mark.parametrize("text, kind, low, high", [
    ("acdirmin=10,acdirmax=4", "acdir", 10, 4),
    ("acregmin=90", "acreg", 90, 60),  # above the default acregmax
])
def test_a_minimum_above_its_maximum_is_kept_as_given_with_a_warning(text, kind, low, high):
    with pytest.warns(MountOptionWarning, match=f"{kind}min={low} > {kind}max={high}: "
                      "accepted, as the Linux kernel accepts it"):
        options = MountOptions.parse(text)
    assert (getattr(options, f"{kind}min"), getattr(options, f"{kind}max")) == (low, high)


def _look_revalidate_then_poll(marker: str) -> float:
    """Cache 'absent' at 0, revalidate the unchanged parent at 10.5, then poll."""
    assert not posix.exists(marker)
    posix.sleep(10.5)
    assert not posix.exists(marker)  # GETATTR: unchanged, the timeout grows
    while not posix.exists(marker):
        posix.sleep(0.1)
    return posix.monotonic()


@pytest.mark.parametrize("mount, seen_at", [
    # min > max: trusted 10 s after the first read, then capped at 4 s.
    ("vers=3,acdirmin=10,acdirmax=4", 14.5),
    # min == max for contrast: 10 s every time.
    ("vers=3,acdirmin=10,acdirmax=10", 20.5),
])
def test_with_acdirmin_above_acdirmax_the_timeout_drops_to_acdirmax_after_a_revalidation(
        mount, seen_at):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MountOptionWarning)
        world, a, b = two_hosts(mount)
    world.server.mkdir("/shared/t")
    world.spawn(a, create_marker, "/shared/t/m", 11.0)
    poller = world.spawn(b, _look_revalidate_then_poll, "/shared/t/m")
    world.run()
    assert poller.result() == pytest.approx(seen_at)
