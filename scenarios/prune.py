"""Seed 002: checkpoint pruning on NFS meets ``.nfsXXXX`` silly renames.

Deleting a checkpoint written a moment earlier, while this host still holds
one of its files open, leaves ``.nfsXXXX`` in the directory until the close
lands: ``shutil.rmtree`` fails with ENOTEMPTY (rmdir beside it), EBUSY
(unlink of the busy ``.nfs`` file) or ENOENT (it vanished between listing and
unlink), and the directory stays (docs/design.md, "The NFS model", and
docs/nfs-facts.md; the seed's issue #527). The seed's experiments, one per row
group:

- ``every-step``: save every step for 40 steps with keep_last_n = 1; the
  writer's last close of each checkpoint lands a random 0-0.38 s after the
  cleanup that prunes it lists the directory (the windows of the seed's
  first server, netscratch).
- ``ten-held-open``: ten old checkpoints whose files a process on the same
  host holds open keep failing; one cleanup removes them (the reviewer's
  measurement: 7.5 s over 50 rmtree calls without a cap, 14 calls with it).
- ``slow-server``: one window of 4.0 s (the seed's second server, Isilon:
  1 of 317 failed removals); the directory outlives one cleanup, the next
  one removes it.
- ``replace-open-sidecar``: ``metadata.json`` is replaced while a reader on
  the same host holds it open, which leaves a ``.nfs`` entry in the
  checkpoint root (the seed's issue #531).

Variants:
- ``rmtree`` (the seed's code before the fix): plain ``shutil.rmtree``,
  warn, leave the directory for the next cleanup.  Its listing takes every
  entry of the root but the sidecar, the pointer and the lock for a
  checkpoint, the assumption #531's test made of the root.
- ``uncapped-retry`` (the fix's first revision, before a9e7c51): each
  directory retries with its own 0.05, 0.1, 0.2, 0.4 s waits, so the sleep
  grows with the number of failing directories.  Same listing.
- ``reference`` (``reference.checkpoint.CheckpointManager``): the waits are
  shared by all removals of one cleanup (at most 0.75 s), each attempt under
  the sidecar lock; ``list_entries`` keeps ``.nfs`` leftovers apart.

The late close is the writer's own: the last file of each checkpoint stays
open in this process and a thread closes it after its window, so the
experiment is the same on a real mount as in the simulation.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import shutil
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any, ClassVar

from reference.checkpoint import (
    DEFAULT_WAITS,
    LOCK,
    POINTER,
    SIDECAR,
    STEP_NAME,
    CheckpointManager,
    Writer,
    write_files,
)
from reference.fs import RemovalReport, RetryBudget, list_entries, remove_tree

from ._base import (
    Backend,
    Param,
    ProcessSpec,
    Progress,
    Scenario,
    ScenarioError,
    ScenarioResult,
    Variant,
    combine_digests,
    format_table,
)
from ._explore import Chooser, Exploration, Outcome
from ._sim import SimBackend

EXPERIMENTS = ("every-step", "ten-held-open", "slow-server", "replace-open-sidecar")
HOST = "trainer"
# What a save writes: the last file is the one the writer closes late.
FILES = {"train_state.pt": b"t" * 512, "model.distcp": b"m" * 4096}


# -- the seed's variants of the manager ----------------------------------------------


class SeedRmtreeManager(CheckpointManager):
    """The seed's cleanup before the fix: plain rmtree, warn, leave it."""

    def _scan(self) -> list[tuple[int, str]]:
        # Every entry is taken for a checkpoint but the manager's own files;
        # a name that is no step_<N> sorts as the oldest.
        found = []
        for name in sorted(os.listdir(self.root)):
            if name in (SIDECAR, POINTER, LOCK):
                continue
            match = STEP_NAME.match(name)
            found.append((int(match.group(1)) if match else -1, name))
        return found

    def _remove(self, paths: Iterable[Path]) -> list[RemovalReport]:
        reports = []
        for path in paths:
            report = RemovalReport(os.fspath(path), removed=False, attempts=1)
            try:
                shutil.rmtree(path)
                report.removed = True
            except OSError as error:
                name = errno.errorcode.get(error.errno or 0, str(error.errno))
                report.errors.append(f"{name}: {error.filename}")
            reports.append(report)
        return reports


