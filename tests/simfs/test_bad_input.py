"""Bad input to the World's API is a clear error naming the value and what is allowed.

Each case here was a raw exception from deep inside simfs (issue 26): an
AttributeError, a TypeError from ``math.isfinite``, an "unknown kernel 6.1"
that listed '6.1' among the known ones.
"""

import pytest

from simfs import UnknownKernel, World


def test_a_mount_that_is_not_a_string_is_refused_naming_it():
    world = World()
    with pytest.raises(TypeError, match=r"mount must be nfs\(5\) options as a str, "
                                        r"e.g. mount='vers=3' \(Linux's defaults\), "
                                        r"or a MountOptions, not None"):
        world.host("a", mount=None)  # type: ignore[arg-type]
    assert world.hosts == {}


@pytest.mark.parametrize("until", ["5", b"5", [5]], ids=["str", "bytes", "list"])
def test_run_until_a_non_number_is_refused_naming_it(until):
    world = World()
    with pytest.raises(TypeError, match=r"until must be a number of seconds \(an int or a "
                                        r"float\), not "):
        world.run(until=until)


def test_run_until_true_is_not_taken_for_one_second():
    with pytest.raises(TypeError, match=r"until must be a number of seconds.*not True"):
        World().run(until=True)


def test_a_kernel_given_as_a_float_is_refused_asking_for_the_release_as_a_string():
    world = World()
    with pytest.raises(UnknownKernel, match=r"kernel must be a release as a str, e.g. "
                                            r"kernel='6.1', not 6.1 \(float\)"):
        world.host("a", kernel=6.1)  # type: ignore[arg-type]


def test_a_negative_seed_is_refused_as_the_command_lines_refuse_it():
    with pytest.raises(ValueError, match=r"seed must be an int >= 0, not -1"):
        World(seed=-1)


def test_sleeping_a_string_inside_the_world_names_the_value():
    import time

    def nap():
        time.sleep("1")  # type: ignore[arg-type]

    world = World()
    process = world.spawn(world.host("a"), nap)
    world.run(check=False)
    assert isinstance(process.exception(), TypeError)
