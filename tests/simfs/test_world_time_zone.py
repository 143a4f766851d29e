"""A world chooses its local time zone; the name is checked against the tz database.

C's local time (localtime, mktime, strftime's %Z, datetime's astimezone())
reads TZ, past every Python route, and glibc silently uses UTC under an
unknown name (measured: TZ=Nowhere/Bogus gave tzname ('Nowhere', 'Nowhere')
and offset 0), so World(tz=) checks the name and sets the zone's file by
path while the world runs (simfs/_os/_machine.py, simfs/_patch/_clocks/_tz.py).
"""

from __future__ import annotations

import datetime
import os
import time

import pytest

from simfs import World


def test_a_world_in_berlin_shows_central_european_time_and_the_real_zone_comes_back():
    real_zone = (time.timezone, time.tzname)

    def program() -> list[object]:
        time.sleep(3600)
        return [time.strftime("%Y-%m-%d %H:%M %Z"), time.timezone,
                datetime.datetime.now().astimezone().isoformat(), os.environ["TZ"],
                datetime.datetime.fromtimestamp(time.time()).hour]

    world = World(seed=1, tz="Europe/Berlin")
    process = world.spawn(world.host("a"), program)
    world.run()
    # The world starts at 2026-01-01 00:00 UTC: 02:00 CET after an hour (UTC+1 in winter).
    assert process.result() == ["2026-01-01 02:00 CET", -3600,
                                "2026-01-01T02:00:00+01:00", "Europe/Berlin", 2]
    assert (time.timezone, time.tzname) == real_zone
    assert World(seed=1).tz == "UTC"


@pytest.mark.parametrize(("zone", "hint"), [
    ("Europe/Berln", "did you mean 'Europe/Berlin'"),
    ("europe/berlin", "did you mean 'Europe/Berlin'"),
    ("Mars/Olympus_Mons", "valid names are IANA names"),
    ("../../etc/passwd", "available_timezones"),
    ("zone.tab", "is not a time zone"),
])
def test_an_unknown_zone_is_refused_naming_it_and_how_to_list_valid_ones(zone, hint):
    with pytest.raises(ValueError, match=rf"tz={zone!r} is not a time zone.*") as raised:
        World(seed=1, tz=zone)
    assert hint in str(raised.value)
    assert "zoneinfo.available_timezones()" in str(raised.value)


def test_tz_must_be_a_name():
    with pytest.raises(TypeError, match="tz must be an IANA time zone name"):
        World(seed=1, tz=datetime.UTC)  # type: ignore[arg-type]


def test_the_environment_tz_follows_the_world_zone_and_may_not_differ():
    world = World(seed=1, tz="Asia/Tokyo")
    assert world.environment(world.host("a"))["TZ"] == "Asia/Tokyo"
    with pytest.raises(ValueError, match=r"TZ='UTC' differs from the world's zone 'Asia/Tokyo'"):
        world.spawn("a", time.sleep, 0, env={"TZ": "UTC"})