class UncappedRetryManager(SeedRmtreeManager):
    """The fix's first revision: every directory gets its own 0.75 s of waits."""

    def _remove(self, paths: Iterable[Path]) -> list[RemovalReport]:
        return [remove_tree(path, budget=RetryBudget(waits=self.waits),
                            attempt_lock=self._attempt_lock, sleep=self._sleep)
                for path in paths]


MANAGERS: dict[str, type[CheckpointManager]] = {
    "rmtree": SeedRmtreeManager,
    "uncapped-retry": UncappedRetryManager,
    "reference": CheckpointManager,
}


# -- the processes: plain code, the same on every backend ------------------------------


class LateCloses:
    """The writer's last file of each checkpoint, held open and closed late.

    The last file of step k stays open until ``release_through(k)``; a thread
    then closes it after the step's window.  The experiment releases step k
    just before the save whose cleanup prunes it, so the close lands
    ``window`` seconds after that cleanup lists the directory.  Steps with no
    window close at once.
    """

    def __init__(self, windows: Mapping[int, float]) -> None:
        self._windows = dict(windows)
        self._held: dict[int, IO[bytes]] = {}
        self._closers: list[threading.Thread] = []

    def writer(self, step: int) -> Writer:
        def write(directory: Path) -> None:
            *first, (last, data) = FILES.items()
            write_files(dict(first))(directory)
            handle = open(directory / last, "wb")  # noqa: SIM115 - closed late, on purpose
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())  # durable now; only the close is late
            if step in self._windows:
                self._held[step] = handle
            else:
                handle.close()

        return write

    def release_through(self, step: int) -> None:
        for held in sorted(s for s in self._held if s <= step):
            closer = threading.Thread(target=_close_after,
                                      args=(self._held.pop(held), self._windows[held]),
                                      name=f"late-close-step_{held}")
            self._closers.append(closer)
            closer.start()

    def finish(self) -> None:
        """Close everything: the pending windows first, then what is still held."""
        self.release_through(max(self._held, default=0))
        for closer in self._closers:
            closer.join()


def _close_after(handle: IO[bytes], window: float) -> None:
    time.sleep(window)
    handle.close()


def _fresh_root(root: str, experiment: str, variant: str) -> Path:
    base = Path(root) / "prune" / f"{experiment}.{variant}"
    shutil.rmtree(base, ignore_errors=True)  # a real mount may hold an earlier run's
    return base


def _measure(manager: CheckpointManager, warnings: list[str]) -> dict[str, Any]:
    """The row's numbers, right after the manager's last cleanup."""
    reports = manager.reports
    listing = list_entries(manager.root)
    return {"prunes": len(reports),
            "failed": sum(not report.removed for report in reports),
            "left": len(manager.prunable()),
            "rmtree_calls": sum(report.attempts for report in reports),
            "retry_sleep_s": round(sum(report.slept for report in reports), 6),
            "checkpoints": [name for name in listing.entries if STEP_NAME.match(name)],
            "nfs_leftovers": len(listing.nfs_leftovers),
            "warnings": len(warnings)}


def save_every_step(root: str, experiment: str, variant: str, steps: int, keep_last_n: int,
                    step_s: float, windows: dict[int, float], saves: str) -> dict[str, Any]:
    """Train ``steps`` steps of ``step_s`` seconds, saving after each one."""
    warnings: list[str] = []
    manager = MANAGERS[variant](_fresh_root(root, experiment, variant),
                               keep_last_n=keep_last_n, warn=warnings.append)
    late = LateCloses(windows)
    for step in range(1, steps + 1):
        time.sleep(step_s)
        late.release_through(step - keep_last_n)  # the checkpoint this save prunes
        if saves == "async":
            manager.save_async(step, late.writer(step))
        else:
            manager.save(step, late.writer(step))
    manager.wait()
    measured = _measure(manager, warnings)
    late.finish()
    return measured


