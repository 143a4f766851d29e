"""The README and the manual in docs/ show code that runs as they say it does.

Every ``python`` block of the README and of the manual's pages is a whole
file a reader can save: its first line names it (``# tour.py``) and it
depends on no other block.  A script runs as ``python name.py`` in an empty
directory; a bare fenced block right after it (nothing but blank lines
between) is what it must print, character for character, or, when that
block starts with a traceback, how it must fail: exit non-zero, stderr
ending in the block's lines after ``...``.  A test file (``# test_*.py``)
runs under pytest as a user would run it, in a pytest process of its own
(simfs's routes cannot be imported a second time into one process, as
pytester's in-process runs would), and each has a check below that it
fails (or passes) for the reason its page gives, and that its replay line
reruns the same failure.

The links of these pages lead to files a clone has, and to headings those
files have.  The README's test command is the one ``.ci/run`` runs.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import simfs

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# The pages whose python blocks are run: the front page and the manual.
MANUAL = [
    README,
    ROOT / "docs" / "README.md",
    ROOT / "docs" / "tutorial.md",
    ROOT / "docs" / "testing.md",
    ROOT / "docs" / "compatibility.md",
    ROOT / "docs" / "scenarios.md",
    ROOT / "docs" / "real-nfs.md",
    ROOT / "docs" / "api.md",
]
# Pages whose links are checked: the manual and the documents it links to.
LINKED = MANUAL + sorted((ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```\n", re.S | re.M)
FILE_NAME = re.compile(r"# (\w[\w-]*\.py)\b")
TRACEBACK = "Traceback (most recent call last):\n"


class Block:
    def __init__(self, page: Path, name: str, body: str, output: str | None) -> None:
        self.page, self.name, self.body, self.output = page, name, body, output

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.name}"


def blocks(page: Path) -> list[Block]:
    """The page's python blocks, each with the bare block right after it, if any."""
    text = page.read_text(encoding="utf-8")
    fences = list(FENCE.finditer(text))
    found = []
    for index, fence in enumerate(fences):
        if fence.group(1) != "python":
            continue
        first = fence.group(2).splitlines()[0] if fence.group(2) else ""
        name = FILE_NAME.match(first)
        assert name, (f"{page.relative_to(ROOT)}: a python block must start by naming "
                      f"its file ('# name.py'), not {first!r}")
        output = None
        if index + 1 < len(fences):
            after = fences[index + 1]
            if after.group(1) == "" and not text[fence.end():after.start()].strip():
                output = after.group(2)
        found.append(Block(page, name.group(1), fence.group(2), output))
    return found


ALL_BLOCKS = [block for page in MANUAL for block in blocks(page)]
SCRIPTS = [block for block in ALL_BLOCKS if not block.name.startswith("test_")]
TEST_FILES = [block for block in ALL_BLOCKS if block.name.startswith("test_")]


def test_the_pages_show_scripts_with_their_output_and_test_files():
    assert len(SCRIPTS) >= 5 and len(TEST_FILES) >= 2
    assert sum(block.output is not None for block in SCRIPTS) >= 4
    assert any((block.output or "").startswith(TRACEBACK) for block in SCRIPTS)
    assert any(block.page == README and block.name.startswith("test_") for block in TEST_FILES)


def test_each_page_names_each_of_its_files_once():
    for page in MANUAL:
        names = [block.name for block in blocks(page)]
        assert len(names) == len(set(names)), page


