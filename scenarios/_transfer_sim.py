"""The seed-003 transfers as processes (the seed's pipes, its retry, the reference),
and the runner of one trial that spawns them and collects what they saw.

Every function here that a scenario spawns is plain code taking its host's
mount point of the export (``root``) first, and plain JSON-able arguments
after it, so the same process runs in a simfs world, as a forked process on
a real mount, and through an agent on another machine.

The link is modelled in time, not in bytes: a file of the seed's size
(3.3 GB of weights) is a few hundred real bytes that arrive in chunks spread
over the seconds its size would take at the link's bandwidth.  A transfer's
remote end starts writing once its ssh session is up (``opens_at`` seconds
after the trial starts; see ``scenarios.transfer.link_plan``).
"""

from __future__ import annotations

import errno
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import blake3

from reference.fs import revalidate_ancestors
from reference.transfer import Artefact, FileEntry, Retry, transfer_all, verify

from ._base import InvariantViolated, ProcessSpec, RunRecord, ScenarioError, Session

if TYPE_CHECKING:
    from .transfer import TrialPlan

HOSTS = ("receiver", "second", "consumer")
VARIANTS = ("naive", "seed-fix", "reference")
BASE = "transfer"

MODEL_DIR = "models/Qwen3.6-27B-DFlash"
# The seed's five transfers: (destination path under dflash/, size in bytes).
# Sizes are the seed's ``ls -lh``; the frequency file and the repository are
# not listed there (assumed: one int64 count per token of a ~152k vocabulary,
# and a shallow clone of a few small files).
SEED_TRANSFERS: dict[str, tuple[tuple[str, float], ...]] = {
    "tokenized": (("data/tokenized/data-00000-of-00003.arrow", 429e6),
                  ("data/tokenized/data-00001-of-00003.arrow", 430e6),
                  ("data/tokenized/data-00002-of-00003.arrow", 432e6),
                  ("data/tokenized/dataset_info.json", 1.1e3)),
    "weights": ((f"{MODEL_DIR}/model.safetensors", 3.3e9),),
    "config": ((f"{MODEL_DIR}/config.json", 1.2e3),),
    "repository": (("speculators/README.md", 12e3), ("speculators/pyproject.toml", 3e3),
                   ("speculators/src/speculators/__init__.py", 1e3)),
    "frequency": (("token_freq.pt", 1.2e6),),
}
TRANSFERS = tuple(SEED_TRANSFERS)  # the order the seed's shell started them in
# Which directories each seed pipe makes on the remote side before writing:
# tar -xf makes the parents of what it extracts, the weights' remote command
# ran mkdir -p, git clone makes its tree; cat > and scp make nothing.
MAKES_PARENTS = {"tokenized": True, "weights": True, "config": False, "repository": True,
                 "frequency": False}
PREPARED = ("data", "models")  # made in an earlier command of the seed's session
CHUNKS_PER_LARGE_FILE = 4
LARGE = 1e6


def payload(path: str) -> bytes:
    """The real bytes standing in for a file of the seed: small, distinct per path."""
    return (f"{path}\n".encode() * 8)[:160] + blake3.blake3(path.encode()).digest()


def manifest(name: str) -> Artefact:
    """The reference's description of one seed transfer: paths, sizes, BLAKE3."""
    return Artefact(name, tuple(FileEntry.of(path, payload(path))
                                for path, _ in SEED_TRANSFERS[name]))


def file_seconds(size: float, bandwidth: float) -> float:
    """Seconds the link takes to carry a file of ``size`` bytes."""
    return size / bandwidth


