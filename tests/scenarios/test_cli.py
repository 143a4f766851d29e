"""The command line: bad input gets one clear line and exit 2, never a traceback."""

import io
import os
import subprocess
import sys

import pytest

from scenarios import SCENARIOS, ScenarioError, _Catalogue
from scenarios._cli import _check_writable, _parser, _resolve_all, main
from scenarios._progress import ProgressLine
from scenarios.handshake import Handshake
from simfs import Deadlock

BAD_INPUTS = [
    (["run", "handshake", "--param", "mount=vers=4"],
     "parameter mount='vers=4': mount option 'vers=4': NFS version '4' has no measured "
     "profile; simfs models vers=3, vers=4.1 and vers=4.2"),
    (["run", "handshake", "--param", "mount=acdirmn=3"], "mount option 'acdirmn=3'"),
    (["run", "handshake", "--param", "poll=nan"],
     "parameter poll=nan: not a finite number; allowed: a float >= 0.001"),
    (["run", "handshake", "--param", "poll=inf"], "parameter poll=inf: not a finite number"),
    (["run", "handshake", "--param", "max_delay=-inf"], "parameter max_delay=-inf"),
    (["run", "handshake", "--param", "trials=2.5"], "parameter trials='2.5': not an int"),
    (["run", "handshake", "--param", "poll=0.1", "--param", "poll=0.2"],
     "--param poll given twice ('0.1' and '0.2')"),
    (["run", "handshake", "--param", "=3"], "--param '=3': write it as NAME=VALUE"),
    (["run", "handshake", "--json", ""], "--json '': allowed: a file path"),
    (["run", "handshake", "--json", "/"], "--json '/' is a directory"),
    (["run", "all", "--param", "bogus=1"], "no scenario has parameter(s) bogus; parameters: "),
    (["run", "refit", "--trials", "2"], "scenario 'refit' takes no --trials"),
    (["run", "handshake", "--seed", "-1"], "--seed -1: allowed: an int >= 0"),
    (["run", "handshake", "--seed", "one"], "--seed 'one': allowed: an int >= 0"),
    (["explore", "refit", "--seed", "-1"], "--seed -1: allowed: an int >= 0"),
    (["explore", "refit", "--examples", "0"], "--examples 0: allowed: an int >= 1"),
    (["run", "handshake", "--trials", "1.5"], "--trials 1.5: allowed: an int >= 1"),
    (["run", "handshake", "--rpc-latency", "nan"],
     "--rpc-latency nan: allowed: a finite number of seconds >= 0"),
    (["run", "handshake", "--rpc-latency", "-1"], "--rpc-latency -1: allowed"),
    (["run", "handshake", "--link", "10"], "--link 10: allowed: a rate with its unit"),
    (["run", "handshake", "--link", "0.1Mbit/s"], "--link 0.1Mbit/s: allowed: "),
    (["fidelity", "all"], "fidelity 'all' is not offered: fidelity compares one scenario at "
                          "a time; allowed: "),
    (["fidelity", "prune"], "fidelity 'prune' has no sim-versus-real comparison"),
    (["params", "nope"], "unknown scenario 'nope'; known: "),
    (["run"], "the following arguments are required: name"),
]


