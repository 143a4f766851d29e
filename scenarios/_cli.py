"""The command line: ``python -m scenarios list | params | run | fidelity | agent``.

Exit status: 0 when everything behaved; 1 when an invariant was violated, a
fidelity row was flagged, or the simulation itself failed (a deadlock, an
escape); 2 for bad usage: an unknown scenario, parameter or value, or a
``--json`` path that cannot be written.  Bad input never shows a traceback:
every message names the value and what is allowed.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from simfs import ProcessFailed, SimfsError
from simfs._nfs._link import DEFAULT_LINK

from . import SCENARIOS, get
from ._base import (
    Backend,
    BackendFailed,
    Scenario,
    ScenarioError,
    ScenarioResult,
    dump_json,
    format_table,
)
from ._progress import ProgressLine

BACKENDS = ("sim", "real", "compose")
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

EXIT_STATUS = """\
exit status:
  0  every invariant held (run), no row flagged (fidelity)
  1  an invariant was violated, a fidelity row was flagged, or the simulation
     itself failed (deadlock, escape, a process blocked on something real)
  2  bad usage: unknown scenario, parameter or value; unwritable --json path"""


# -- argument types: each names the bad value and what is allowed -------------------

def seed_argument(text: str) -> int:
    """A seed on any command line: an int >= 0, as ``World(seed=)`` takes."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seed {text!r}: allowed: an int >= 0") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"--seed {value}: allowed: an int >= 0")
    return value


def _trials(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"--trials {text}: allowed: an int >= 1")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            f"--rpc-latency {text}: allowed: a finite number of seconds >= 0")
    return value


def _link(text: str) -> str | None:
    """A link rate as ``World(link=)`` takes it; ``none``: data moves in no time."""
    if text == "none":
        return None
    from simfs._nfs._link import ALLOWED, parse_link

    try:
        parse_link(text, "--link")
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--link {text}: allowed: {ALLOWED.replace('or None', 'or none')}") from None
    return text


def _backend_name(text: str) -> str:
    if text not in BACKENDS:
        raise argparse.ArgumentTypeError(
            f"unknown backend {text!r}; allowed: {', '.join(BACKENDS)}")
    return text


def _output_path(option: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"{option} {text!r}: allowed: a file path")
        return text
    return parse


# -- the parser ---------------------------------------------------------------------

def _params_help() -> str:
    """Every scenario's parameters, for ``run --help``."""
    return "parameters (--param NAME=VALUE), by scenario:\n\n" + "\n\n".join(
        _describe_params(SCENARIOS[name]) for name in sorted(SCENARIOS))


def _describe_params(scenario: type[Scenario]) -> str:
    header = f"{scenario.name}: {scenario.summary}"
    if not scenario.params:
        return header + "\n  (no parameters)"
    rows = [[param.name, repr(param.default), param.allowed(), param.help]
            for param in scenario.params]
    table = format_table(["name", "default", "allowed", "what"], rows)
    return header + "\n" + "\n".join("  " + line for line in table.splitlines())


def _with_fidelity() -> list[str]:
    """Scenarios that define a sim-versus-real comparison."""
    return sorted(name for name, scenario in SCENARIOS.items()
                  if scenario.fidelity_key_names is not Scenario.fidelity_key_names)


def _add_run_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--trials", type=_trials, default=None,
                         help="trials per group (scenarios that have trials)")
    command.add_argument("--seed", type=seed_argument, default=0,
                         help="seed of the run, an int >= 0 (default 0)")
    command.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                         help="override a scenario parameter (repeatable; see below)")
    command.add_argument("--quiet", action="store_true",
                         help="no progress on stderr (it is off anyway when stderr is "
                              "not a terminal)")
    command.add_argument("--rpc-latency", type=_seconds, default=0.0, metavar="SECONDS",
                         help="simulation: virtual seconds each RPC takes (default 0)")
    command.add_argument("--link", type=_link, default=DEFAULT_LINK, metavar="RATE",
                         help="simulation: the rate each host's READs and WRITEs move data "
                              f"at, e.g. 25Gbit/s (default {DEFAULT_LINK}); none: no time")
    command.add_argument("--store", action="store_true",
                         help="simulation: file data in a real file in a temporary "
                              "directory, World(store=True), not in memory (the same runs "
                              "and digests)")


