"""reference.transfer on a local disk and under simulated NFS (seed 003).

NFS facts relied on (docs/nfs-facts.md, "Attribute and dentry caches"): a host
that looked a name up while it was absent keeps the negative entry until the
parent's cached attributes expire (acdirmin, 30 s by default), so a plain open
under a directory another host made meanwhile fails with ENOENT; opening the
directory above revalidates it; data written on one host is on the server at
close.
"""

import errno
import os
import time

import blake3
import pytest

from reference.fs import revalidate
from reference.transfer import (
    Artefact,
    FileEntry,
    PlanError,
    Retry,
    TransferFailed,
    check_plan,
    transfer_all,
    transfer_file,
    verify,
)
from simfs import FaultPlan, FaultRule, World


def _artefact(name, files, depends_on=()):
    return Artefact(name, tuple(FileEntry.of(path, data) for path, data in files.items()),
                    tuple(depends_on))


def _bytes_source(contents, calls=None, delay=0.0):
    """A link that delivers each file's bytes in two chunks, ``delay`` s apart."""

    def source(artefact, entry):
        if calls is not None:
            calls.append((artefact.name, entry.path))
        data = contents[entry.path]

        def chunks():
            half = len(data) // 2
            time.sleep(delay)
            yield data[:half]
            time.sleep(delay)
            yield data[half:]

        return chunks()

    return source


CONTENTS = {"models/m/model.safetensors": b"w" * 5000, "models/m/config.json": b'{"a": 1}',
            "data/tokenized/part-0.arrow": b"t" * 300}


def _seed_like():
    return [_artefact("weights", {"models/m/model.safetensors": CONTENTS[
                "models/m/model.safetensors"]}),
            _artefact("config", {"models/m/config.json": CONTENTS["models/m/config.json"]}),
            _artefact("tokenized", {"data/tokenized/part-0.arrow": CONTENTS[
                "data/tokenized/part-0.arrow"]})]


# -- on a local disk ---------------------------------------------------------------------