@pytest.mark.parametrize("argv, message", BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_exits_2_with_one_message_naming_the_value_and_no_traceback(
        argv, message, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert "Traceback" not in captured.err + captured.out
    assert captured.out == ""  # refused before anything ran


def test_an_unwritable_json_path_is_refused_before_the_run(tmp_path, capsys, monkeypatch):
    def must_not_run(*args, **kwargs):
        raise AssertionError("the scenario ran although its result could not be saved")

    monkeypatch.setattr(Handshake, "run", must_not_run)
    target = tmp_path / "missing-dir" / "out.json"
    assert main(["run", "handshake", "--json", str(target)]) == 2
    assert (f"--json '{target}' cannot be written: No such file or directory"
            in capsys.readouterr().err)


def test_checking_a_json_path_leaves_no_file_behind_and_keeps_an_existing_one(tmp_path):
    new = tmp_path / "new.json"
    _check_writable("--json", str(new))
    assert not new.exists()
    old = tmp_path / "old.json"
    old.write_text("kept")
    _check_writable("--json", str(old))
    assert old.read_text() == "kept"


def test_a_failing_simulation_exits_1_with_its_message_not_a_traceback(capsys, monkeypatch):
    def deadlocks(*args, **kwargs):
        raise Deadlock(["'waiter' on host 'consumer' (blocked)"])

    monkeypatch.setattr(Handshake, "run", deadlocks)
    assert main(["run", "handshake", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "error: the simulation failed: simulation deadlocked" in err
    assert "Traceback" not in err


def _args(*argv):
    return _parser().parse_args(["run", *argv])


def test_run_all_applies_a_parameter_only_to_the_scenarios_that_have_it():
    classes = [SCENARIOS[name] for name in sorted(SCENARIOS)]
    resolved = dict(zip(sorted(SCENARIOS), _resolve_all(
        _args("all", "--param", "poll=0.05", "--param", "steps=5", "--trials", "3"), classes)))
    assert resolved["handshake"]["poll"] == 0.05 and resolved["handshake"]["trials"] == 3
    assert resolved["prune"]["steps"] == 5 and "poll" not in resolved["prune"]
    assert resolved["refit"] == SCENARIOS["refit"].resolve_params({}, None)


def test_params_lists_every_parameter_with_its_default_and_allowed_values(capsys):
    assert main(["params", "handshake"]) == 0
    out = capsys.readouterr().out
    for param in Handshake.params:
        line = next(line for line in out.splitlines() if line.split()[:1] == [param.name])
        assert repr(param.default) in line and param.allowed() in line
    assert "a float >= 0.001" in out and "an int >= 1" in out


def test_run_help_lists_every_scenarios_parameters_and_the_exit_codes(capsys):
    assert main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    for scenario in SCENARIOS.values():
        assert f"{scenario.name}: {scenario.summary}" in out
        for param in scenario.params:
            assert f"  {param.name} " in out
    assert "exit status:" in out and "  2  bad usage" in out and "  1  an invariant" in out


def test_a_repeated_mount_option_is_warned_about_once_in_one_line(capsys):
    assert main(["run", "handshake", "--trials", "1", "--quiet",
                 "--param", "mount=vers=3,acdirmin=5,acdirmin=3"]) == 0
    err = capsys.readouterr().err
    assert err.count("warning: mount option 'acdirmin' given more than once") == 1


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_shows_an_eta_from_the_pace_of_the_steps_done():
    stream, now = _Terminal(), [100.0]
    progress = ProgressLine(stream, clock=lambda: now[0])
    progress("handshake: group 1/4 (exists)")
    now[0] = 110.0
    progress("handshake: group 2/4 (exists)")  # one group took 10 s, three are left
    now[0] = 130.0
    progress("handshake: group 3/4 (exists)")  # two took 30 s, two are left
    progress.finish()
    lines = stream.getvalue().split("\r\x1b[K")
    assert lines[1] == "handshake: group 1/4 (exists)"
    assert lines[2] == "handshake: group 2/4 (exists) (about 30 s left)"
    assert lines[3] == "handshake: group 3/4 (exists) (about 30 s left)"
    assert lines[4] == ""  # the line is cleared before the table


def test_progress_is_silent_when_stderr_is_not_a_terminal_or_quiet(monkeypatch):
    monkeypatch.setattr("sys.stderr", io.StringIO())
    ProgressLine.for_stderr(quiet=False)("handshake: group 1/2")
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    ProgressLine.for_stderr(quiet=True)("handshake: group 1/2")
    assert terminal.getvalue() == ""
    ProgressLine.for_stderr(quiet=False)("handshake: group 1/2")
    assert terminal.getvalue().endswith("handshake: group 1/2")


def test_the_json_is_written_after_a_successful_run(tmp_path):
    out = tmp_path / "out.json"
    assert main(["run", "handshake", "--trials", "1", "--quiet", "--json", str(out)]) == 0
    assert '"scenario": "handshake"' in out.read_text()
    assert os.path.getsize(out) > 0


def test_report_writes_one_html_file_with_a_swimlane_per_path(tmp_path, capsys):
    import re
    import xml.etree.ElementTree as ET

    out = tmp_path / "report.html"
    assert main(["run", "handshake", "--trials", "1", "--quiet", "--report", str(out)]) == 0
    html = out.read_text()
    svgs = [ET.fromstring(svg) for svg in re.findall(r"<svg .*?</svg>", html, re.S)]
    assert svgs and "<script" not in html
    stalls = [rect for svg in svgs for rect in svg.iter("{http://www.w3.org/2000/svg}rect")
              if rect.get("class") == "stall"]
    # The first group is the bare exists() poller: its stall is drawn, with its rule.
    assert stalls and any("negative dentry" in rect[0].text for rect in stalls)
    # What was recorded, named (it did not say which variant, layout or direction).
    assert ('<p class="context">the first session: handshake: group 1/8: variant exists, '
            "layout waiter-made-dir, direction consumer-waits-sender-ready, 1 trials</p>"
            in html)
    assert re.search(r'<p class="counts">\d+ of \d+ paths shown \(those with stalls first\); '
                     r"\d+ of \d+ stalls shown.</p>", html)
    assert re.search(rf"report: {re.escape(str(out))} \(\d+ of \d+ paths, \d+ of \d+ "
                     r"stall\(s\) in the first session\)", capsys.readouterr().err)


@pytest.mark.parametrize("argv", [["run", "all"], ["run", "handshake", "--backend", "real"]])
def test_report_needs_one_scenario_on_the_simulation(argv, tmp_path, capsys):
    assert main([*argv, "--report", str(tmp_path / "r.html")]) == 2
    assert "--report needs one scenario on the simulation" in capsys.readouterr().err


def test_a_trial_whose_waiter_gives_up_is_a_row_and_the_run_goes_on(capsys):
    # timeout=1 is allowed, but the bare exists() poller stalls ~30 s.  That
    # ended the whole run with "the simulation failed" and a run(check=False)
    # hint; on the real tier, with a traceback and no table.  (The marker
    # comes within 0.5 s, so the fixed poller sees it in time.)
    assert main(["run", "handshake", "--trials", "2", "--quiet", "--param", "timeout=1",
                 "--param", "max_delay=0.5"]) == 0
    captured = capsys.readouterr()
    assert "error" not in captured.err and "Traceback" not in captured.err
    rows = [line.split() for line in captured.out.splitlines() if line.startswith("exists ")]
    assert len(rows) == 4
    assert all(row[3:] == ["2", "-", "-", "-", "2", "timed", "out", "after", "1", "s"]
               for row in rows), rows
    marker_rows = [line for line in captured.out.splitlines()
                   if line.startswith("marker_exists ")]
    assert len(marker_rows) == 4 and all("timed out" not in line for line in marker_rows)


def test_a_fidelity_row_whose_trials_timed_out_says_so_and_is_flagged():
    from scenarios._base import FidelityRow
    from scenarios._fidelity import compare

    sim = [FidelityRow(("exists",), "stall", 29.0, 28.0, 29.5, 0.3)]
    real = [FidelityRow(("exists",), "timed out (3/3)", None, None, None, 0.3)]
    table, flags = compare(sim, real, 0.1)
    assert table[0][1:5] == ["stall/timed out (3/3)", "29.00/-", "28.00/-", "29.50/-"]
    assert flags == ["exists: outcome stall vs timed out (3/3)"]


def test_a_failed_simulated_process_is_named_without_the_run_check_false_hint(
        capsys, monkeypatch):
    from simfs import ProcessFailed

    def fails(*args, **kwargs):
        raise ProcessFailed([("waiter", "consumer", OSError(5, "Input/output error"))])

    monkeypatch.setattr(Handshake, "run", fails)
    assert main(["run", "handshake", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err == ("error: the simulation failed: process 'waiter' on host 'consumer' raised "
                   "OSError: [Errno 5] Input/output error\n")


def test_a_failed_real_process_is_one_line_not_a_traceback(capsys, monkeypatch):
    from scenarios._real import RealProcessFailed

    def fails(*args, **kwargs):
        raise RealProcessFailed("wait_for_marker on 'consumer' raised OSError: EIO")

    monkeypatch.setattr(Handshake, "run", fails)
    assert main(["run", "handshake", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "error: the sim backend failed: wait_for_marker on 'consumer' raised" in err
    assert "Traceback" not in err


def test_a_session_of_many_bounded_trials_is_not_taken_for_a_runaway():
    # The event budget counted the whole session: --trials 100000 stopped at
    # trial 1,653 with RunawaySimulation.  Here 30 runs of ~100 events each
    # pass a 1,000-event budget that each run stays within.
    import time as _time

    from scenarios._base import ProcessSpec
    from scenarios._sim import SimBackend

    def naps(root):
        for _ in range(50):
            _time.sleep(0.1)

    session = SimBackend(max_events=1000).session({"a": "vers=3"}, seed=0)
    for _ in range(30):
        session.run([ProcessSpec("a", naps, ())], timeout=10)
    session.close()


@pytest.mark.parametrize("kind", ["file", "under-a-file"])
def test_an_unwritable_database_is_refused_before_the_campaign(kind, tmp_path, capsys,
                                                              monkeypatch):
    import scenarios._explore_cli as explore_cli

    def must_not_run(*args, **kwargs):
        raise AssertionError("the campaign ran although its findings could not be kept")

    monkeypatch.setattr(explore_cli, "explore", must_not_run)
    blocker = tmp_path / "db"
    blocker.write_text("not a directory")
    path = blocker if kind == "file" else blocker / "sub"
    assert main(["explore", "refit", "--database", str(path)]) == 2
    err = capsys.readouterr().err
    said = ("is a file; allowed: a directory" if kind == "file"
            else "cannot be written: Not a directory")
    assert f"--database '{path}' {said}" in err


def test_a_writable_database_directory_is_made_and_left_clean(tmp_path):
    from scenarios._explore_cli import check_database

    check_database(str(tmp_path / "new-db"))
    assert list((tmp_path / "new-db").iterdir()) == []


_LOADED_SCENARIOS = ("import sys, scenarios; {action}; print(' '.join(sorted("
                     "name for name in scenarios.SCENARIOS "
                     "if 'scenarios.' + name in sys.modules)) or 'none')")


@pytest.mark.parametrize("action, loaded", [
    ("names = list(scenarios.SCENARIOS)", "none"),
    ("from scenarios._cli import _parser; _parser().parse_args(['run', 'handshake'])", "none"),
    ("scenarios.get('refit')", "refit"),
    ("from scenarios._cli import main; main(['params', 'handshake'])", "handshake"),
])
def test_a_scenario_module_is_imported_only_when_its_scenario_is_asked_for(action, loaded):
    # A fresh interpreter: this test session imported every scenario already.
    code = _LOADED_SCENARIOS.format(action=action)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.splitlines()[-1] == loaded


def test_a_scenario_module_without_the_scenario_of_its_name_is_a_loud_error(tmp_path,
                                                                             monkeypatch):
    package = tmp_path / "fake_scenarios"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "handshake.py").write_text(
        "from scenarios import Scenario\n\n"
        "class Misnamed(Scenario):\n    name = 'hand-shake'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    catalogue = _Catalogue("fake_scenarios", [str(package)])
    assert list(catalogue) == ["handshake"] and "handshake" in catalogue
    with pytest.raises(ScenarioError, match=r"defines no scenario named 'handshake' "
                                            r"\(it defines 'hand-shake'\)"):
        catalogue["handshake"]
    with pytest.raises(KeyError):
        catalogue["refit"]


@pytest.fixture
def made_sessions(monkeypatch):
    """Every SimSession the command line makes while the test runs, in order."""
    from scenarios import _sim

    made = []
    real_session = _sim.SimSession

    def session(*args, **kwargs):
        made.append(real_session(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(_sim, "SimSession", session)
    return made


@pytest.mark.parametrize("name, argv, bits_per_s", [
    ("handshake", [], 10**10), ("handshake", ["--link", "1Gbit/s"], 10**9),
    ("handshake", ["--link", "none"], None),
    # cas's crash-sweep builds its own world with a fault plan: it too.
    ("cas", ["--link", "1Gbit/s"], 10**9)])
def test_link_sets_the_rate_of_every_simulated_host_and_none_makes_data_instant(
        name, argv, bits_per_s, made_sessions):
    made = made_sessions
    assert main(["run", name, "--trials", "1", "--quiet", *argv]) == 0
    assert len(made) > 1
    rates = {host.client.link_bps for world in made for host in world.world.hosts.values()}
    assert rates == {bits_per_s}


def test_store_runs_every_simulated_world_on_a_block_store_with_the_same_digest(
        made_sessions, capsys):
    import re

    made = made_sessions
    stores, digests = [], []
    for argv in ([], ["--store"]):
        made.clear()
        # cas's crash-sweep builds its own world with a fault plan: it too.
        assert main(["run", "cas", "--trials", "1", "--quiet", *argv]) == 0
        digests.append(re.search(r"trace sha256 (\w+)", capsys.readouterr().out).group(1))
        stores.append({world.world._server_state.store is not None for world in made})
    assert stores == [{False}, {True}]
    assert digests[0] == digests[1]
