"""Where an example of ``explore refit --variant pr`` spends its CPU, and what simfs can win.

    python bench/explore_floor.py [EXAMPLES] [--repeat N]

Runs the search once to learn which examples it runs (the same seed, the
same search as ``python -m scenarios explore refit --variant pr``), then
times, per example, in CPU milliseconds:

- the search: Hypothesis drawing, running and shrinking, every world included;
- the worlds alone: the same examples run in worlds with their seeds,
  without Hypothesis (in first-come order: no drawn schedule);
- Hypothesis and the rest: the search minus the worlds (drawing the
  example and its schedule, shrinking, the outcome);
- the programs under plain trio: the example's two programs (the refit
  controller and the supervisor) each in its own ``trio.run`` on trio's
  ``MockClock``, with no world at all (the communicator's rebuild, a
  simulated thread sleeping in a world, is a trio sleep here): what a
  harness that cost nothing would still pay to run them;
- simfs's own share: the worlds alone minus the programs under plain trio.

and the most a free simfs could speed the search up by: search / (search
- simfs's share).  Then the README's marker search (a ``simfs.explore``
test, derandomized): the search, and its body (the two spawns and the
run), and the most bodies that cost nothing would win.  Prints, never
asserts: the machine's load moves every absolute number, the ratios less.
(Issue 29 asked for 2x the examples per second of 7ebe4ae; these are the
figures that say how much of that simfs can give.)
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

from scenarios import _explore, get
from scenarios import _fleet_sim as fleet_sim


def _plain_trio(example: dict[str, Any]) -> None:
    import trio
    import trio.testing

    plan = fleet_sim.plan_from_json(example)
    fleet = fleet_sim.Fleet(plan)

    async def controller() -> object:
        return await fleet_sim.run_controller("/shared", fleet, "pr")

    async def supervisor() -> None:
        await fleet_sim.run_supervisor("/shared", fleet)

    trio.run(controller, clock=trio.testing.MockClock(autojump_threshold=0))
    trio.run(supervisor, clock=trio.testing.MockClock(autojump_threshold=0))


async def _rebuild_as_a_sleep(self: Any, members: frozenset[int]) -> None:
    import trio

    engines = self._fleet.engines
    self.group = {shard: engines[shard].incarnation for shard in sorted(members)}
    self._fleet.mark("rebuild-start")
    await trio.sleep(self._fleet.plan.rebuild_s)
    self._fleet.mark("rebuilt")


def measure(count: int) -> tuple[int, float, float, float]:
    """(examples, search, worlds alone, plain trio): CPU seconds over one search."""
    scenario = get("refit")
    declared = _explore.exploration_of(scenario)
    run = declared.run
    examples: list[tuple[dict[str, Any], int]] = []

    def recorded(variant: str, example: dict[str, Any], seed: int, chooser: Any) -> Any:
        examples.append((example, seed))
        return run(variant, example, seed, chooser)

    object.__setattr__(declared, "run", recorded)
    try:
        _explore.explore(scenario, "pr", examples=3)  # imports and first uses out of the count
        examples.clear()
        start = time.process_time()
        _explore.explore(scenario, "pr", examples=count)
        search = time.process_time() - start
    finally:
        object.__setattr__(declared, "run", run)
    start = time.process_time()
    for example, seed in examples:
        fleet_sim.run_fleet(fleet_sim.plan_from_json(example), "pr", seed=seed)
    worlds = time.process_time() - start
    real_rebuild = fleet_sim.SimCommunicator.rebuild
    fleet_sim.SimCommunicator.rebuild = _rebuild_as_a_sleep  # type: ignore[method-assign]
    try:
        start = time.process_time()
        for example, _ in examples:
            _plain_trio(example)
        plain = time.process_time() - start
    finally:
        fleet_sim.SimCommunicator.rebuild = real_rebuild  # type: ignore[method-assign]
    return len(examples), search, worlds, plain


def marker(count: int) -> tuple[int, float, float]:
    """The README's marker search: (examples, search, the bodies' spawns and run)."""
    from explore_identity import marker_search, publish, wait_for  # bench/, this directory

    spent = [0.0, 0]

    def body(world: Any) -> None:
        start = time.process_time()
        try:
            world.server.mkdir("/shared/step")
            world.spawn("b", wait_for, "/shared/step/READY", 5.0)
            world.spawn("a", publish, "/shared/step/READY")
            world.run()
        finally:
            spent[0] += time.process_time() - start
            spent[1] += 1

    marker_search(body, 3)
    spent[:] = [0.0, 0]
    start = time.process_time()
    marker_search(body, count)
    return int(spent[1]), time.process_time() - start, spent[0]


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 100
    repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 3
    rows: list[tuple[float, float, float, float, float]] = []
    for _ in range(repeat):
        examples, search, worlds, plain = measure(count)
        per = 1e3 / examples
        own = worlds - plain
        rows.append((search * per, worlds * per, (search - worlds) * per, plain * per,
                     own * per))
        print(f"  {examples} examples")
    names = ("the search", "the worlds alone", "Hypothesis and the rest",
             "the programs under plain trio", "simfs's own share")
    print("explore refit --variant pr, CPU ms per example (median of "
          f"{repeat} searches; min-max)")
    for index, name in enumerate(names):
        values = [row[index] for row in rows]
        print(f"  {name:32s} {statistics.median(values):6.2f}  "
              f"({min(values):.2f}-{max(values):.2f})")
    bounds = [row[0] / (row[0] - row[4]) for row in rows]
    print(f"  a simfs that cost nothing would make the search at most "
          f"{statistics.median(bounds):.2f}x faster ({min(bounds):.2f}-{max(bounds):.2f})")
    marks = []
    for _ in range(repeat):
        examples, search, bodies = marker(count)
        marks.append((search * 1e3 / examples, bodies * 1e3 / examples))
    print(f"README marker search, CPU ms per example (median of {repeat} searches; min-max)")
    for index, name in enumerate(("the search", "the body: spawns and run")):
        values = [row[index] for row in marks]
        print(f"  {name:32s} {statistics.median(values):6.2f}  "
              f"({min(values):.2f}-{max(values):.2f})")
    bounds = [row[0] / (row[0] - row[1]) for row in marks]
    print(f"  bodies that cost nothing would make the search at most "
          f"{statistics.median(bounds):.2f}x faster ({min(bounds):.2f}-{max(bounds):.2f}); "
          "the rest is Hypothesis, the World and its hosts")


if __name__ == "__main__":  # a process's own copy of this module must not measure again
    main()
