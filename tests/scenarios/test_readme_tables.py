"""The seed tables the manual shows are the ones ``python -m scenarios run`` prints.

docs/scenarios.md's "The seed tables, in simulation" quotes one table per
seed case, as the README's first set-up command prints it.  A change to the
model or to a scenario that moves a number must move the page with it; these tests run
each scenario as the page says and find every quoted line in its output,
in order (a quote may leave rows or the rule line out, never change one).
Transfer takes about 20 s, so its table is checked in the quality tier.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "scenarios.md"
ROOT = PAGE.parents[1]
SECTION = "## The seed tables, in simulation"
FENCE = re.compile(r"^```\n(.*?)^```\n", re.S | re.M)
# The page quotes the tables in this order.
SCENARIOS = ("handshake", "refit", "prune", "transfer", "cas")


def _quoted_tables() -> dict[str, list[str]]:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + 1)
    end = len(text) if end < 0 else end
    blocks = [match.group(1) for match in FENCE.finditer(text[start:end])]
    assert len(blocks) == len(SCENARIOS), "one quoted table per seed case, in order"
    return {name: [line.rstrip() for line in block.splitlines()
                   if line.strip() and not set(line.strip()) <= {"-", " "}]
            for name, block in zip(SCENARIOS, blocks)}


def _printed_lines(scenario: str) -> list[str]:
    run = subprocess.run([sys.executable, "-m", "scenarios", "run", scenario],
                         capture_output=True, text=True, timeout=600,
                         cwd=ROOT)
    assert run.returncode == 0, run.stderr
    return [line.rstrip() for line in run.stdout.splitlines()]


def _assert_quoted_in_order(scenario: str) -> None:
    quoted = _quoted_tables()[scenario]
    printed = _printed_lines(scenario)
    position = 0
    for line in quoted:
        try:
            position = printed.index(line, position) + 1
        except ValueError:
            table = "\n".join(printed)
            raise AssertionError(f"docs/scenarios.md's {scenario} table has a line the run "
                                 f"does not print (or not in this order):\n  {line}\n"
                                 f"the run printed:\n{table}") from None


@pytest.mark.parametrize("scenario", [name for name in SCENARIOS if name != "transfer"])
def test_the_readme_quotes_the_table_the_scenario_prints(scenario):
    _assert_quoted_in_order(scenario)


@pytest.mark.quality
def test_the_readme_quotes_the_transfer_table_the_scenario_prints():
    _assert_quoted_in_order("transfer")


def test_a_changed_number_in_a_quote_is_caught(monkeypatch):
    # The check itself can fail: the handshake quote with one worst time
    # changed is not found in the run's output.
    quoted = _quoted_tables()
    changed = [line.replace("29.77 s", "29.78 s") for line in quoted["handshake"]]
    assert changed != quoted["handshake"]
    monkeypatch.setattr(sys.modules[__name__], "_quoted_tables",
                        lambda: {**quoted, "handshake": changed})
    with pytest.raises(AssertionError, match=r"29\.78 s"):
        _assert_quoted_in_order("handshake")
