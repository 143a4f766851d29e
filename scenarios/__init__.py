"""The seed incidents as runnable experiments: ``python -m scenarios``.

Each module is one seed case: the buggy variant its authors started from,
the reference fix, invariants, and a table that reproduces the seed's
numbers, on the simulation (``--backend sim``) or real NFS
(``--backend real``).
"""

from __future__ import annotations

import importlib
import pkgutil

from ._base import (
    Param,
    ProcessSpec,
    Scenario,
    ScenarioError,
    ScenarioResult,
    Variant,
)


def _discover() -> dict[str, type[Scenario]]:
    """Every public module of this package is one scenario; import them all.

    An import error is raised, not skipped: a scenario that cannot load is a
    broken build, not a missing row.
    """
    found: dict[str, type[Scenario]] = {}
    for module_info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if module_info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, Scenario)
                    and value is not Scenario and value.__module__ == module.__name__):
                found[value.name] = value
    return found


SCENARIOS: dict[str, type[Scenario]] = _discover()


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
