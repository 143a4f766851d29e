"""The command line: ``python -m scenarios list | run NAME|all [options]``."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence

from . import SCENARIOS, get
from ._base import Backend, ScenarioError, ScenarioResult, dump_json

BACKENDS = ("sim", "real", "compose")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scenarios",
                                     description="The seed incidents as experiments.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="list the scenarios")
    run = commands.add_parser("run", help="run a scenario (or all) and print its table")
    run.add_argument("name", help="a scenario name, or 'all'")
    run.add_argument("--backend", default="sim",
                     help=f"where to run: {' or '.join(BACKENDS)} (default sim)")
    run.add_argument("--trials", type=int, default=None, help="trials per group")
    run.add_argument("--seed", type=int, default=0, help="seed of the run (default 0)")
    run.add_argument("--json", metavar="PATH", help="also write the result as JSON")
    run.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                     help="override a scenario parameter (repeatable)")
    run.add_argument("--quiet", action="store_true", help="no progress on stderr")
    run.add_argument("--rpc-latency", type=float, default=0.0, metavar="SECONDS",
                     help="sim backend: virtual seconds each RPC takes (default 0)")
    agent = commands.add_parser(
        "agent", help="serve one host's processes to a coordinator on another machine")
    agent.add_argument("--host", required=True, help="the host this machine is")
    agent.add_argument("--listen", default="0.0.0.0:7700", help="address:port (default "
                       "0.0.0.0:7700)")
    fidelity = commands.add_parser(
        "fidelity", help="run a scenario on the simulation and on real NFS, side by side")
    fidelity.add_argument("name", help="a scenario name")
    fidelity.add_argument("--trials", type=int, default=None, help="trials per group")
    fidelity.add_argument("--seed", type=int, default=0, help="seed of the run (default 0)")
    fidelity.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                          help="override a scenario parameter (repeatable)")
    fidelity.add_argument("--quiet", action="store_true", help="no progress on stderr")
    fidelity.add_argument("--rpc-latency", type=float, default=0.0, metavar="SECONDS",
                          help="virtual seconds each simulated RPC takes (default 0)")
    fidelity.add_argument("--backend", default="real", choices=("real", "compose"),
                          help="the real side: real (NFS_MOUNTS) or compose (default real)")
    return parser


def _backend(name: str, rpc_latency: float = 0.0) -> Backend:
    if rpc_latency < 0:
        raise ScenarioError(f"--rpc-latency {rpc_latency}: allowed: seconds >= 0")
    if name == "sim":
        from ._sim import SimBackend

        return SimBackend(rpc_latency=rpc_latency)
    if name == "real":
        from ._real import RealBackend

        return RealBackend.from_environment()
    if name == "compose":  # docker-compose's stack through the docker SDK
        from ._compose import open_for_cli

        return open_for_cli()
    raise ScenarioError(f"unknown backend {name!r}; allowed: {', '.join(BACKENDS)}")


def _overrides(pairs: Sequence[str]) -> dict[str, str]:
    given = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            raise ScenarioError(f"--param {pair!r}: write it as NAME=VALUE")
        given[name.strip()] = value.strip()
    return given


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "list":
            for name, scenario in sorted(SCENARIOS.items()):
                print(f"{name:10} seed {scenario.seed_file}  {scenario.summary}")
            return 0
        if args.command == "fidelity":
            return _fidelity(args)
        if args.command == "agent":
            return _agent(args)
        return _run(args)
    except ScenarioError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _progress(quiet: bool) -> Callable[[str], None]:
    if quiet:
        return lambda message: None
    return lambda message: print(message, file=sys.stderr, flush=True)


def _agent(args: argparse.Namespace) -> int:
    from ._agent import serve
    from ._real import RealBackend

    mounts = RealBackend.from_environment().mounts
    if args.host not in mounts:
        raise ScenarioError(f"agent: host {args.host!r} has no mount in NFS_MOUNTS "
                            f"({', '.join(sorted(mounts))})")
    serve(args.host, mounts[args.host], args.listen)
    return 0


def _fidelity(args: argparse.Namespace) -> int:
    from ._fidelity import run_fidelity

    scenario_class = get(args.name)
    if args.trials is not None and args.trials < 1:
        raise ScenarioError(f"--trials {args.trials}: allowed: an int >= 1")
    params = scenario_class.resolve_params(_overrides(args.param), args.trials)
    table, flags = run_fidelity(scenario_class(), _backend("sim", args.rpc_latency),
                                _backend(args.backend), args.seed,
                                params, _progress(args.quiet))
    print(table)
    for flag in flags:
        print(f"FLAGGED: {flag}")
    print(f"\n{len(flags)} flagged row(s)")
    return 1 if flags else 0


def _run(args: argparse.Namespace) -> int:
    names = sorted(SCENARIOS) if args.name == "all" else [args.name]
    classes = [get(name) for name in names]
    backend = _backend(args.backend, args.rpc_latency)
    overrides = _overrides(args.param)
    if args.trials is not None and args.trials < 1:
        raise ScenarioError(f"--trials {args.trials}: allowed: an int >= 1")
    progress = _progress(args.quiet)
    results: list[ScenarioResult] = []
    failed = False
    for scenario_class in classes:
        scenario = scenario_class()
        trials = args.trials if scenario_class.has_trials else None
        if args.trials is not None and not scenario_class.has_trials and args.name != "all":
            raise ScenarioError(f"scenario {scenario_class.name!r} takes no --trials")
        params = scenario_class.resolve_params(
            {k: v for k, v in overrides.items()
             if args.name != "all" or k in {p.name for p in scenario_class.params}}, trials)
        started = time.perf_counter()
        result = scenario.run(backend, args.seed, params, progress)
        elapsed = time.perf_counter() - started
        results.append(result)
        print(scenario.table(result))
        problems = scenario.check(result)
        for problem in problems:
            print(f"INVARIANT VIOLATED: {problem}")
        failed = failed or bool(problems)
        print(f"\n[{scenario_class.name}: {elapsed:.2f} s wall, trace sha256 "
              f"{result.trace_sha256[:16]}...]\n")
    if args.json:
        dump_json(results, args.json)
    return 1 if failed else 0