def prune_held_directories(root: str, experiment: str, variant: str, held: int
                           ) -> dict[str, Any]:
    """``held`` old checkpoints whose files this host holds open, pruned by one cleanup."""
    warnings: list[str] = []
    base = _fresh_root(root, experiment, variant)
    writer = write_files(FILES)
    keeper = MANAGERS[variant](base, keep_last_n=held + 1, warn=warnings.append)
    for step in range(1, held + 2):
        keeper.save(step, writer)
    last = list(FILES)[-1]
    with contextlib.ExitStack() as held_open:
        for step in range(1, held + 1):
            held_open.enter_context(open(keeper.directory(step) / last, "rb"))
        # A run resumed with keep_last_n = 1 cleans up at start.
        pruner = MANAGERS[variant](base, keep_last_n=1, warn=warnings.append)
        pruner.cleanup()
        return _measure(pruner, warnings)


def replace_open_sidecar(root: str, experiment: str, variant: str) -> dict[str, Any]:
    """A reader on this host holds metadata.json open while a save amends it."""
    warnings: list[str] = []
    manager = MANAGERS[variant](_fresh_root(root, experiment, variant), keep_last_n=1,
                                warn=warnings.append)
    writer = write_files(FILES)
    manager.save(1, writer)
    with open(manager.root / SIDECAR, "rb"):
        manager.save(2, writer)  # replaces metadata.json: the old one stays as .nfsXXXX
        return _measure(manager, warnings)


# -- what may vary, for `python -m scenarios explore prune` ------------------------

# Late closes in every-step stay below the shared retry budget (0.75 s), the
# range in which the seed's fix must remove every old checkpoint.
MAX_EXPLORED_WINDOW = 0.7


def _explore_space() -> Any:
    """every-step (steps, keep_last_n, sync/async saves, each late close) or held-open."""
    from hypothesis import strategies as st

    from simfs.strategies import delays

    return st.one_of(
        st.fixed_dictionaries({
            "experiment": st.just("every-step"), "steps": st.integers(2, 4),
            "keep_last_n": st.integers(1, 2), "saves": st.sampled_from(("sync", "async")),
            "windows": st.lists(delays(MAX_EXPLORED_WINDOW), min_size=4, max_size=4)}),
        st.fixed_dictionaries({"experiment": st.just("ten-held-open"),
                               "held": st.integers(1, 4)}))


def _explore_example(variant: str, example: dict[str, Any], seed: int,
                     chooser: Chooser) -> Outcome:
    """One experiment; the invariants: every old checkpoint goes when its late close
    lands within the budget, and one cleanup sleeps at most the shared 0.75 s."""
    budget = sum(DEFAULT_WAITS)
    experiment = example["experiment"]
    target: Any
    args: tuple[Any, ...]
    if experiment == "every-step":
        steps = example["steps"]
        windows = dict(enumerate(example["windows"][:steps], start=1))
        target, args = save_every_step, (steps, example["keep_last_n"], 1.0, windows,
                                         example["saves"])
        timeout = steps * (1.0 + budget + MAX_EXPLORED_WINDOW) + 60
    else:
        target, args, timeout = prune_held_directories, (example["held"],), 60 + 10 * budget
    session = SimBackend(chooser=chooser).session({HOST: "vers=3"}, seed)
    problems: list[str] = []
    reached: tuple[str, ...] = ()
    try:
        (measured,) = session.run([ProcessSpec(HOST, target, (experiment, variant, *args),
                                               experiment)], timeout=timeout)
        reached = (experiment, *(("retried",) if measured["rmtree_calls"] > measured["prunes"]
                                 else ()))
        if experiment == "every-step" and (measured["failed"] or measured["left"]):
            problems.append(f"{measured['failed']} prune(s) failed and {measured['left']} old "
                            f"checkpoint(s) were left, though every close landed within "
                            f"{MAX_EXPLORED_WINDOW} s")
        # ten-held-open prunes in one cleanup (the reviewer's measurement).
        if experiment == "ten-held-open" and measured["retry_sleep_s"] > budget + 1e-6:
            problems.append(f"one cleanup slept {measured['retry_sleep_s']:.2f} s in retries, "
                            f"more than the shared {budget:.2f} s")
    except Exception as error:  # a process's failure is this example's finding
        problems.append(f"{type(error).__name__}: {error}")
    finally:
        virtual_s, choices = session.world.now, tuple(session.world.choices)
        digest = session.close()
    return Outcome(tuple(problems), digest, virtual_s, choices, reached)


