"""``python -m scenarios explore NAME`` and ``python -m scenarios replay TOKEN``.

explore searches a scenario's variants for an invariant violation with
Hypothesis (what may vary is the scenario's ``exploration`` declaration),
shrinks what it finds, and prints the minimal example with a replay token;
replay runs a token's example again, in this process, with its recorded
schedule, and prints the same trace digest.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from typing import Any

from ._base import ScenarioError
from ._cli import seed_argument
from ._explore import Failure, SearchState, exploration_of, explore, format_example, replay

_BUDGET = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h)?$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, None: 1}


def add_commands(commands: Any) -> None:
    """Add ``explore`` and ``replay`` to the runner's subcommands."""
    explore_cmd = commands.add_parser(
        "explore", help="search a scenario's variants for an invariant violation")
    explore_cmd.add_argument("name", help="a scenario name")
    explore_cmd.add_argument("--variant", action="append", default=None,
                             help="a variant to explore (repeatable; default: all)")
    explore_cmd.add_argument("--examples", type=_examples, default=None, metavar="N",
                             help="examples per variant for the whole campaign (default 200, "
                                  "or unbounded with --budget)")
    explore_cmd.add_argument("--budget", default=None, metavar="TIME",
                             help="wall-clock budget per variant, e.g. 60s, 10m, 1h")
    explore_cmd.add_argument("--seed", type=seed_argument, default=0,
                             help="seed of the search (default 0: the same search each time)")
    explore_cmd.add_argument("--shard", default="0/1", metavar="I/N",
                             help="run shard I of N (0-based) of the campaign (default 0/1)")
    explore_cmd.add_argument("--database", default=None, metavar="DIR",
                             help="Hypothesis example database directory shared by all shards "
                                  "and machines: failures found anywhere replay first")
    replay_cmd = commands.add_parser(
        "replay", help="run a reported example again from its replay token")
    replay_cmd.add_argument("token", help="the token an explore failure printed")


def _examples(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"--examples {text}: allowed: an int >= 1")
    return value


def run_command(args: argparse.Namespace) -> int:
    """Raises: ScenarioError, for bad arguments (the runner prints it, exits 2)."""
    if args.command == "replay":
        return _replay(args.token)
    return _explore(args)


def parse_budget(text: str) -> float:
    """Seconds in ``60s``, ``10m``, ``1h`` or ``90``.

    Raises:
        ScenarioError: naming the text and the forms allowed.
    """
    match = _BUDGET.match(text.strip())
    if match is None or float(match.group(1)) <= 0:
        raise ScenarioError(f"--budget {text!r}: allowed: a positive time such as 60s, 10m, 1h")
    return float(match.group(1)) * _SECONDS[match.group(2)]


def parse_shard(text: str) -> tuple[int, int]:
    """``I/N`` as (I, N).

    Raises:
        ScenarioError: naming the text and the form allowed.
    """
    index, slash, count = text.partition("/")
    if not slash or not index.isdigit() or not count.isdigit() or not (
            0 <= int(index) < int(count)):
        raise ScenarioError(f"--shard {text!r}: allowed: I/N with 0 <= I < N, e.g. 3/8")
    return int(index), int(count)


def check_database(path: str) -> None:
    """Refuse a --database directory the campaign could not write, before it runs.

    Hypothesis writes its database lazily and ignores a failure to, so a
    campaign's findings would be lost without a word.  The directory is
    made if missing (as Hypothesis would) and a file written and removed.

    Raises:
        ScenarioError: naming the path and why it cannot be written.
    """
    if os.path.exists(path) and not os.path.isdir(path):
        raise ScenarioError(f"--database {path!r} is a file; allowed: a directory "
                            "(shared by every shard)")
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".simfs-write-check-"):
            pass
    except OSError as error:
        raise ScenarioError(f"--database {path!r} cannot be written: "
                            f"{error.strerror or error}") from None


def _explore(args: argparse.Namespace) -> int:
    from . import get

    scenario = get(args.name)
    exploration_of(scenario)
    names = [v.name for v in scenario.variants]
    variants = args.variant or names
    budget = None if args.budget is None else parse_budget(args.budget)
    examples = args.examples if args.examples is not None else (
        10**9 if budget is not None else 200)
    shard, shards = parse_shard(args.shard)
    if args.database is not None:
        check_database(args.database)
    live = sys.stdout.isatty()
    found = 0
    for variant in variants:
        state = explore(scenario, variant, examples=examples, budget_s=budget, seed=args.seed,
                        shard=shard, shards=shards, database=args.database,
                        on_example=_progress_line() if live else None)
        if live:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
        print(_summary(state, shard, shards))
        if state.failure is not None:
            found += 1
            print(_failure(state.failure))
        print()
    return 1 if found else 0


def _progress_line() -> Any:
    last = [0.0]

    def show(state: SearchState) -> None:
        now = time.perf_counter()
        if now - last[0] < 0.2:
            return
        last[0] = now
        print(f"\r\033[K{state.scenario}/{state.variant}: {state.examples} examples, "
              f"{state.virtual_s:,.0f} virtual s, {state.failures} failing, "
              f"{now - state.started:.0f} s", end="", file=sys.stderr, flush=True)

    return show


def _summary(state: SearchState, shard: int, shards: int) -> str:
    where = "" if shards == 1 else f" (shard {shard}/{shards})"
    rate = state.examples / state.elapsed_s if state.elapsed_s > 0 else 0.0
    head = (f"{state.scenario}/{state.variant}{where}: {state.examples} examples "
            f"({rate:.1f}/s), {state.virtual_s:,.1f} virtual s simulated, "
            f"{state.elapsed_s:.1f} s wall; ")
    if state.failure is None:
        stop = "budget spent" if state.budget_spent else "example budget spent"
        return head + f"no violation ({stop})"
    return head + (f"violation found at example {state.first_failure}, shrunk over "
                   f"{state.examples - (state.first_failure or 0)} more")


def _failure(failure: Failure) -> str:
    outcome = failure.outcome
    lines = ["  minimal example: " + format_example(failure.example),
             f"  world seed {failure.seed}; schedule {list(outcome.choices)}"]
    lines.extend("  violated: " + problem for problem in outcome.problems)
    lines.append(f"  trace sha256 {outcome.digest}")
    lines.append(f"  replay: python -m scenarios replay {failure.token}")
    return "\n".join(lines)


def _replay(token: str) -> int:
    failure, outcome = replay(token)
    print(f"{failure.scenario}/{failure.variant}: {format_example(failure.example)}")
    print(f"world seed {failure.seed}; schedule {list(outcome.choices)}; "
          f"{outcome.virtual_s:,.1f} virtual s")
    for problem in outcome.problems:
        print("violated: " + problem)
    if not outcome.problems:
        print("no violation")
    print(f"trace sha256 {outcome.digest}")
    return 1 if outcome.problems else 0
