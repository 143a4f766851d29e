"""The fidelity report's verdicts and the real backend's inputs, without a real NFS server."""

import json

import pytest

from scenarios import ScenarioError
from scenarios._base import FidelityRow
from scenarios._fidelity import compare
from scenarios._real import RealBackend, parse_mountstats

MOUNTSTATS = """\
device proc mounted on /proc with fstype proc
device 127.0.0.1:/srv/nfs mounted on /mnt/nfs/trainer with fstype nfs statvers=1.1
\topts:\trw,vers=3,acregmin=3
\tper-op statistics
\t        NULL: 0 0 0 0 0 0 0 0 0
\t     GETATTR: 12 12 0 1344 1488 3 28 33 0
\t      LOOKUP: 5 5 0 700 600 0 9 10 2
device 127.0.0.1:/srv/nfs mounted on /mnt/nfs/consumer with fstype nfs statvers=1.1
\tper-op statistics
\t     GETATTR: 99 99 0 1 1 1 1 1 0
"""


def test_mountstats_counts_belong_to_the_named_mount_only():
    assert parse_mountstats(MOUNTSTATS, "/mnt/nfs/trainer") == {"NULL": 0, "GETATTR": 12,
                                                                "LOOKUP": 5}
    assert parse_mountstats(MOUNTSTATS, "/mnt/nfs/consumer") == {"GETATTR": 99}
    assert parse_mountstats(MOUNTSTATS, "/mnt/nfs/other") == {}


def _row(outcome="stall", median=29.0, low=28.2, high=29.8, rpcs=0.02, key=("exists", "x")):
    return FidelityRow(key, outcome, median, low, high, rpcs)


def test_agreeing_rows_are_not_flagged():
    table, flags = compare([_row()], [_row(median=29.05, low=28.25, high=29.85)], poll=0.1)
    assert flags == [] and table[0][-1] == "agree"


def test_a_different_outcome_is_flagged():
    _, flags = compare([_row()], [_row(outcome="prompt")], poll=0.1)
    assert flags == ["exists/x: outcome stall vs prompt"]


def test_a_median_delay_is_flagged_only_beyond_one_poll_and_ten_percent():
    # 0.5 s apart on 29 s: more than a poll but under 10 %: agree.
    assert compare([_row()], [_row(median=29.5)], poll=0.1)[1] == []
    # 0.15 s apart on 0.05 s: more than a poll and more than 10 %: flagged.
    _, flags = compare([_row("prompt", 0.05, 0.0, 0.1)], [_row("prompt", 0.2, 0.1, 0.2)],
                       poll=0.1)
    assert flags == ["exists/x: median 0.05 vs 0.20 s"]
    # Extremes are single samples: shown, not judged.
    assert compare([_row(low=1.0)], [_row(low=0.5)], poll=0.1)[1] == []


def test_a_row_missing_on_the_real_side_is_flagged():
    assert compare([_row()], [], poll=0.1)[1] == ["exists/x: no real row"]


@pytest.mark.parametrize("value, message", [
    (None, "backend real needs NFS_MOUNTS"),
    ("{not json", "NFS_MOUNTS is not JSON"),
    (json.dumps(["/mnt/a"]), "must map host names to paths"),
])
def test_the_real_backend_explains_a_missing_or_malformed_nfs_mounts(monkeypatch, value,
                                                                     message):
    if value is None:
        monkeypatch.delenv("NFS_MOUNTS", raising=False)
    else:
        monkeypatch.setenv("NFS_MOUNTS", value)
    with pytest.raises(ScenarioError, match=message):
        RealBackend.from_environment()


def test_a_real_session_refuses_a_host_without_a_mount():
    backend = RealBackend({"trainer": "/mnt/nfs/trainer"})
    with pytest.raises(ScenarioError, match="host 'consumer' has no mount; NFS_MOUNTS has "
                                            "trainer"):
        backend.session({"consumer": "vers=3"}, seed=0)


def _write_then_read(root, name, data):
    path = f"{root}/{name}"
    with open(path, "w") as handle:
        handle.write(data)
    with open(path) as handle:
        return handle.read()


def _fail(root):
    raise ValueError("from the child")


def test_a_real_session_runs_each_process_as_its_own_os_process_on_its_root(tmp_path):
    from scenarios._base import ProcessSpec
    from scenarios._real import RealProcessFailed, RealSession

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    session = RealSession({"a": str(tmp_path / "a"), "b": str(tmp_path / "b")},
                          {"a": "vers=3", "b": "vers=3"}, verify_nfs=False)
    results = session.run([ProcessSpec("a", _write_then_read, ("x", "one")),
                           ProcessSpec("b", _write_then_read, ("x", "two"))], timeout=30)
    assert results == ["one", "two"]
    assert (tmp_path / "a" / "x").read_text() == "one"
    with pytest.raises(RealProcessFailed, match="ValueError: from the child"):
        session.run([ProcessSpec("a", _fail)], timeout=30)


