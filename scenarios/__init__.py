"""The seed incidents as runnable experiments: ``python -m scenarios``.

Each module is one seed case: the buggy variant its authors started from,
the reference fix, invariants, and a table that reproduces the seed's
numbers, on the simulation (``--backend sim``) or real NFS
(``--backend real``).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator, Mapping

from ._base import (
    Param,
    ProcessSpec,
    Scenario,
    ScenarioError,
    ScenarioResult,
    Variant,
)


class _Catalogue(Mapping[str, type[Scenario]]):
    """Every public module of this package is one scenario, named as its module.

    A module is imported when its scenario is first asked for, so running
    one scenario imports that one alone (issue 16: importing all of them
    was a quarter of ``python -m scenarios run handshake``); listing the
    names imports nothing.  An import error is raised, not skipped: a
    scenario that cannot load is a broken build, not a missing row.
    """

    def __init__(self, package: str, path: list[str]) -> None:
        self._package = package
        self._names = sorted(module.name for module in pkgutil.iter_modules(path)
                             if not module.name.startswith("_"))
        self._loaded: dict[str, type[Scenario]] = {}

    def __getitem__(self, name: str) -> type[Scenario]:
        if name not in self._names:
            raise KeyError(name)
        scenario = self._loaded.get(name)
        if scenario is None:
            scenario = self._loaded[name] = self._load(name)
        return scenario

    def _load(self, name: str) -> type[Scenario]:
        module = importlib.import_module(f"{self._package}.{name}")
        defined = [value for value in vars(module).values()
                   if isinstance(value, type) and issubclass(value, Scenario)
                   and value is not Scenario and value.__module__ == module.__name__]
        for scenario in defined:
            if scenario.name == name:
                return scenario
        raise ScenarioError(
            f"module {module.__name__} defines no scenario named {name!r} (it defines "
            f"{', '.join(repr(s.name) for s in defined) or 'none'}); each public module "
            "of the package is the scenario of its own name")

    def __contains__(self, name: object) -> bool:
        return name in self._names  # no import to answer

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


SCENARIOS: Mapping[str, type[Scenario]] = _Catalogue(__name__, __path__)


def get(name: str) -> type[Scenario]:
    """The scenario class called ``name``.

    Raises:
        ScenarioError: no such scenario; the message lists the known ones.
    """
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ScenarioError(f"unknown scenario {name!r}; known: "
                            f"{', '.join(sorted(SCENARIOS))}, or 'all'") from None


__all__ = ["SCENARIOS", "Param", "ProcessSpec", "Scenario", "ScenarioError", "ScenarioResult",
           "Variant", "get"]
