"""The README's tour prints exactly what the README shows; its test examples fail as it says.

The tour's code blocks run in order in one namespace; a ``# handshake.py``
block becomes an importable module, and each bare fenced block right after a
Python block is the output that block must print, character for character.
The ``# test_marker.py`` block of "Test your own code" runs under pytest as
a user would run it: both its tests must fail, for the reason the README
gives, and the replay line must rerun the explored failure.
"""

import contextlib
import io
import re
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)


def _tour_blocks():
    text = README.read_text(encoding="utf-8")
    start = text.index("## A short tour")
    end = text.index("\n## ", start + 1)
    return [(match.group(1), match.group(2)) for match in FENCE.finditer(text[start:end])]


def test_the_tour_has_code_and_the_output_it_claims():
    kinds = [kind for kind, _ in _tour_blocks()]
    assert kinds.count("python") >= 3 and kinds.count("") >= 2


def test_the_readme_tour_prints_what_the_readme_shows(tmp_path, monkeypatch):
    blocks = _tour_blocks()
    monkeypatch.syspath_prepend(str(tmp_path))
    namespace: dict[str, object] = {"__name__": "readme_tour"}
    printed = None
    compared = 0
    try:
        for kind, body in blocks:
            if kind == "python" and body.startswith("# handshake.py"):
                (tmp_path / "handshake.py").write_text(body, encoding="utf-8")
            elif kind == "python":
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    exec(compile(body, "README.md", "exec"), namespace)
                printed = out.getvalue()
            elif kind == "" and printed is not None:
                assert printed == body
                compared += 1
                printed = None
    finally:
        sys.modules.pop("handshake", None)
        for value in namespace.values():
            close = getattr(value, "close", None)
            if type(value).__name__ == "World" and close is not None:
                close()
    assert compared == 2


@pytest.mark.parametrize("target", [".." + "/shared", "/work" + "/shared"])
def test_the_readme_links_only_to_files_a_clone_has(target):
    text = README.read_text(encoding="utf-8")
    assert target not in text
    for link in re.findall(r"\]\(([^)#]+)", text):
        if not link.startswith("http"):
            assert (README.parent / link).exists(), link


def _test_marker_block():
    text = README.read_text(encoding="utf-8")
    start = text.index("## Test your own code")
    for kind, body in FENCE.findall(text[start:]):
        if kind == "python" and body.startswith("# test_marker.py"):
            return body
    raise AssertionError("README: no # test_marker.py block in 'Test your own code'")


def test_the_readme_test_examples_both_fail_because_b_never_sees_the_marker(pytester):
    pytester.makepyfile(test_marker=_test_marker_block())
    result = pytester.runpytest()
    result.assert_outcomes(failed=2)
    output = result.stdout.str()
    # The documented reason, for each test: b's wait_for timed out at 5 s,
    # while a's publish succeeded.
    for test in ("test_the_marker_is_seen_within_5_seconds",
                 "test_whatever_the_schedule_and_mounts"):
        section = output[output.index(f"_ {test} _"):]
        assert "process 'wait_for' on host 'b' raised TimeoutError: /shared/step/READY" \
            in section, section
    replay = re.findall(r"replay: (pytest test_marker.py::test_whatever_the_schedule_and_mounts "
                        r"--simfs-replay simfs1-[A-Za-z0-9_-]+)", output)
    assert replay, output
    again = pytester.runpytest(*replay[-1].split()[1:])
    again.assert_outcomes(failed=1)
    assert "raised TimeoutError: /shared/step/READY" in again.stdout.str()
