"""Did a speed change keep the search? Prints one fingerprint per search to compare.

    python bench/explore_identity.py [EXAMPLES]

Runs ``explore refit --variant pr`` and the README's marker search (a
``simfs.explore`` test, derandomized) and prints, for each, a hash over
every example it ran (the drawn example, its seed, its trace digest, its
problems and schedule; for the marker search each world's trace digest),
the example it shrank to, and the examples per CPU second.  Run it on two
revisions: equal hashes mean the same examples were run, found and shrunk.
(One interpreter runs both searches, in this order, as the hashes were
taken: a search's fingerprint also holds what ran before it.)
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from typing import Any


def publish(path: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write("ready")
    os.replace(path + ".tmp", path)


def wait_for(path: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(path)
        time.sleep(0.1)


def _fingerprint(log: list[Any]) -> str:
    return hashlib.sha256(repr(log).encode()).hexdigest()[:16]


def refit(examples: int) -> None:
    from scenarios import _explore, get

    scenario = get("refit")
    declared = _explore.exploration_of(scenario)
    run = declared.run
    log: list[Any] = []

    def recorded(variant: str, example: dict[str, Any], seed: int, chooser: Any) -> Any:
        outcome = run(variant, example, seed, chooser)
        log.append((json.dumps(example, sort_keys=True), seed, outcome.digest,
                    outcome.problems, outcome.choices))
        return outcome

    object.__setattr__(declared, "run", recorded)
    _explore.explore(scenario, "pr", examples=3)  # imports and first-use costs out of the count
    log.clear()
    start = time.process_time()
    state = _explore.explore(scenario, "pr", examples=examples)
    cpu = time.process_time() - start
    shrunk = state.failure and (state.failure.example, state.failure.seed,
                                state.failure.outcome.digest[:16])
    print(f"refit/pr: {len(log)} examples, fingerprint {_fingerprint(log)}, "
          f"{len(log) / cpu:.1f} examples/CPU s; shrank to {shrunk}")


def marker_search(body: Any, count: int) -> str:
    """Explore ``body`` (the README's marker world) as the README does, derandomized.

    Hypothesis derives a derandomized search from the body's source: a body
    whose text changes searches other examples.
    """
    from hypothesis import settings

    import simfs
    from simfs.strategies import mount_options

    try:
        simfs.explore(hosts={"a": "vers=3", "b": mount_options()}, max_examples=count,
                      hypothesis_settings=settings(derandomize=True, database=None))(body)()
    except Exception as error:  # the README's example fails, as it says
        return f"{type(error).__name__}: {str(error).splitlines()[0][:80]}"
    return "passed"


def marker(examples: int) -> None:
    log: list[str] = []

    def body(world: Any) -> None:
        world.server.mkdir("/shared/step")
        world.spawn("b", wait_for, "/shared/step/READY", 5.0)
        world.spawn("a", publish, "/shared/step/READY")
        try:
            world.run()
        finally:
            log.append(world.trace.digest())

    marker_search(body, 3)
    log.clear()
    start = time.process_time()
    outcome = marker_search(body, examples)
    cpu = time.process_time() - start
    print(f"README marker: {len(log)} examples, fingerprint {_fingerprint(log)}, "
          f"{len(log) / cpu:.1f} examples/CPU s; last {log[-1][:16]}: {outcome}")


if __name__ == "__main__":  # a process's own copy of this module must not search again
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    refit(count)
    marker(count)
