"""What a scenario is: hosts, processes, parameters, variants, invariants, a table.

A scenario module subclasses ``Scenario``; the runner (``python -m
scenarios``) gives it a backend (the simulation, or real NFS mounts), a seed
and validated parameters, and gets back a ``ScenarioResult`` whose rows it
prints as the scenario's table and can write as JSON.

Scenario processes are plain functions taking the host's mount point of the
export (``root``) as their first argument, so the same code runs in a simfs
world (root ``/shared``) and on a real mount (root ``/mnt/nfs/a``).
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from simfs import MountOptionError, MountOptions, MountOptionWarning


class ScenarioError(ValueError):
    """Bad input to the runner: an unknown scenario, parameter or value."""


class BackendFailed(RuntimeError):
    """A process on a real backend failed; the message names it and what it raised."""


@dataclass(frozen=True)
class Param:
    """One scenario parameter, with the seed's value as its default."""

    name: str
    default: Any
    help: str
    kind: type = float
    minimum: float | None = None
    choices: tuple[Any, ...] | None = None

    def parse(self, text: str) -> Any:
        """The value of ``text`` for this parameter.

        Raises:
            ScenarioError: naming the parameter, the value and what is allowed.
        """
        try:
            value = self.kind(text)
        except ValueError:
            raise ScenarioError(f"parameter {self.name}={text!r}: not "
                                f"{_article(self.kind.__name__)}; {self.describe()}") from None
        return self.check(value)

    def check(self, value: Any) -> Any:
        """``value`` if this parameter allows it.

        Floats must be finite: a ``nan`` poll interval or an ``inf`` delay
        would reach the simulation as a sleep it must refuse mid-run.  A
        parameter called ``mount`` is an nfs(5) option string, parsed here
        exactly as each host will parse it, so a bad option stops the run
        before it starts.

        Raises:
            ScenarioError: naming the parameter, the value and what is allowed.
        """
        if isinstance(value, float) and not math.isfinite(value):
            raise ScenarioError(f"parameter {self.name}={value!r}: not a finite number; "
                                f"{self.describe()}")
        if self.choices is not None and value not in self.choices:
            raise ScenarioError(f"parameter {self.name}={value!r}: {self.describe()}")
        if self.minimum is not None and value < self.minimum:
            raise ScenarioError(f"parameter {self.name}={value!r}: {self.describe()}")
        if self.name == "mount":
            try:
                with warnings.catch_warnings():  # the hosts warn when they mount
                    warnings.simplefilter("ignore", MountOptionWarning)
                    MountOptions.parse(value)
            except MountOptionError as error:
                raise ScenarioError(f"parameter mount={value!r}: {error}") from None
        return value

    def allowed(self) -> str:
        """What values this parameter takes, in words: ``a float >= 0.001``."""
        if self.choices is not None:
            return "one of " + ", ".join(repr(choice) for choice in self.choices)
        if self.name == "mount":
            return "nfs(5) options, comma-separated"
        if self.minimum is not None:
            return f"{_article(self.kind.__name__)} >= {self.minimum:g}"
        return _article(self.kind.__name__)

    def describe(self) -> str:
        """The allowed values, the default and the help, for error messages."""
        return f"allowed: {self.allowed()} (default {self.default!r}; {self.help})"


def _article(noun: str) -> str:
    return f"{'an' if noun[:1] in ('a', 'e', 'i', 'o', 'u') else 'a'} {noun}"


@dataclass(frozen=True)
class Variant:
    """One version of the code under test: the seed's buggy code, or the reference."""

    name: str
    description: str
    buggy: bool


@dataclass(frozen=True)
class ProcessSpec:
    """A process to run on a host: ``target(root, *args)``."""

    host: str
    target: Callable[..., Any]
    args: tuple[Any, ...] = ()
    name: str | None = None


class Session(Protocol):
    """Hosts that keep their NFS client caches across the trials run on them."""

    def run(self, processes: Sequence[ProcessSpec], *, timeout: float) -> list[Any]:
        """Start the processes together and return their results in order."""

    def rpc_counts(self, host: str) -> dict[str, int]:
        """RPCs the host's client has sent so far, by procedure."""

    def choices(self) -> list[int]:
        """The schedule the session's runs took, for a replay (real NFS has none: [])."""

    def close(self) -> str:
        """End the session; returns the digest of what it did ('' if none)."""


class Backend(Protocol):
    name: str

    def session(self, hosts: Mapping[str, str], seed: int) -> Session:
        """Hosts named as keys, mounted with the nfs(5) options given as values."""