@pytest.mark.parametrize("block", SCRIPTS, ids=[block.id for block in SCRIPTS])
def test_each_script_prints_or_fails_as_its_page_shows(block, tmp_path):
    (tmp_path / block.name).write_text(block.body, encoding="utf-8")
    run = subprocess.run([sys.executable, block.name], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
    if block.output is not None and block.output.startswith(TRACEBACK):
        assert run.returncode != 0, run.stdout
        shown = block.output.splitlines()
        tail = shown[shown.index("  ...") + 1:]
        assert run.stderr.splitlines()[-len(tail):] == tail, run.stderr
        return
    assert run.returncode == 0, run.stderr
    if block.output is not None:
        assert run.stdout == block.output


def _test_file(page: Path, name: str) -> str:
    for block in TEST_FILES:
        if block.page == page and block.name == name:
            return block.body
    raise AssertionError(f"{page.relative_to(ROOT)}: no '# {name}' block")


def _section(output: str, test: str) -> str:
    return output[output.index(f"_ {test} _"):]


REASON = "process 'wait_for' on host 'b' raised TimeoutError: /shared/step/READY"


def _replays_the_same_failure(pytester, output: str, test: str) -> None:
    replay = re.findall(rf"replay: (pytest test_marker.py::{test} "
                        r"--simfs-replay simfs1-[A-Za-z0-9_-]+)", output)
    assert replay, output
    again = pytester.runpytest_subprocess(*replay[-1].split()[1:])
    again.assert_outcomes(failed=1)
    assert REASON in again.stdout.str()


def check_the_front_page_example(pytester) -> None:
    # README: it fails, shrunk to default mounts on both hosts, because b's
    # negative entry hides the marker for acdirmin; the replay line reruns it.
    pytester.makepyfile(test_marker=_test_file(README, "test_marker.py"))
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    section = _section(output, "test_the_marker_is_seen_within_5_seconds")
    assert REASON in section, section
    assert "hosts: a 'vers=3'; b 'vers=3'" in section, section
    assert ("b: absent until 30.000 s (negative dentry for 'READY' in /shared/step,"
            in section), section
    _replays_the_same_failure(pytester, output, "test_the_marker_is_seen_within_5_seconds")


def check_the_testing_pages_two_tests(pytester) -> None:
    # docs/testing.md: both tests fail because b's wait_for timed out at 5 s
    # while a's publish succeeded; the explored one's replay line reruns it.
    pytester.makepyfile(test_marker=_test_file(ROOT / "docs" / "testing.md", "test_marker.py"))
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(failed=2)
    output = result.stdout.str()
    for test in ("test_the_marker_is_seen_within_5_seconds",
                 "test_whatever_the_schedule_and_mounts"):
        assert REASON in _section(output, test), _section(output, test)
    _replays_the_same_failure(pytester, output, "test_whatever_the_schedule_and_mounts")


CHECKS: dict[str, Callable[..., None]] = {
    "README.md:test_marker.py": check_the_front_page_example,
    "docs/testing.md:test_marker.py": check_the_testing_pages_two_tests,
}


def test_every_test_file_shown_has_a_check_of_its_outcome():
    assert sorted(block.id for block in TEST_FILES) == sorted(CHECKS)


@pytest.mark.parametrize("shown", sorted(CHECKS))
def test_each_test_file_fails_for_the_reason_its_page_gives(shown, pytester):
    CHECKS[shown](pytester)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {_slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def test_the_anchor_rule_is_githubs():
    assert _slug("Native code below the routes: the seccomp guard (opt-in)") == \
        "native-code-below-the-routes-the-seccomp-guard-opt-in"
    assert _slug("This project's own tiers (`bash .ci/run`)") == \
        "this-projects-own-tiers-bash-cirun"


@pytest.mark.parametrize("page", sorted(set(LINKED)), ids=lambda page: str(page.relative_to(ROOT)))
def test_the_pages_link_only_to_files_a_clone_has_and_their_headings(page):
    text = page.read_text(encoding="utf-8")
    for outside in (".." + "/shared", "/work" + "/shared"):
        assert outside not in text, f"{page.relative_to(ROOT)} names {outside}"
    for link in re.findall(r"\]\(([^)\s]+)\)", FENCE.sub("", text)):
        if link.startswith(("http://", "https://")):
            continue
        path, _, anchor = link.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.relative_to(ROOT)}: {link}"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked), f"{page.relative_to(ROOT)}: {link}"


def test_the_api_page_names_every_public_name_of_simfs():
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    missing = [name for name in [*simfs.__all__, "explore"]
               if not re.search(rf"`[^`]*\b{name}\b", text)]
    assert not missing, "docs/api.md does not name: " + ", ".join(missing)


def _setup_commands() -> list[str]:
    text = README.read_text(encoding="utf-8")
    start = text.index("## Set-up: two commands")
    block = re.search(r"```sh\n(.*?)```", text[start:], re.S)
    assert block, "README: no sh block under 'Set-up: two commands'"
    return [line for line in block.group(1).splitlines()
            if line.strip() and not line.startswith("#")]


def test_the_readme_has_two_setup_commands_one_runs_the_tables_one_the_tests():
    tables, tests = _setup_commands()
    assert tables.endswith("-m scenarios run all") and "install -e ." in tables
    assert "install -e '.[test]'" in tests and tests.endswith("-m pytest")


def test_ci_runs_the_readmes_test_command_after_the_same_install():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    _, tests = _setup_commands()
    command = tests.split("&&")[-1].strip()
    step = ci.index('step "fast tier (the README\'s test command)"')
    assert ci[step:].splitlines()[1].strip() == command
    assert "pip install -q -e '.[test]'" in ci[:step]