def test_every_file_lands_under_its_final_name_whole_and_verified(tmp_path):
    report = transfer_all(tmp_path, _seed_like(), _bytes_source(CONTENTS))
    assert report.ok, report
    for path, data in CONTENTS.items():
        assert (tmp_path / path).read_bytes() == data
    leftovers = [p.name for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []


def test_the_config_needs_no_other_transfer_to_have_made_its_directory(tmp_path):
    # The seed's race, decided against the weights: the config alone.
    report = transfer_all(tmp_path, _seed_like()[1:2], _bytes_source(CONTENTS))
    assert report.ok
    assert (tmp_path / "models/m/config.json").read_bytes() == CONTENTS["models/m/config.json"]


def test_verify_reads_the_bytes_and_names_missing_short_and_altered_files(tmp_path):
    artefacts = _seed_like()
    transfer_all(tmp_path, artefacts, _bytes_source(CONTENTS))
    (tmp_path / "models/m/config.json").unlink()
    (tmp_path / "models/m/model.safetensors").write_bytes(b"w" * 4999)
    (tmp_path / "data/tokenized/part-0.arrow").write_bytes(b"T" + b"t" * 299)
    problems = {m.path: m.problem for m in verify(tmp_path, artefacts)}
    assert problems["models/m/config.json"] == "missing"
    assert problems["models/m/model.safetensors"] == "4999 bytes, the manifest says 5000"
    assert problems["data/tokenized/part-0.arrow"].startswith(
        f"blake3 {blake3.blake3(b'T' + b't' * 299).hexdigest()}, the manifest says")


def test_verification_reads_through_open_not_blake3s_own_file_io(tmp_path, monkeypatch):
    # blake3's update_mmap/from-file paths are native I/O a simulation cannot see.
    def refuse(*args, **kwargs):
        raise AssertionError("blake3 file I/O used")

    monkeypatch.setattr(blake3.blake3, "update_mmap", refuse, raising=False)
    report = transfer_all(tmp_path, _seed_like(), _bytes_source(CONTENTS))
    assert report.ok and report.mismatches == []


def test_a_truncated_stream_is_retried_and_never_appears_under_the_final_name(tmp_path):
    artefact = _artefact("config", {"c/config.json": b"0123456789"})
    slept = []
    with pytest.raises(TransferFailed) as raised:
        transfer_file(tmp_path, artefact, artefact.files[0],
                      lambda a, e: iter([b"01234"]), retry=Retry((0.5, 1.0)),
                      sleep=slept.append)
    assert raised.value.attempts == 3 and slept == [0.5, 1.0]
    assert "artefact 'config': c/config.json not transferred after 3 attempt(s)" in str(
        raised.value)
    assert "received 5 bytes" in str(raised.value)
    assert os.listdir(tmp_path / "c") == []  # no final name, no temp left behind


def test_a_link_that_drops_once_is_retried_after_the_first_wait(tmp_path):
    artefact = _artefact("weights", {"w/model.safetensors": b"abc" * 100})
    attempts = []

    def flaky(a, e):
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")
        return iter([b"abc" * 100])

    slept = []
    report = transfer_file(tmp_path, artefact, artefact.files[0], flaky, sleep=slept.append)
    assert (report.attempts, slept) == (2, [1.0])
    assert report.errors == ["ECONNRESET"]
    assert (tmp_path / "w/model.safetensors").read_bytes() == b"abc" * 100


def test_an_error_no_retry_cures_fails_at_once_naming_it(tmp_path):
    (tmp_path / "models").write_text("a file where a directory should be")
    artefact = _artefact("config", {"models/m/config.json": b"{}"})
    slept = []
    with pytest.raises(TransferFailed) as raised:
        transfer_file(tmp_path, artefact, artefact.files[0], lambda a, e: iter([b"{}"]),
                      sleep=slept.append)
    assert raised.value.attempts == 1 and slept == []
    assert raised.value.errors[0].startswith(("EEXIST", "ENOTDIR"))


def test_an_artefact_starts_only_after_those_it_depends_on_are_done(tmp_path):
    artefacts = [_artefact("config", {"m/config.json": b"{}"}, depends_on=["weights"]),
                 _artefact("weights", {"m/model.safetensors": b"w" * 10})]
    calls = []
    report = transfer_all(tmp_path, artefacts, _bytes_source(
        {"m/config.json": b"{}", "m/model.safetensors": b"w" * 10}, calls))
    assert report.ok
    assert [name for name, _ in calls] == ["weights", "config"]
    assert [a.name for a in report.artefacts] == ["config", "weights"]  # the caller's order


def test_a_failed_dependency_skips_its_dependents_and_theirs(tmp_path):
    artefacts = [_artefact("weights", {"m/model.safetensors": b"w" * 10}),
                 _artefact("config", {"m/config.json": b"{}"}, depends_on=["weights"]),
                 _artefact("marker", {"m/.ready": b""}, depends_on=["config"]),
                 _artefact("data", {"d/x": b"x"})]
    contents = {"m/model.safetensors": b"short", "m/config.json": b"{}", "m/.ready": b"",
                "d/x": b"x"}
    report = transfer_all(tmp_path, artefacts, _bytes_source(contents),
                          retry=Retry(()), sleep=lambda s: None)
    status = {a.name: (a.status, a.error) for a in report.artefacts}
    assert status["weights"][0] == "failed"
    assert status["config"] == ("skipped", "not started: dependency 'weights' failed")
    assert status["marker"] == ("skipped", "not started: dependency 'config' skipped")
    assert status["data"] == ("done", None)
    assert not report.ok
    assert not (tmp_path / "m/config.json").exists()


@pytest.mark.parametrize(("artefacts", "message"), [
    ([Artefact("a", ()), Artefact("a", ())], "artefact name 'a' appears twice"),
    ([Artefact("a", (), ("b",))], "artefact 'a' depends on 'b', which is not being"),
    ([Artefact("a", (), ("b",)), Artefact("b", (), ("a",))], "dependency cycle: a -> b -> a"),
    ([Artefact("a", (FileEntry.of("x/y", b""),)), Artefact("b", (FileEntry.of("x/y", b""),))],
     "x/y is a file of both 'a' and 'b'"),
])
def test_a_plan_that_cannot_be_carried_out_is_refused_naming_the_problem(artefacts, message):
    with pytest.raises(PlanError, match=message):
        check_plan(artefacts)


@pytest.mark.parametrize(("path", "size", "digest", "message"), [
    ("/etc/passwd", 1, "0" * 64, "must be a relative path"),
    ("../up", 1, "0" * 64, "must be a relative path"),
    ("ok", -1, "0" * 64, "size must be >= 0"),
    ("ok", 1, "XYZ", "blake3 must be 64 lowercase hex digits"),
])
def test_a_bad_manifest_entry_is_refused_naming_the_field(path, size, digest, message):
    with pytest.raises(PlanError, match=message):
        FileEntry(path, size, digest)


def test_bad_retry_and_parallelism_settings_are_refused(tmp_path):
    with pytest.raises(ValueError, match="retry waits must be >= 0 seconds"):
        Retry((1.0, -1.0))
    with pytest.raises(ValueError, match="max_parallel must be >= 1, not 0"):
        transfer_all(tmp_path, [], _bytes_source({}), max_parallel=0)


# -- under simulated NFS ------------------------------------------------------------------


def _two_hosts(**kwargs):
    world = World(**kwargs)
    world.server.mkdir("/shared/dflash")
    world.server.mkdir("/shared/dflash/models")
    return world, world.host("a"), world.host("b")


def _look_up_then_wait(path, at):
    """b looks the directory up while it is missing, then acts at ``at``."""
    assert not os.path.exists(path)
    time.sleep(at - time.monotonic())


def _plain_write(path, data):
    try:
        with open(path, "wb") as handle:
            handle.write(data)
    except OSError as error:
        return errno.errorcode[error.errno]
    return "ok"


def test_a_stale_negative_entry_for_the_parent_fails_a_plain_write_but_not_the_transfer():
    world, a, b = _two_hosts()
    directory = "/shared/dflash/models/m"
    artefact = _artefact("config", {"models/m/config.json": b'{"a": 1}'})

    def host_b():
        _look_up_then_wait(directory, 5.0)  # a makes it at 1 s; b acts 4 s later
        plain = _plain_write(f"{directory}/config.json", b'{"a": 1}')
        report = transfer_file("/shared/dflash", artefact, artefact.files[0],
                               lambda art, e: iter([b'{"a": 1}']))
        return plain, report.attempts

    def host_a():
        time.sleep(1.0)
        os.mkdir(directory)

    world.spawn(a, host_a)
    outcome = world.spawn(b, host_b)
    world.run()
    # The plain write: ENOENT from b's cache, within acdirmin
    # (docs/nfs-facts.md, "Attribute and dentry caches").
    assert outcome.result() == ("ENOENT", 1)
    assert world.server.read_bytes(f"{directory}/config.json") == b'{"a": 1}'


def _poll_final_name(path, until):
    sizes = []
    while time.monotonic() < until:
        revalidate(path)  # see the name as soon as the server has it
        try:
            with open(path, "rb") as handle:
                sizes.append(len(handle.read()))
        except FileNotFoundError:
            pass
        time.sleep(0.5)
    return sizes


def test_another_host_never_sees_a_torn_file_under_the_final_name():
    world, a, b = _two_hosts()
    data = b"w" * 4000
    artefact = _artefact("weights", {"models/w/model.safetensors": data})
    world.spawn(a, transfer_all, "/shared/dflash", [artefact],
                _bytes_source({"models/w/model.safetensors": data}, delay=3.0))
    seen = world.spawn(b, _poll_final_name, "/shared/dflash/models/w/model.safetensors", 10.0)
    world.run()
    sizes = seen.result()
    assert sizes and set(sizes) == {4000}  # absent, then whole


def test_a_plain_in_place_write_is_seen_torn_from_another_host():
    # The contrast that makes the test above able to fail.
    world, a, b = _two_hosts()

    def in_place(path):
        os.makedirs(os.path.dirname(path))
        with open(path, "wb") as handle:
            handle.write(b"w" * 2000)
            time.sleep(3.0)
            handle.write(b"w" * 2000)

    world.spawn(a, in_place, "/shared/dflash/models/w/model.safetensors")
    seen = world.spawn(b, _poll_final_name, "/shared/dflash/models/w/model.safetensors", 10.0)
    world.run()
    assert min(seen.result()) < 4000 and max(seen.result()) == 4000


def test_an_estale_on_the_first_write_is_retried_and_the_file_lands():
    plan = FaultPlan(rules=(FaultRule("open", path="/shared/dflash/models/m/.config.json.*",
                                      errno=errno.ESTALE, nth=1),))
    world, a, _ = _two_hosts(faults=plan)
    artefact = _artefact("config", {"models/m/config.json": b"{}"})
    done = world.spawn(a, transfer_file, "/shared/dflash", artefact, artefact.files[0],
                       lambda art, e: iter([b"{}"]))
    world.run()
    assert (done.result().attempts, done.result().errors[0][:6]) == (2, "ESTALE")
    assert world.now == pytest.approx(1.0)  # the first wait of Retry()
    assert world.server.read_bytes("/shared/dflash/models/m/config.json") == b"{}"


def test_verify_on_another_host_sees_files_its_cache_believed_absent():
    world, a, b = _two_hosts()
    artefacts = _seed_like()

    def consumer():
        missing = verify("/shared/dflash", artefacts)  # caches negative entries
        time.sleep(5.0)
        return [m.problem for m in missing], verify("/shared/dflash", artefacts)

    def producer():
        time.sleep(1.0)
        return transfer_all("/shared/dflash", artefacts, _bytes_source(CONTENTS)).ok

    made = world.spawn(a, producer)
    checked = world.spawn(b, consumer)
    world.run()
    before, after = checked.result()
    assert made.result() and before == ["missing"] * 3 and after == []


def test_artefacts_without_dependencies_run_at_once_so_the_time_is_the_longest_not_the_sum():
    world, a, _ = _two_hosts()
    artefacts = _seed_like()
    world.spawn(a, transfer_all, "/shared/dflash", artefacts,
                _bytes_source(CONTENTS, delay=2.0))
    world.run()
    # Three artefacts of 2 x 2 s, in parallel (in turn: 12 s), plus the
    # microseconds their bytes take on the default 10 Gbit/s link.
    assert world.now == pytest.approx(4.0, abs=1e-3)



def test_revalidating_every_ancestor_finds_a_file_whose_grandparent_was_cached_absent():
    # b looked up data/tokenized/x before data existed: a negative entry for
    # data in dflash.  reference.fs.revalidate opens two levels (tokenized,
    # data), both from that entry; revalidate_ancestors goes up to dflash.
    from reference.fs import revalidate_ancestors

    world, a, b = _two_hosts()
    path = "/shared/dflash/data/tokenized/x"

    def look(check):
        assert not os.path.exists(path)
        time.sleep(2.0)
        check(path)
        return os.path.exists(path)

    def make():
        time.sleep(1.0)
        os.makedirs(os.path.dirname(path))
        open(path, "wb").close()

    world.spawn(a, make)
    two_levels = world.spawn(b, look, revalidate)
    world.run()
    world, a, b = _two_hosts()
    world.spawn(a, make)
    every_level = world.spawn(b, look, revalidate_ancestors)
    world.run()
    assert (two_levels.result(), every_level.result()) == (False, True)


def test_a_source_that_raises_something_else_fails_loudly_in_the_caller(tmp_path):
    def broken(artefact, entry):
        raise ValueError("a bug in the link code")

    with pytest.raises(ValueError, match="a bug in the link code"):
        transfer_all(tmp_path, _seed_like(), broken)
