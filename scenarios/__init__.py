"""The seed incidents as runnable experiments: ``python -m scenarios``.

Each module is one seed case: the buggy variant its authors started from,
the reference fix, invariants, and a table that reproduces the seed's
numbers, on the simulation (``--backend sim``) or real NFS
(``--backend real``).
"""

from __future__ import annotations

from ._base import (
    Param,
    ProcessSpec,
    Scenario,
    ScenarioError,
    ScenarioResult,
    Variant,
)
from .handshake import Handshake

SCENARIOS: dict[str, type[Scenario]] = {
    Handshake.name: Handshake,
}


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
