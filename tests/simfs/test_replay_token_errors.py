"""A replay token's errors are the token's; the test's own errors keep their type and words.

``world_from_token`` read the token, ran the test's ``setup(world)`` and
mounted its hosts under one ``except (KeyError, TypeError)``, so a
``KeyError`` from the user's own setup was reported as "replay token ...
lacks 'key'": a misleading error pointing at the token.
"""

from __future__ import annotations

import pytest

from simfs import World
from simfs._replay import ReplayTokenError, encode_token, world_from_token, world_token


def _token() -> str:
    world = World(seed=5)
    world.host("a")
    return world_token(world)


def test_an_error_of_the_tests_own_setup_is_raised_as_it_is_not_blamed_on_the_token():
    def setup(world: World) -> None:
        {}["missing-config"]

    with pytest.raises(KeyError, match="missing-config"):
        world_from_token(_token(), setup=setup)


def test_a_token_without_a_field_is_refused_naming_the_field():
    with pytest.raises(ReplayTokenError, match="lacks 'seed'"):
        world_from_token(encode_token({"kind": "world", "faults": {}}))


def test_a_token_rebuilds_its_hosts_after_the_setup_ran():
    seen: list[list[str]] = []
    rebuilt = world_from_token(_token(), setup=lambda world: seen.append(list(world.hosts)))
    assert seen == [[]] and list(rebuilt.hosts) == ["a"]