class RunRecord:
    """What one run of a plan recorded, and the Python that runs it again.

    A scenario's record is a dataclass with (at least) these fields; it says
    how its replay reads with ``replay_imports`` (``"from scenarios.NAME
    import *"``) and ``replay_call`` (the check and the run function).
    """

    replay_imports: ClassVar[str]
    replay_call: ClassVar[tuple[str, str]]
    plan: Any
    variant: str
    seed: int
    choices: list[int]

    def replay_line(self) -> str:
        """Python that runs this again, schedule and all, and re-raises what it found."""
        check, run = self.replay_call
        return (f"{self.replay_imports}; {check}({run}({self.plan!r}, {self.variant!r}, "
                f"seed={self.seed}, chooser={self.choices!r}))")


class InvariantViolated(AssertionError):
    """A run broke its scenario's invariant: what went wrong, then how to replay it.

    Each scenario's violation subclasses this, so ``except InvariantViolated``
    catches any scenario's.
    """

    def __init__(self, run: RunRecord, *lines: str) -> None:
        self.run = run
        super().__init__("\n".join([*lines, f"replay: python -c {run.replay_line()!r}"]))


@dataclass
class ScenarioResult:
    """A scenario's measured rows, in the JSON shape the runner writes."""

    scenario: str
    backend: str
    seed: int
    params: dict[str, Any]
    rows: list[dict[str, Any]]
    trace_sha256: str
    samples: dict[str, Any] = field(default_factory=dict, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "backend": self.backend, "seed": self.seed,
                "params": self.params, "rows": self.rows, "trace_sha256": self.trace_sha256}


def combine_digests(digests: Iterable[str]) -> str:
    """One sha256 over the digests of every session, in order."""
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()


Progress = Callable[[str], None]


@dataclass(frozen=True)
class FidelityRow:
    """What one group of trials showed on one backend, for the fidelity report."""

    key: tuple[str, ...]
    outcome: str
    median_s: float | None  # None: no trial of the group saw its outcome (timed out)
    min_s: float | None
    max_s: float | None
    rpcs_per_poll: float | None


class Scenario:
    """Base class of the seed cases; subclasses fill in the class attributes."""

    name: ClassVar[str]
    seed_file: ClassVar[str]
    summary: ClassVar[str]
    params: ClassVar[tuple[Param, ...]] = ()
    variants: ClassVar[tuple[Variant, ...]] = ()
    has_trials: ClassVar[bool] = False

    @classmethod
    def resolve_params(cls, given: Mapping[str, str], trials: int | None) -> dict[str, Any]:
        """Defaults overridden by ``given`` (text) and ``trials``.

        Raises:
            ScenarioError: an unknown parameter, or a value it does not allow.
        """
        known = {param.name: param for param in cls.params}
        values = {param.name: param.default for param in cls.params}
        for name, text in given.items():
            if name not in known:
                raise ScenarioError(
                    f"scenario {cls.name!r} has no parameter {name!r}; parameters: "
                    + (", ".join(sorted(known)) or "none"))
            values[name] = known[name].parse(text)
        if trials is not None:
            if "trials" not in known:
                raise ScenarioError(f"scenario {cls.name!r} takes no --trials")
            values["trials"] = known["trials"].check(trials)
        return values

    def run(self, backend: Backend, seed: int, params: dict[str, Any],
            progress: Progress) -> ScenarioResult:
        raise NotImplementedError

    def table(self, result: ScenarioResult) -> str:
        raise NotImplementedError

    def check(self, result: ScenarioResult) -> list[str]:
        """Invariant violations in ``result``; empty when the scenario behaved."""
        return []

    def fidelity_key_names(self) -> tuple[str, ...]:
        """The columns that name a fidelity row; scenarios with a comparison override."""
        raise ScenarioError(f"scenario {self.name!r} has no sim-versus-real comparison")

    def fidelity_rows(self, result: ScenarioResult) -> list[FidelityRow]:
        raise ScenarioError(f"scenario {self.name!r} has no sim-versus-real comparison")

    def fidelity_details(self, sim: ScenarioResult, real: ScenarioResult) -> str:
        """Anything beyond the rows worth printing side by side (default: nothing)."""
        return ""


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns padded to their widest cell."""
    cells = [[str(cell) for cell in row] for row in [headers, *rows]]
    widths = [max(len(row[index]) for row in cells) for index in range(len(headers))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
             for row in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def dump_json(results: Sequence[ScenarioResult], path: str) -> None:
    payload: Any = results[0].to_json() if len(results) == 1 else [r.to_json() for r in results]
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(payload, handle, indent=2, sort_keys=False)
        handle.write("\n")