class _Parser(argparse.ArgumentParser):
    """A parser whose epilog may be written only when its help is shown.

    The ``run`` and ``fidelity`` help lists what every scenario offers, which
    imports every scenario: a run of one scenario should not pay for that
    (issue 16).  Subparsers are of this class too (``add_subparsers``).
    """

    def __init__(self, *args: Any, epilog_from: Callable[[], str] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._epilog_from = epilog_from

    def format_help(self) -> str:
        if self._epilog_from is not None:
            self.epilog = self._epilog_from()
        return super().format_help()


def _fidelity_help() -> str:
    return ("scenarios with a sim-versus-real comparison: " + ", ".join(_with_fidelity())
            + "\n\n" + EXIT_STATUS)


def _parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    parser = _Parser(prog="python -m scenarios", formatter_class=raw,
                     description="The seed incidents as experiments.", epilog=EXIT_STATUS)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="list the scenarios")
    params = commands.add_parser("params", help="list a scenario's parameters")
    params.add_argument("name", nargs="?", default="all", help="a scenario name, or 'all'")
    run = commands.add_parser("run", help="run a scenario (or all) and print its table",
                              formatter_class=raw,
                              epilog_from=lambda: _params_help() + "\n\n" + EXIT_STATUS)
    run.add_argument("name", help="a scenario name, or 'all'")
    run.add_argument("--backend", type=_backend_name, default="sim",
                     help=f"where to run: {' or '.join(BACKENDS)} (default sim)")
    run.add_argument("--json", metavar="PATH", type=_output_path("--json"),
                     help="also write the result as JSON (checked before the run)")
    run.add_argument("--report", metavar="PATH", type=_output_path("--report"),
                     help="simulation: write the first session's belief timeline as one "
                          "self-contained HTML file")
    _add_run_options(run)
    agent = commands.add_parser(
        "agent", help="serve one host's processes to a coordinator on another machine")
    agent.add_argument("--host", required=True, help="the host this machine is")
    agent.add_argument("--listen", default="0.0.0.0:7700", help="address:port (default "
                       "0.0.0.0:7700)")
    fidelity = commands.add_parser(
        "fidelity", formatter_class=raw, epilog_from=_fidelity_help,
        help="run a scenario on the simulation and on real NFS, side by side")
    fidelity.add_argument("name", help="a scenario with a comparison (listed below)")
    _add_run_options(fidelity)
    fidelity.add_argument("--backend", default="real", choices=("real", "compose"),
                          help="the real side: real (NFS_MOUNTS) or compose (default real)")
    from ._explore_cli import add_commands

    add_commands(commands)
    return parser


# -- running --------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (see the module docstring)."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:  # argparse: --help (0) or a usage error (2)
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    with warnings.catch_warnings():
        # Each message once a run (_show_warning): every host mounting one
        # option string warns about it, and the caller's filters (pytest's
        # "always") may show each.
        warnings.showwarning = _show_warning
        _shown.clear()
        try:
            if args.command == "list":
                for name, scenario in sorted(SCENARIOS.items()):
                    print(f"{name:10} seed {scenario.seed_file}  {scenario.summary}")
                return EXIT_OK
            if args.command == "params":
                return _params(args)
            if args.command == "fidelity":
                return _fidelity(args)
            if args.command == "agent":
                return _agent(args)
            if args.command in ("explore", "replay"):
                from ._explore_cli import run_command

                return run_command(args)
            return _run(args)
        except ScenarioError as error:
            print(f"error: {error}", file=sys.stderr)
            return EXIT_USAGE
        except ProcessFailed as error:
            # Its own message ends in a hint for World.run's callers
            # (run(check=False)), which a command-line user cannot act on.
            named = "; ".join(f"process {name!r} on host {host!r} raised "
                              f"{type(raised).__name__}: {raised}"
                              for name, host, raised in error.failures)
            print(f"error: the simulation failed: {named}", file=sys.stderr)
            return EXIT_FAILED
        except SimfsError as error:
            print(f"error: the simulation failed: {error}", file=sys.stderr)
            return EXIT_FAILED
        except BackendFailed as error:
            print(f"error: the {args.backend if 'backend' in args else 'real'} backend "
                  f"failed: {error}", file=sys.stderr)
            return EXIT_FAILED
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130


_shown: set[str] = set()


def _show_warning(message: Warning | str, category: type[Warning], filename: str,
                  lineno: int, file: TextIO | None = None, line: str | None = None) -> None:
    text = f"warning: {message}"
    if text not in _shown:
        _shown.add(text)
        print(text, file=sys.stderr)


def _params(args: argparse.Namespace) -> int:
    names = sorted(SCENARIOS) if args.name == "all" else [get(args.name).name]
    print("\n\n".join(_describe_params(SCENARIOS[name]) for name in names))
    return EXIT_OK


def _backend(name: str, rpc_latency: float = 0.0, recording: bool = False,
             link: str | None = DEFAULT_LINK, store: bool = False) -> Backend:
    # --store: World(store=True); without it the argument is left out.
    stored: dict[str, Any] = {"store": True} if store else {}
    if name == "sim" and recording:
        from ._report import RecordingSimBackend

        return RecordingSimBackend(rpc_latency=rpc_latency, link=link, **stored)
    if name == "sim":
        from ._sim import SimBackend

        return SimBackend(rpc_latency=rpc_latency, link=link, **stored)
    if name == "compose":  # docker-compose's stack through the docker SDK
        from ._compose import open_for_cli

        return open_for_cli()
    from ._real import RealBackend

    return RealBackend.from_environment()


def _overrides(pairs: Sequence[str]) -> dict[str, str]:
    given: dict[str, str] = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        name = name.strip()
        if not equals or not name:
            raise ScenarioError(f"--param {pair!r}: write it as NAME=VALUE")
        if name in given:
            raise ScenarioError(f"--param {name} given twice ({given[name]!r} and "
                                f"{value.strip()!r}); give each parameter once")
        given[name] = value.strip()
    return given