# -- the experiment ---------------------------------------------------------------------


class Prune(Scenario):
    name: ClassVar[str] = "prune"
    seed_file: ClassVar[str] = "002_b7b3953b0bc14864.txt"
    summary: ClassVar[str] = ("checkpoint pruning fails on .nfs silly renames; fix: retries "
                              "sharing 0.75 s per cleanup, each attempt under the lock")
    params: ClassVar[tuple[Param, ...]] = (
        Param("steps", 40, "steps saved in every-step (one save per step)", int, minimum=2),
        Param("keep_last_n", 1, "checkpoints kept in every-step and slow-server", int,
              minimum=1),
        Param("step_s", 1.0, "seconds of training between saves in every-step", float,
              minimum=0.0),
        Param("max_window", 0.38, "longest late close after the prune lists, every-step",
              float, minimum=0.0),
        Param("saves", "sync", "how every-step and slow-server save", str,
              choices=("sync", "async")),
        Param("held", 10, "old checkpoints held open in ten-held-open", int, minimum=1),
        Param("slow_window", 4.0, "the late close in slow-server, seconds", float,
              minimum=0.0),
        Param("slow_step_s", 5.0, "seconds between saves in slow-server", float, minimum=0.0),
        Param("mount", "vers=3", "nfs(5) options of the host", str),
    )
    variants: ClassVar[tuple[Variant, ...]] = (
        Variant("rmtree", "the seed's cleanup: plain rmtree, warn, leave it", buggy=True),
        Variant("uncapped-retry", "the fix's first revision: 0.75 s of waits per directory",
                buggy=True),
        Variant("reference", "reference.checkpoint: 0.75 s of waits per cleanup, each attempt "
                             "under the sidecar lock, .nfs entries kept apart", buggy=False),
    )
    exploration: ClassVar[Exploration] = Exploration(_explore_space, _explore_example)

    def run(self, backend: Backend, seed: int, params: dict[str, Any],
            progress: Progress) -> ScenarioResult:
        rows: list[dict[str, Any]] = []
        samples: dict[str, Any] = {}
        digests: list[str] = []
        index = 0
        for experiment in EXPERIMENTS:
            spec_args, timeout = self._experiment(experiment, seed, params)
            for variant in self.variants:
                progress(f"prune: {experiment}, {variant.name}")
                target, args = spec_args
                session = backend.session({HOST: params["mount"]}, seed=seed * 100 + index)
                try:
                    (measured,) = session.run(
                        [ProcessSpec(HOST, target, (experiment, variant.name, *args),
                                     f"{experiment}.{variant.name}")], timeout=timeout)
                finally:
                    digests.append(session.close())
                index += 1
                samples[f"{experiment}/{variant.name}"] = measured
                rows.append({"experiment": experiment, "variant": variant.name,
                             **{key: measured[key] for key in
                                ("prunes", "failed", "left", "rmtree_calls", "retry_sleep_s")}})
        return ScenarioResult(self.name, backend.name, seed, dict(params), rows,
                              combine_digests(digests), samples)

    def _experiment(self, experiment: str, seed: int, params: dict[str, Any]
                    ) -> tuple[tuple[Any, tuple[Any, ...]], float]:
        """(process target and its arguments after experiment and variant, timeout)."""
        budget = sum(DEFAULT_WAITS)
        if experiment == "every-step":
            # One draw per run, the same for every variant: a paired comparison.
            rng = random.Random(f"prune:{seed}:every-step")
            windows = {step: rng.uniform(0.0, params["max_window"])
                       for step in range(1, params["steps"] + 1)}
            timeout = params["steps"] * (params["step_s"] + budget + params["max_window"]) + 60
            return (save_every_step, (params["steps"], params["keep_last_n"], params["step_s"],
                                      windows, params["saves"])), timeout
        if experiment == "ten-held-open":
            return (prune_held_directories, (params["held"],)), params["held"] * budget + 60
        if experiment == "slow-server":
            steps = 2 + params["keep_last_n"]
            timeout = steps * (params["slow_step_s"] + budget) + params["slow_window"] + 60
            return (save_every_step, (steps, params["keep_last_n"], params["slow_step_s"],
                                      {1: params["slow_window"]}, params["saves"])), timeout
        if experiment == "replace-open-sidecar":
            return (replace_open_sidecar, ()), 60.0
        raise ScenarioError(f"unknown experiment {experiment!r}")

    def table(self, result: ScenarioResult) -> str:
        params = result.params
        lines = [
            f"prune (seed {self.seed_file}): checkpoint pruning on NFS; backend "
            f"{result.backend}, mount {params['mount']!r}, {params['saves']} saves",
            f"  every-step: {params['steps']} saves {params['step_s']:g} s apart, "
            f"keep_last_n={params['keep_last_n']}, each last close 0-{params['max_window']:g} s "
            "after the prune lists the directory",
            f"  ten-held-open: {params['held']} old checkpoints held open on this host, "
            "one cleanup with keep_last_n=1",
            f"  slow-server: one close {params['slow_window']:g} s after the prune lists, "
            f"saves {params['slow_step_s']:g} s apart",
            "  replace-open-sidecar: metadata.json replaced while a reader on this host "
            "holds it open",
            "",
            format_table(("experiment", "variant", "prunes", "failed", "left", "rmtree calls",
                          "retry sleep"),
                         [(row["experiment"], row["variant"], row["prunes"], row["failed"],
                           row["left"], row["rmtree_calls"], f"{row['retry_sleep_s']:.2f} s")
                          for row in result.rows]),
        ]
        return "\n".join(lines)

    def check(self, result: ScenarioResult) -> list[str]:
        """The seed's claims, for the parameters they were made with."""
        params = result.params
        budget = sum(DEFAULT_WAITS)
        rows = {(row["experiment"], row["variant"]): row for row in result.rows}
        problems: list[str] = []

        def expect(key: tuple[str, str], claim: str, holds: bool) -> None:
            if not holds:
                problems.append(f"{key[0]}/{key[1]}: expected {claim}; got {rows[key]}")

        # every-step: the reference removes every old checkpoint and keeps the last n.
        key = ("every-step", "reference")
        if params["max_window"] < budget:
            kept = [f"step_{s}" for s in range(params["steps"] - params["keep_last_n"] + 1,
                                               params["steps"] + 1)]
            on_disk = result.samples.get(f"{key[0]}/{key[1]}", {}).get("checkpoints", kept)
            expect(key, f"{params['steps'] - params['keep_last_n']} prunes, none failed, "
                        f"only {kept} kept",
                   rows[key]["prunes"] == params["steps"] - params["keep_last_n"]
                   and rows[key]["failed"] == 0 and rows[key]["left"] == 0
                   and sorted(on_disk) == sorted(kept))
        if params["max_window"] > 0:
            key = ("every-step", "rmtree")
            expect(key, "failed prunes and directories left",
                   rows[key]["failed"] > 0 and rows[key]["left"] > 0)
        # ten-held-open: the cap.
        held, tries = params["held"], len(DEFAULT_WAITS) + 1
        for variant, calls, slept in (("rmtree", held, 0.0),
                                      ("uncapped-retry", held * tries, held * budget),
                                      ("reference", held + tries - 1, budget)):
            key = ("ten-held-open", variant)
            expect(key, f"{held} left, {calls} rmtree calls, {slept:.2f} s of sleep",
                   rows[key]["left"] == held and rows[key]["rmtree_calls"] == calls
                   and abs(rows[key]["retry_sleep_s"] - slept) < 1e-6)
        # slow-server: outlives one cleanup, the next removes it.
        key = ("slow-server", "reference")
        if budget < params["slow_window"] < params["slow_step_s"]:
            expect(key, "one failed prune and nothing left",
                   rows[key]["failed"] == 1 and rows[key]["left"] == 0)
        # replace-open-sidecar: the .nfs entry is no checkpoint.
        key = ("replace-open-sidecar", "reference")
        leftovers = result.samples.get(f"{key[0]}/{key[1]}", {}).get("nfs_leftovers", 1)
        expect(key, "one .nfs leftover beside metadata.json, one prune, none failed",
               leftovers == 1 and rows[key]["prunes"] == 1 and rows[key]["failed"] == 0
               and rows[key]["left"] == 0)
        return problems
