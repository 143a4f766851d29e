"""nfs(5) option strings: Linux defaults, overrides, and loud refusals."""

import pytest

from simfs import MountOptionError, MountOptions, World


def test_defaults_are_linux_defaults_from_nfs5():
    options = MountOptions.parse("vers=3")
    assert (options.acregmin, options.acregmax, options.acdirmin, options.acdirmax) == (3, 60,
                                                                                       30, 60)
    assert options.lookupcache == "all" and options.cto and options.hard


def test_actimeo_sets_all_four_and_a_later_option_overrides_it():
    options = MountOptions.parse("actimeo=5,acdirmin=2")
    assert (options.acregmin, options.acregmax, options.acdirmin, options.acdirmax) == (5, 5,
                                                                                       2, 5)


def test_noac_zeroes_every_attribute_timeout():
    options = MountOptions.parse("noac")
    assert options.attr_timeouts_ns(True) == (0, 0)
    assert options.attr_timeouts_ns(False) == (0, 0)


@pytest.mark.parametrize("alias, mode", [("all", "all"), ("positive", "positive"),
                                         ("pos", "positive"), ("none", "none")])
def test_lookupcache_modes_and_the_pos_alias(alias, mode):
    assert MountOptions.parse(f"lookupcache={alias}").lookupcache == mode


def test_flags_toggle_as_named():
    options = MountOptions.parse("nocto,soft,nosharecache,ro")
    assert not options.cto and not options.hard and not options.sharecache and options.readonly


@pytest.mark.parametrize("text, named", [
    ("acdirmn=3", "acdirmn=3"),
    ("vers=4", "vers=4"),
    ("lookupcache=sometimes", "lookupcache=sometimes"),
    ("acdirmin=-1", "acdirmin=-1"),
    ("acdirmin=3.5", "acdirmin=3.5"),
    ("acdirmin", "acdirmin"),
    ("noac=1", "noac=1"),
])
def test_a_bad_option_is_refused_by_name_with_what_is_allowed(text, named):
    with pytest.raises(MountOptionError) as caught:
        MountOptions.parse(f"vers=3,{text}")
    assert caught.value.option == named
    assert "lookupcache=all|positive|pos|none" in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_world_host_refuses_bad_options_and_duplicate_names():
    world = World()
    world.host("a")
    with pytest.raises(ValueError, match="already exists"):
        world.host("a")
    with pytest.raises(MountOptionError):
        world.host("b", mount="vers=3,nordirplus")


def test_format_parses_back_to_an_equal_value():
    options = MountOptions.parse("acdirmin=3,acdirmax=7,lookupcache=pos,nocto,soft")
    assert MountOptions.parse(options.format()) == options