def _chunks(path: str, size: float, bandwidth: float) -> Iterator[bytes]:
    """The file's real bytes, each chunk arriving after its share of the link time."""
    data = payload(path)
    count = CHUNKS_PER_LARGE_FILE if size >= LARGE else 1
    step = -(-len(data) // count)
    for index in range(count):
        time.sleep(file_seconds(size, bandwidth) / count)
        yield data[index * step:(index + 1) * step]


def _errno_name(error: OSError) -> str:
    return errno.errorcode.get(error.errno or 0, str(error.errno))


# -- set-up and observation ------------------------------------------------------------------


def clear_base(root: str, base: str) -> None:
    """An empty base directory for a session (a real export outlives runs)."""
    shutil.rmtree(Path(root) / base, ignore_errors=True)
    os.makedirs(Path(root) / base)


def prepare_tree(root: str, dest: str) -> None:
    """The destination tree as the seed's earlier commands left it: dflash/{data,models}."""
    for name in PREPARED:
        os.makedirs(Path(root) / dest / name)


def watch_final_names(root: str, dest: str, names: Sequence[str], until: float,
                      poll: float) -> dict[str, Any]:
    """The consumer: poll every final name until ``until`` s; report torn sightings.

    A sighting is torn when a final name opens but its bytes are not the
    whole file.  The directories are revalidated before each look, so a file
    is seen as soon as the server has it, not acdirmin later.
    """
    start = time.time()
    pending = {path: payload(path) for name in names for path, _ in SEED_TRANSFERS[name]}
    torn: list[list[Any]] = []
    while pending:
        for path, expected in list(pending.items()):
            target = Path(root) / dest / path
            revalidate_ancestors(target)
            try:
                with open(target, "rb") as handle:
                    seen = handle.read()
            except FileNotFoundError:
                continue
            if seen == expected:
                del pending[path]
            else:
                torn.append([path, len(seen), round(time.time() - start, 6)])
                del pending[path]  # once is enough for the trial's verdict
        if time.time() - start + poll > until:
            break
        time.sleep(poll)
    return {"torn": torn}


def check_tree(root: str, dest: str, names: Sequence[str]) -> list[list[str]]:
    """The consumer, at the end: every file read back and checked (reference.transfer)."""
    return [[m.path, m.problem] for m in verify(Path(root) / dest,
                                                [manifest(name) for name in names])]


# -- the seed's code -------------------------------------------------------------------------


def seed_pipe(root: str, dest: str, name: str, opens_at: float, bandwidth: float
              ) -> dict[str, Any]:
    """One of the seed's five pipes, as its remote end behaves.

    After ``opens_at`` s (the ssh session is up) the remote command makes the
    parents it makes (``mkdir -p``, ``tar -xf``, ``git clone``) or none
    (``cat >``, ``scp``), then writes each file in place under its final
    name as the bytes arrive.  ENOENT is the seed's failure.
    """
    start = time.time()
    time.sleep(opens_at)
    error = None
    try:
        for path, size in SEED_TRANSFERS[name]:
            target = Path(root) / dest / path
            if MAKES_PARENTS[name]:
                os.makedirs(target.parent, exist_ok=True)
            with open(target, "wb") as handle:  # in place: readers may see it torn
                for chunk in _chunks(path, size, bandwidth):
                    handle.write(chunk)
                    handle.flush()
    except OSError as failure:
        error = _errno_name(failure)
    return {"name": name, "started": start, "ended": time.time(), "error": error}


def seed_retry(root: str, dest: str, name: str, opens_at: float, bandwidth: float
               ) -> dict[str, Any]:
    """The seed's fix: the failed pipe again, once the others are done.

    When it fails with ENOENT again, revalidate the directories above the
    file and look once more: a directory that is there now was there all
    along (the weights' transfer made it and finished before this retry
    began), so the ENOENT came from this host's stale negative entry.
    """
    result = seed_pipe(root, dest, name, opens_at, bandwidth)
    result["stale"] = False
    if result["error"] == "ENOENT":
        (path, _), *_ = SEED_TRANSFERS[name]
        target = Path(root) / dest / path
        revalidate_ancestors(target)
        result["stale"] = target.parent.is_dir()
    return result


# -- the reference ---------------------------------------------------------------------------


def reference_transfers(root: str, dest: str, names: Sequence[str],
                        opens_at: Sequence[float], bandwidth: float) -> dict[str, Any]:
    """``reference.transfer.transfer_all`` of ``names`` over the modelled link."""
    start = time.time()
    when = dict(zip(names, opens_at))
    connected: set[str] = set()

    def source(artefact: Artefact, entry: FileEntry) -> Iterator[bytes]:
        if artefact.name not in connected:  # one session per artefact, as the seed's pipes
            connected.add(artefact.name)
            time.sleep(max(0.0, when[artefact.name] - (time.time() - start)))
        size = dict(SEED_TRANSFERS[artefact.name])[entry.path]
        return _chunks(entry.path, size, bandwidth)

    report = transfer_all(Path(root) / dest, [manifest(name) for name in names], source,
                          max_parallel=len(TRANSFERS), retry=Retry(), verify_after=False)
    errors = [error for artefact in report.artefacts for file in artefact.files
              for error in file.errors]
    failed = [a.error for a in report.artefacts if a.status != "done"]
    return {"names": list(names), "started": start, "ended": time.time(),
            "errors": errors, "failed": failed}


# -- one trial: the processes of one run, and what they showed ------------------------------


@dataclass
class TrialRun(RunRecord):
    """What one trial showed, from the processes' own reports."""

    replay_imports: ClassVar[str] = "from scenarios.transfer import *"
    replay_call: ClassVar[tuple[str, str]] = ("check_trial", "run_trial")

    variant: str
    plan: TrialPlan
    pipes: list[dict[str, Any]]
    retry: dict[str, Any] | None
    torn: list[list[Any]]
    mismatches: list[list[str]]
    seed: int = 0
    choices: list[int] = field(default_factory=list)
    digest: str = ""
    virtual_s: float = 0.0  # the world's clock at the end (a fresh world's trial)

    @property
    def enoent(self) -> list[str]:
        """The seed's pipes that failed with ENOENT, and the reference's ENOENT errors
        (each ``"ENOENT (path)"``, retried or not)."""
        found = [pipe["name"] for pipe in self.pipes if pipe.get("error") == "ENOENT"]
        found += [error for pipe in self.pipes for error in pipe.get("errors", ())
                  if error.startswith("ENOENT")]
        return found

    @property
    def stale_enoent(self) -> bool:
        """The retry failed with ENOENT while the directory was on the server."""
        return self.retry is not None and self.retry["error"] == "ENOENT" and self.retry["stale"]

    @property
    def completed(self) -> bool:
        return not self.mismatches

    @property
    def wall_s(self) -> float:
        """Seconds from the shell starting the pipes to the last write (retry included)."""
        reports = [*self.pipes, *([self.retry] if self.retry else [])]
        if not reports:
            return 0.0
        launched = min(r["started"] for r in self.pipes) + self.plan.launch_s
        return float(max(r["ended"] for r in reports) - launched)

    def involved(self) -> tuple[str, ...]:
        """The transfers behind the ENOENT: the one that failed, and who makes its directory."""
        failed = [name for name in self.enoent if name in TRANSFERS]
        makers = {maker for name in failed for maker in self.plan.transfers
                  if MAKES_PARENTS[maker] and _shares_directory(maker, name)}
        return tuple(sorted({*failed, *makers}, key=TRANSFERS.index))



def _shares_directory(maker: str, name: str) -> bool:
    made = {path.rpartition("/")[0] for path, _ in SEED_TRANSFERS[maker]}
    return any(path.rpartition("/")[0] in made for path, _ in SEED_TRANSFERS[name])


def run_trial_in(session: Session, dest: str, plan: TrialPlan, variant: str) -> TrialRun:
    """One trial in a session whose hosts keep their caches from trial to trial."""
    if variant not in VARIANTS:
        raise ScenarioError(f"unknown variant {variant!r}; variants: {', '.join(VARIANTS)}")
    timeout = plan.horizon + plan.retry_opens_at + 120.0
    session.run([ProcessSpec("receiver", prepare_tree, (dest,), "prepare")], timeout=60)
    specs: list[ProcessSpec] = []
    if variant == "reference":
        for host in ("receiver", "second"):
            names = [n for n in plan.transfers if plan.host_of(n) == host]
            if names:
                opens = [plan.opens_from_start(n) for n in names]
                specs.append(ProcessSpec(host, reference_transfers,
                                         (dest, names, opens, plan.bandwidth), f"ref-{host}"))
    else:
        specs = [ProcessSpec(plan.host_of(name), seed_pipe,
                             (dest, name, plan.opens_from_start(name), plan.bandwidth), name)
                 for name in plan.transfers]
    if plan.watch_poll is not None:
        specs.append(ProcessSpec("consumer", watch_final_names,
                                 (dest, list(plan.transfers), plan.horizon, plan.watch_poll),
                                 "consumer"))
    results = session.run(specs, timeout=timeout)
    watched = results.pop() if plan.watch_poll is not None else {"torn": []}
    retry = None
    if variant == "seed-fix" and any(r.get("name") == "config" and r["error"] == "ENOENT"
                                     for r in results):
        (retry,) = session.run([ProcessSpec(plan.config_host, seed_retry,
                                            (dest, "config", plan.retry_opens_at,
                                             plan.bandwidth), "retry")], timeout=timeout)
    (mismatches,) = session.run([ProcessSpec("consumer", check_tree,
                                             (dest, list(plan.transfers)), "check")],
                                timeout=60)
    return TrialRun(variant, plan, results, retry, watched["torn"], mismatches)


def run_trial(plan: TrialPlan, variant: str, *, seed: int = 0,
              chooser: Callable[[int], int] | Sequence[int] | None = None,
              mount: str = "vers=3") -> TrialRun:
    """One trial in a fresh world; ``chooser`` as for ``simfs.World`` (a replay: a list)."""
    from ._sim import SimBackend

    backend = SimBackend() if chooser is None else SimBackend(chooser=chooser)
    session = backend.session(dict.fromkeys(HOSTS, mount), seed)
    try:
        session.run([ProcessSpec("receiver", clear_base, (BASE,), "clear")], timeout=60)
        run = run_trial_in(session, f"{BASE}/t0/dflash", plan, variant)
        choices, virtual_s = session.choices(), session.world.now
    finally:
        digest = session.close()
    run.seed, run.choices, run.digest, run.virtual_s = seed, choices, digest, virtual_s
    return run


class TransferInvariantViolated(InvariantViolated):
    """A trial did not end with every file in place, whole, and never torn."""

    run: TrialRun

    def __init__(self, run: TrialRun, problem: str) -> None:
        self.problem = problem
        super().__init__(run, f"variant {run.variant!r}: {problem}")


def check_trial(run: TrialRun) -> None:
    """Raises: TransferInvariantViolated, naming what went wrong and how to replay it."""
    if run.enoent:
        raise TransferInvariantViolated(
            run, f"ENOENT in {', '.join(run.enoent)}; transfers involved: "
                 f"{', '.join(run.involved())}")
    if run.stale_enoent:
        raise TransferInvariantViolated(run, "the retry met a stale negative entry (ENOENT)")
    if run.torn:
        raise TransferInvariantViolated(run, f"torn file visible under its final name: "
                                             f"{run.torn[0]}")
    if run.mismatches:
        raise TransferInvariantViolated(run, f"not in place: {run.mismatches}")