def _check_writable(option: str, path: str) -> None:
    """Refuse an output path before the run, so that no result is lost after it.

    Opening for append creates nothing new in an existing file and proves the
    permission; a file created only to prove it is removed again.
    """
    if os.path.isdir(path):
        raise ScenarioError(f"{option} {path!r} is a directory; allowed: a file path")
    existed = os.path.exists(path)
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as error:
        raise ScenarioError(f"{option} {path!r} cannot be written: {error.strerror}"
                            ) from None
    if not existed:
        os.remove(path)


def _agent(args: argparse.Namespace) -> int:
    from ._agent import serve
    from ._real import RealBackend

    mounts = RealBackend.from_environment().mounts
    if args.host not in mounts:
        raise ScenarioError(f"agent: host {args.host!r} has no mount in NFS_MOUNTS "
                            f"({', '.join(sorted(mounts))})")
    serve(args.host, mounts[args.host], args.listen)
    return EXIT_OK


def _fidelity(args: argparse.Namespace) -> int:
    from ._fidelity import run_fidelity

    comparable = _with_fidelity()
    if args.name not in comparable:
        why = ("has no sim-versus-real comparison" if args.name in SCENARIOS
               else "is not a scenario" if args.name != "all"
               else "is not offered: fidelity compares one scenario at a time")
        raise ScenarioError(f"fidelity {args.name!r} {why}; allowed: {', '.join(comparable)}")
    scenario_class = get(args.name)
    params = scenario_class.resolve_params(_overrides(args.param), args.trials)
    progress = ProgressLine.for_stderr(args.quiet)
    table, flags = run_fidelity(scenario_class(),
                                _backend("sim", args.rpc_latency, link=args.link,
                                         store=args.store),
                                _backend(args.backend), args.seed, params, progress)
    progress.finish()
    print(table)
    for flag in flags:
        print(f"FLAGGED: {flag}")
    print(f"\n{len(flags)} flagged row(s)")
    return EXIT_FAILED if flags else EXIT_OK


def _resolve_all(args: argparse.Namespace, classes: list[type[Scenario]]
                 ) -> list[dict[str, object]]:
    """Each scenario's parameters; every --param must belong to one scenario at least."""
    overrides = _overrides(args.param)
    if args.name != "all":
        (only,) = classes
        return [only.resolve_params(overrides, args.trials)]
    known = {param.name for scenario in classes for param in scenario.params}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ScenarioError(f"no scenario has parameter(s) {', '.join(unknown)}; "
                            f"parameters: {', '.join(sorted(known))}")
    resolved = []
    for scenario in classes:
        own = {param.name for param in scenario.params}
        resolved.append(scenario.resolve_params(
            {name: value for name, value in overrides.items() if name in own},
            args.trials if scenario.has_trials else None))
    return resolved


def _run(args: argparse.Namespace) -> int:
    names = sorted(SCENARIOS) if args.name == "all" else [args.name]
    classes = [get(name) for name in names]
    params = _resolve_all(args, classes)
    for option, path in (("--json", args.json), ("--report", args.report)):
        if path is not None:
            _check_writable(option, path)
    if args.report is not None and (args.backend != "sim" or len(classes) != 1):
        raise ScenarioError("--report needs one scenario on the simulation (--backend sim), "
                            f"not {args.name!r} on {args.backend!r}")
    backend = _backend(args.backend, args.rpc_latency, recording=args.report is not None,
                       link=args.link, store=args.store)
    progress_line = ProgressLine.for_stderr(args.quiet)
    progress: Any = progress_line
    if args.report is not None:
        from ._report import RecordingSimBackend

        assert isinstance(backend, RecordingSimBackend)
        progress = backend.noting(progress_line)
    results: list[ScenarioResult] = []
    failed = False
    for index, (scenario_class, values) in enumerate(zip(classes, params)):
        scenario = scenario_class()
        progress_line.prefix = f"[{index + 1}/{len(classes)}] " if len(classes) > 1 else ""
        started = time.perf_counter()
        result = scenario.run(backend, args.seed, values, progress)
        elapsed = time.perf_counter() - started
        progress_line.finish()
        results.append(result)
        print(scenario.table(result))
        problems = scenario.check(result)
        for problem in problems:
            print(f"INVARIANT VIOLATED: {problem}")
        failed = failed or bool(problems)
        print(f"\n[{scenario_class.name}: {elapsed:.2f} s wall, trace sha256 "
              f"{result.trace_sha256[:16]}...]\n")
    if args.report is not None:
        from ._report import RecordingSimBackend, write_report

        assert isinstance(backend, RecordingSimBackend)
        print(write_report(backend, args.report, f"{args.name}, seed {args.seed}"),
              file=sys.stderr)
    if args.json is not None:
        try:
            dump_json(results, args.json)
        except OSError as error:
            print(f"error: could not write --json {args.json!r}: {error.strerror}; "
                  "the tables above are the results", file=sys.stderr)
            return EXIT_FAILED
    return EXIT_FAILED if failed else EXIT_OK
