"""The handshake scenario reproduces seed 000's table (docs/nfs-facts.md,
"Attribute and dentry caches"; seed 000)."""

import json

import pytest

import scenarios
from scenarios import ScenarioError
from scenarios._cli import main
from scenarios._sim import SimBackend
from scenarios.handshake import Handshake

POLL = 0.1


@pytest.fixture(scope="module")
def result():
    params = Handshake.resolve_params({}, trials=6)
    return Handshake().run(SimBackend(), 0, params, lambda message: None)


def test_plain_exists_stalls_until_acdirmin_after_the_first_poll_in_every_group(result):
    for key, samples in result.samples.items():
        if not key.startswith("exists/"):
            continue
        for delay, created_after_first_poll in samples:
            # seen = first poll + acdirmin (30 s), to the poll
            assert abs(delay + created_after_first_poll - 30.0) <= POLL + 1e-6, key


def test_marker_exists_sees_the_marker_within_one_poll_in_every_group(result):
    for row in result.rows:
        if row["variant"] == "marker_exists":
            assert row["min_s"] >= 0 and row["max_s"] <= POLL + 1e-6, row


def test_the_table_matches_the_seeds_shape_and_numbers(result):
    exists = [row for row in result.rows if row["variant"] == "exists"]
    assert len(exists) == 4 and {row["layout"] for row in exists} == {"waiter-made-dir",
                                                                        "creator-made-dir"}
    assert all(28.0 <= row["median_s"] <= 30.0 and row["max_s"] < 30.0 for row in exists)
    table = Handshake().table(result)
    assert "marker.exists()" in table and "marker_exists(marker)" in table
    assert Handshake().check(result) == []


def test_short_acdirmin_gives_the_measured_short_stall():
    # docs/nfs-facts.md, "Attribute and dentry caches", acdirmin=3,acdirmax=3:
    # median 2.05 s, range 1.40-2.89 s.
    params = Handshake.resolve_params({"mount": "vers=3,acdirmin=3,acdirmax=3"}, trials=10)
    short = Handshake().run(SimBackend(), 1, params, lambda message: None)
    for row in short.rows:
        if row["variant"] == "exists":
            assert 1.0 <= row["median_s"] <= 2.8 and row["max_s"] <= 3.0


def test_the_same_seed_gives_the_same_trace_sha256(result):
    params = Handshake.resolve_params({}, trials=6)
    again = Handshake().run(SimBackend(), 0, params, lambda message: None)
    assert again.trace_sha256 == result.trace_sha256 and again.rows == result.rows
    other = Handshake().run(SimBackend(), 1, params, lambda message: None)
    assert other.trace_sha256 != result.trace_sha256


def test_the_json_has_the_documented_schema(tmp_path, capsys):
    out = tmp_path / "out.json"
    assert main(["run", "handshake", "--trials", "2", "--json", str(out), "--quiet"]) == 0
    data = json.loads(out.read_text())
    assert set(data) == {"scenario", "backend", "seed", "params", "rows", "trace_sha256"}
    assert data["scenario"] == "handshake" and data["backend"] == "sim" and data["seed"] == 0
    assert len(data["rows"]) == 8
    for row in data["rows"]:
        assert set(row) == {"variant", "layout", "direction", "trials", "median_s", "min_s",
                            "max_s"}
        assert row["trials"] == 2
    assert len(data["trace_sha256"]) == 64
    assert "Polling method" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["run", "nope"], "unknown scenario 'nope'; known: "),
    (["run", "handshake", "--param", "poll=fast"], "parameter poll='fast': not a float"),
    (["run", "handshake", "--param", "colour=red"], "has no parameter 'colour'"),
    (["run", "handshake", "--trials", "0"], "--trials 0: allowed: an int >= 1"),
    (["run", "handshake", "--backend", "cloud"], "unknown backend 'cloud'"),
    (["run", "handshake", "--param", "poll"], "write it as NAME=VALUE"),
])
def test_bad_input_is_refused_naming_the_value_and_what_is_allowed(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_list_names_every_scenario(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in scenarios.SCENARIOS:
        assert name in out


def test_get_raises_a_scenario_error_for_an_unknown_name():
    with pytest.raises(ScenarioError, match="known: "):
        scenarios.get("refitt")


def _make_step_dir_at(root, step, at):
    import os
    import time

    time.sleep(at)
    os.mkdir(f"{root}/broadcast/{step}")
    return time.time()


def test_on_a_real_host_the_creator_counts_its_delay_from_the_waiters_mkdir():
    # Issue 17: under emulation the waiter's host started seconds late and the
    # creator's 0.2-2 s delay ran out before the step directory existed.
    from scenarios._base import ProcessSpec
    from scenarios.handshake import create_marker, prepare_broadcast_dir

    session = SimBackend().session({"trainer": "vers=3", "consumer": "vers=3"}, seed=0)
    try:
        session.run([ProcessSpec("trainer", prepare_broadcast_dir)], timeout=60)
        created, made = session.run([
            ProcessSpec("consumer", create_marker, ("s", ".receiver_ready", 0.5, False, 60.0)),
            ProcessSpec("trainer", _make_step_dir_at, ("s", 5.0)),
        ], timeout=120)
    finally:
        session.close()
    # seen within one of the creator's 0.02 s looks (and their round trips),
    # then the 0.5 s delay
    assert 0.5 <= created - made <= 0.5 + 0.05


def test_a_creator_whose_step_directory_never_appears_says_what_it_waited_for():
    from scenarios._base import ProcessSpec
    from scenarios.handshake import create_marker, prepare_broadcast_dir
    from simfs import ProcessFailed

    session = SimBackend().session({"trainer": "vers=3", "consumer": "vers=3"}, seed=0)
    try:
        session.run([ProcessSpec("trainer", prepare_broadcast_dir)], timeout=60)
        with pytest.raises(ProcessFailed, match=r"the creator waited for the waiter to make its "
                                            r"step directory: '/shared/broadcast/s' did not "
                                            r"appear within 3 s"):
            session.run([ProcessSpec("consumer", create_marker,
                                     ("s", ".receiver_ready", 0.5, False, 3.0))], timeout=60)
    finally:
        session.close()


class _LateWaiterSession:
    """A real session whose waiter first polls 1 s after the marker was made."""

    def __init__(self, calls):
        self.calls = calls

    def run(self, processes, *, timeout):
        self.calls.append(processes)
        if len(processes) == 1:
            return [None]
        return [10.0, (11.0, 11.5, 5)]

    def rpc_counts(self, host):
        return {}

    def close(self):
        return ""


class _LateWaiterBackend:
    name = "real"

    def __init__(self):
        self.calls = []

    def session(self, hosts, seed):
        return _LateWaiterSession(self.calls)


def test_a_trial_whose_waiter_first_polled_after_the_creation_is_refused_not_tabled():
    backend = _LateWaiterBackend()
    params = Handshake.resolve_params({}, trials=1)
    with pytest.raises(ScenarioError, match=r"exists/waiter-made-dir/consumer-waits-sender-ready "
                                            r"trial 0: the trainer created \.sender_ready 1\.00 s "
                                            r"before the consumer first polled"):
        Handshake().run(backend, 0, params, lambda message: None)
    creator = backend.calls[1][0]
    # a real backend's creator waits for the waiter's directory, up to the timeout
    assert creator.target.__name__ == "create_marker" and creator.args[-1] == params["timeout"]