def test_fidelity_flags_a_filesystem_without_nfs_caching(tmp_path):
    # A local disk has no negative-lookup cache: the bare exists() sees the
    # marker at once, so every exists row must be flagged against the model.
    from scenarios._fidelity import run_fidelity
    from scenarios._sim import SimBackend
    from scenarios.handshake import Handshake

    mounts = {}
    for host in ("trainer", "consumer"):
        mounts[host] = str(tmp_path)
    local = RealBackend(mounts, verify_nfs=False)
    # Polls 0.5 s apart: "prompt" is a median delay within two polls (1 s), so a
    # loaded machine's scheduling delays do not make the local disk "stall".
    params = Handshake.resolve_params({"min_delay": "0.2", "max_delay": "0.3", "poll": "0.5"},
                                      trials=1)
    table, flags = run_fidelity(Handshake(), SimBackend(), local, 0, params, lambda m: None)
    stalled = [flag for flag in flags if flag.startswith("exists/")]
    assert len(stalled) == 4 and all("outcome stall vs prompt" in f for f in stalled)
    assert not any(flag.startswith("marker_exists/") for flag in flags)
    assert "RPCs per poll by operation" in table


def _serve_agent(root, ports):
    from scenarios._agent import AgentServer

    server = AgentServer(("127.0.0.1", 0), "b", root, verify_nfs=False)
    ports.put(server.server_address[1])
    server.serve_forever()


def test_an_agent_runs_its_hosts_processes_for_a_coordinator(tmp_path):
    import multiprocessing

    from scenarios._base import ProcessSpec
    from scenarios._real import RealProcessFailed, RealSession

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    # The agent is another machine's process: here another OS process.
    context = multiprocessing.get_context("spawn")
    ports = context.Queue()
    agent = context.Process(target=_serve_agent, args=(str(tmp_path / "b"), ports))
    agent.start()
    try:
        address = f"127.0.0.1:{ports.get(timeout=60)}"
        session = RealSession({"a": str(tmp_path / "a")}, {"a": "vers=3", "b": "vers=3"},
                              verify_nfs=False, agents={"b": address})
        results = session.run([ProcessSpec("a", _write_then_read, ("x", "local")),
                               ProcessSpec("b", _write_then_read, ("x", "remote"))], timeout=30)
        assert results == ["local", "remote"]
        assert (tmp_path / "b" / "x").read_text() == "remote"
        with pytest.raises(RealProcessFailed, match="ValueError: from the child"):
            session.run([ProcessSpec("b", _fail)], timeout=30)
        assert session.rpc_counts("b") == {}
    finally:
        agent.terminate()
        agent.join(timeout=30)


def test_an_agent_refuses_functions_outside_the_project():
    from scenarios._agent import resolve_target

    with pytest.raises(ScenarioError, match="'os:system' is not a function of scenarios"):
        resolve_target("os:system")


def _exit_before_starting(connection):
    import os

    os._exit(3)  # as an interpreter that could not import the project would


def test_a_process_that_dies_before_it_waits_for_go_is_reported_with_its_exit_code():
    import multiprocessing

    from scenarios._real import RealProcessFailed, await_waiting

    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_exit_before_starting, args=(sender,))
    process.start()
    sender.close()
    with pytest.raises(RealProcessFailed, match=r"marker on 'b' exited \(exit code 3\) before "
                                                r"it started"):
        await_waiting(receiver, process, "marker on 'b'", timeout=60)


def test_a_real_process_reports_waiting_before_it_runs_anything_and_runs_only_at_go(tmp_path):
    # The agent answers "ready" only after this report (issue 17): a spawned
    # interpreter still importing the project when "go" came started late.
    import multiprocessing

    from scenarios._base import ProcessSpec
    from scenarios._real import _child, await_waiting

    context = multiprocessing.get_context("forkserver")
    go = context.Event()
    receiver, sender = context.Pipe(duplex=False)
    spec = ProcessSpec("a", _write_then_read, ("x", "written"))
    process = context.Process(target=_child, args=(sender, spec, str(tmp_path), go))
    process.start()
    sender.close()
    try:
        await_waiting(receiver, process, "write on 'a'", timeout=60)
        assert not (tmp_path / "x").exists()  # blocked on go
        go.set()
        assert receiver.recv() == ("ok", "written")
    finally:
        process.join(timeout=30)
        if process.is_alive():
            process.kill()


def test_trials_run_in_order_and_a_trial_readied_after_a_failure_never_runs(tmp_path):
    from scenarios._base import ProcessSpec
    from scenarios._real import RealProcessFailed, RealSession

    (tmp_path / "a").mkdir()
    session = RealSession({"a": str(tmp_path / "a")}, {"a": "vers=3"}, verify_nfs=False)
    trials = [[ProcessSpec("a", _write_then_read, ("x", "first"))],
              [ProcessSpec("a", _write_then_read, ("y", "second"))]]
    assert list(session.run_trials(trials, timeout=30)) == [["first"], ["second"]]

    # The next trial is started (waiting for go) while the failing one runs.
    failing = [[ProcessSpec("a", _fail)], [ProcessSpec("a", _write_then_read, ("z", "late"))]]
    with pytest.raises(RealProcessFailed, match="ValueError: from the child"):
        list(session.run_trials(failing, timeout=30))
    stopped = session.run_trials(trials[:1] + failing[1:], timeout=30)
    assert next(stopped) == ["first"]
    stopped.close()  # a caller that stops early: the readied trial is cancelled
    assert not (tmp_path / "a" / "z").exists()
