"""reference.cas: a CAS root shared by many writers, each rule against its failure.

Facts: seed 004 (fixed temp names collide, size-only reuse serves another
pod's bytes, crashed writers' temps stay forever); docs/design.md, "The NFS
model", and docs/nfs-facts.md (negative entries trusted for acdirmin, silly
rename of a file open on the same host, ESTALE on another host, unflushed
writes reaching the server late); open(2) on NFS (link then check the link
count).
"""

import json
import os
import struct
import time
from pathlib import Path

import blake3
import pytest
import safetensors

from reference import _cas_verify as verify
from reference.cas import CasError, CasStore, CorruptDownload, Entry, Manifest, manifest_for, serve
from reference.fs import SILLY_NAME
from simfs import FaultPlan, HostCrash, World


def _safetensors(count=8, fill=1):
    header = json.dumps({"w": {"dtype": "F32", "shape": [count],
                               "data_offsets": [0, 4 * count]}}).encode()
    return struct.pack("<Q", len(header)) + header + bytes([fill]) * (4 * count)


FILES = {"model.safetensors": _safetensors(), "config.json": b'{"layers": 2}'}
MANIFEST = manifest_for("rev-1", FILES)
WEIGHTS = next(entry for entry in MANIFEST.entries if entry.structural)


def _slow(files, chunk=16, chunk_s=0.1):
    def fetch(entry):
        data = files[entry.path]
        for start in range(0, len(data), chunk):
            time.sleep(chunk_s)
            yield data[start:start + chunk]
    return fetch


def _hash(path):
    with open(path, "rb") as handle:
        return blake3.blake3(handle.read()).hexdigest()


def _world(**kwargs):
    world = World(**kwargs)
    return world, world.host("a"), world.host("b")


# -- publishing: writer-unique temps, link() keeps the winner ---------------------------------


def _ensure_blob(root, entry, chunk_s, start_s=0.0):
    store = CasStore(root)
    time.sleep(start_s)
    path = store.ensure_blob(entry, _slow(FILES, chunk_s=chunk_s))
    return os.stat(path).st_ino, store.stats


def test_two_hosts_racing_on_one_digest_publish_one_blob_and_the_slower_keeps_the_winners():
    world, a, b = _world(seed=3)
    fast = world.spawn(a, _ensure_blob, "/shared/cas", WEIGHTS, 0.05)
    slow = world.spawn(b, _ensure_blob, "/shared/cas", WEIGHTS, 0.1)
    world.run()
    (fast_inode, fast_stats), (slow_inode, slow_stats) = fast.result(), slow.result()
    assert fast_inode == slow_inode  # both name the winner's inode: never clobbered
    assert (fast_stats.lost_races, slow_stats.lost_races) == (0, 1)
    # The loser hashed its own stream once and the winner's bytes once.
    assert slow_stats.download_passes[WEIGHTS.digest] == 1
    assert slow_stats.verify_passes[WEIGHTS.digest] == 1
    assert world.server.listdir("/shared/cas/blobs") == [WEIGHTS.digest]


def _probe_then_ensure(root, entry, probe_at, ensure_at):
    store = CasStore(root)
    time.sleep(probe_at)
    seen_before = os.path.exists(store.blob_path(entry.digest))
    time.sleep(ensure_at - probe_at)
    seen_then = os.path.exists(store.blob_path(entry.digest))
    store.ensure_blob(entry, serve(FILES))
    return seen_before, seen_then, store.stats


def test_a_stale_negative_entry_sends_a_second_download_whose_link_fails_eexist_on_the_server():
    # docs/nfs-facts.md, "Attribute and dentry caches": host b's "absent" for
    # blobs/<digest> is trusted for acdirmin (30 s) after its lookup; the LINK
    # goes to the server anyway.
    world, a, b = _world(seed=1)
    world.spawn(a, _ensure_blob, "/shared/cas", WEIGHTS, 0.01, 1.0)
    probe = world.spawn(b, _probe_then_ensure, "/shared/cas", WEIGHTS, 0.5, 10.0)
    world.run()
    seen_before, seen_then, stats = probe.result()
    assert (seen_before, seen_then) == (False, False)  # stale: a published it at ~1.5 s
    assert stats.downloads == 1 and stats.lost_races == 1
    assert world.server.listdir("/shared/cas/blobs") == [WEIGHTS.digest]


def _hold_blob_open_while(root, entry, seconds):
    store = CasStore(root)
    path = store.ensure_blob(entry, serve(FILES))
    with open(path, "rb") as handle:
        time.sleep(seconds)
        return blake3.blake3(handle.read()).hexdigest()


def test_publishing_beside_a_reader_on_the_same_host_leaves_no_silly_rename():
    # os.replace over a blob open on this host would leave .nfsXXXX
    # (docs/nfs-facts.md, "Silly rename"); link() never touches the winner.
    world, a, _ = _world(seed=2)
    reader = world.spawn(a, _hold_blob_open_while, "/shared/cas", WEIGHTS, 5.0)
    world.spawn(a, _probe_then_ensure, "/shared/cas", WEIGHTS, 0.0, 1.0)
    world.run(until=3.0)
    assert not [n for n in world.server.listdir("/shared/cas/blobs") if SILLY_NAME.match(n)]
    world.run()
    assert reader.result() == WEIGHTS.digest


# -- verify once per process; corrupt bytes quarantined and repaired ------------------------


def test_a_reused_blob_is_hashed_once_per_process_and_a_fresh_download_never_again(tmp_path):
    first = CasStore(tmp_path)
    first.ensure_blob(WEIGHTS, serve(FILES))
    first.ensure_blob(WEIGHTS, serve(FILES))
    assert first.stats.download_passes[WEIGHTS.digest] == 1
    assert first.stats.verify_passes[WEIGHTS.digest] == 0
    other_process = CasStore(tmp_path)
    for _ in range(3):
        other_process.ensure_blob(WEIGHTS, serve(FILES))
    assert other_process.stats.verify_passes[WEIGHTS.digest] == 1
    assert other_process.stats.downloads == 0


def test_trust_is_keyed_by_the_resolved_root_so_two_paths_of_one_volume_share_it(tmp_path):
    (tmp_path / "volume").mkdir()
    (tmp_path / "mnt").symlink_to(tmp_path / "volume")
    CasStore(tmp_path / "volume").ensure_blob(WEIGHTS, serve(FILES))
    store = CasStore(tmp_path / "volume")
    store.ensure_blob(WEIGHTS, serve(FILES))
    again = CasStore(tmp_path / "mnt", trust=store.trust)
    again.ensure_blob(WEIGHTS, serve(FILES))
    assert again.stats.verify_passes[WEIGHTS.digest] == 0


def test_a_right_size_corrupt_blob_is_quarantined_and_downloaded_again(tmp_path):
    store = CasStore(tmp_path)
    blob = store.blob_path(WEIGHTS.digest)
    blob.write_bytes(b"\0" * WEIGHTS.size)  # another pod's bytes of any age
    fresh = CasStore(tmp_path)
    assert fresh.ensure_blob(WEIGHTS, serve(FILES)) == blob
    assert _hash(blob) == WEIGHTS.digest
    assert fresh.stats.downloads == 1 and len(fresh.stats.quarantined) == 1
    (moved,) = os.listdir(fresh.quarantine)
    assert (fresh.quarantine / moved).read_bytes() == b"\0" * WEIGHTS.size


def test_a_download_that_hashes_wrong_is_refused_and_leaves_no_temp(tmp_path):
    store = CasStore(tmp_path)
    with pytest.raises(CorruptDownload, match="expected"):
        store.ensure_blob(WEIGHTS, serve({"model.safetensors": b"x" * WEIGHTS.size}))
    assert os.listdir(store.blobs) == []


def _plant(root):
    store = CasStore(root)
    store.ensure_local(MANIFEST, serve(FILES))
    blob = store.blob_path(WEIGHTS.digest)
    with open(blob, "r+b") as handle:
        handle.seek(WEIGHTS.size - 4)
        handle.write(b"\xff\xff\xff\xff")


def _ensure_unseen(root):
    store = CasStore(root)
    snapshot = store.ensure_local(MANIFEST, serve(FILES))
    return (_hash(snapshot / WEIGHTS.path), _hash(store.blob_path(WEIGHTS.digest)),
            store.stats)


def test_the_seeds_test_a_corrupt_blob_linked_into_an_unseen_tree_is_quarantined_and_repaired():
    # Seed 004's test_preseeded_unverified_cas_bytes_are_verified_before_trust.
    world, a, b = _world(seed=4)
    world.spawn(a, _plant, "/shared/cas")
    world.run()
    checker = world.spawn(b, _ensure_unseen, "/shared/cas")
    world.run()
    served, shared_blob, stats = checker.result()
    assert served == WEIGHTS.digest and shared_blob == WEIGHTS.digest
    assert stats.downloads == 1  # only the corrupt file: config.json was verified and kept
    assert [q.split(":")[0] for q in stats.quarantined] == [f"blobs/{WEIGHTS.digest}",
                                                            "snapshots/rev-1"]
    assert max(stats.verify_passes.values()) == 1


def test_a_tree_already_verified_by_this_process_is_not_hashed_again(tmp_path):
    CasStore(tmp_path).ensure_local(MANIFEST, serve(FILES))
    store = CasStore(tmp_path)
    store.ensure_local(MANIFEST, serve(FILES))
    store.ensure_local(MANIFEST, serve(FILES))
    assert dict(store.stats.verify_passes) == {entry.digest: 1 for entry in MANIFEST.entries}


def test_manifest_bytes_that_are_no_safetensors_fail_loudly_instead_of_a_download_loop(
        tmp_path):
    bad = {"model.safetensors": b"\x10" + b"\0" * 7 + b"not json at all!"}
    manifest = manifest_for("rev-bad", bad)
    CasStore(tmp_path).ensure_local(manifest, serve(bad))  # a fresh build is trusted
    with pytest.raises(CasError, match="hashes to its manifest digest but is not valid"):
        CasStore(tmp_path).ensure_local(manifest, serve(bad))


# -- the safetensors structure check ---------------------------------------------------------


def test_a_file_the_safetensors_package_reads_passes_the_structure_check(tmp_path):
    raw = json.dumps({"a": {"dtype": "F16", "shape": [3, 2], "data_offsets": [0, 12]},
                      "b": {"dtype": "I64", "shape": [1], "data_offsets": [12, 20]},
                      "__metadata__": {"format": "pt"}}).encode()
    data = struct.pack("<Q", len(raw)) + raw + b"\1" * 12 + b"\2" * 8
    path = tmp_path / "m.safetensors"
    path.write_bytes(data)
    assert sorted(name for name, _ in safetensors.deserialize(data)) == ["a", "b"]
    assert verify.check_safetensors(path, data) is None
    assert verify.check_safetensors(path, None) is None


@pytest.mark.parametrize(("header", "body", "problem"), [
    ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, 4, "needs 8 bytes"),
    ({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, 8, "a hole or an overlap"),
    ({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, 12, "the file has"),
    ({"w": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}}, 1, "unknown dtype"),
])
def test_a_header_that_does_not_describe_the_bytes_is_rejected(tmp_path, header, body, problem):
    raw = json.dumps(header).encode()
    path = tmp_path / "m.safetensors"
    data = struct.pack("<Q", len(raw)) + raw + b"\0" * body
    path.write_bytes(data)
    assert problem in verify.check_safetensors(path, None)
    with pytest.raises(safetensors.SafetensorError):  # the package agrees it is broken
        safetensors.deserialize(data)


def test_a_header_length_larger_than_the_file_is_refused_before_reading_it(tmp_path):
    path = tmp_path / "m.safetensors"
    path.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    assert "does not fit" in verify.check_safetensors(path, None)


# -- sweeps: by age, never a live writer's temp, never a .nfs entry -------------------------


def _crash_mid_download(root):
    CasStore(root).ensure_blob(WEIGHTS, _slow(FILES, chunk_s=10.0))


def _download_slowly(root, start_s, heartbeat_s):
    time.sleep(start_s)
    store = CasStore(root, heartbeat_s=heartbeat_s, stale_after=max(2 * heartbeat_s, 21600.0))
    other = Entry("config.json", MANIFEST.entries[0].digest, MANIFEST.entries[0].size)
    store.ensure_blob(other, _slow(FILES, chunk=1, chunk_s=2400.0))  # 13 bytes in 8.7 h
    return "done"


def _boot(root, start_s):
    time.sleep(start_s)
    return CasStore(root).sweep_stale_temps()


@pytest.mark.parametrize("heartbeat_s", [60.0, 1e9])
def test_the_boot_sweep_takes_a_crashed_writers_temp_and_a_live_one_only_without_heartbeat(
        heartbeat_s):
    # Unflushed writes do not move the server's mtime (docs/nfs-facts.md,
    # "Writes and data visibility": they land 0.6-31 s late, or at close); the
    # heartbeat fsync is what keeps a long download's temp younger than the 6 h
    # the sweep allows.  The boot runs on a third host: a stat on the writer's
    # own host flushes its dirty pages first (nfs_getattr), which would hide
    # the missing heartbeat.
    world, a, b = _world(seed=5, faults=FaultPlan(crashes=(HostCrash("a", 25.0),)))
    c = world.host("c")
    world.spawn(a, _crash_mid_download, "/shared/cas")
    live = world.spawn(b, _download_slowly, "/shared/cas", 100.0, heartbeat_s)
    boot = world.spawn(c, _boot, "/shared/cas", 21600.0 + 3600.0)
    world.run(check=False)  # without a heartbeat the live writer's temp is swept under it
    swept = boot.result()
    dead = [name for name in swept if ".a." in name]
    assert len(dead) == 1 and dead[0].startswith(f"blobs/.{WEIGHTS.digest}.a.")
    if heartbeat_s == 60.0:
        assert swept == dead and live.result() == "done"
    else:
        assert len(swept) == 2 and isinstance(live.exception(), OSError)


def test_a_young_temp_is_kept_and_an_old_one_swept_by_mtime(tmp_path):
    store = CasStore(tmp_path)
    old = store.blobs / f".{WEIGHTS.digest}.host.12.0123456789ab.tmp"
    young = store.snapshots / ".rev-1.host.13.0123456789ab.building"
    old.write_bytes(b"x")
    young.mkdir()
    now = time.time()
    os.utime(old, (now - 7 * 3600, now - 7 * 3600))
    assert store.sweep_stale_temps(now=now) == [f"blobs/{old.name}"]
    assert young.exists()


def _silly_names(store):
    found = [f"blobs/{n}" for n in os.listdir(store.blobs) if SILLY_NAME.match(n)]
    for directory, _, names in os.walk(store.snapshots):
        found += [f"{directory}/{n}" for n in names if SILLY_NAME.match(n)]
    return found


def _gc_beside_open_reader(root, max_bytes):
    store = CasStore(root)
    old = manifest_for("old", {"w.bin": b"o" * 4000})
    new = manifest_for("new", {"w.bin": b"n" * 4000})
    store.ensure_local(old, serve({"w.bin": b"o" * 4000}))
    time.sleep(7200)
    store.ensure_local(new, serve({"w.bin": b"n" * 4000}))
    with open(store.snapshot_path("old") / "w.bin", "rb") as handle:
        report = store.collect_garbage(max_bytes)
        silly = _silly_names(store)
        orphans = store.sweep_orphan_blobs(min_age=0)
        data = handle.read()
    again = store.collect_garbage(max_bytes)  # removes what the first left
    return (report, silly, orphans, data, sorted(os.listdir(store.blobs)), again,
            _silly_names(store), sorted(os.listdir(store.snapshots)))


def test_gc_evicts_the_lru_snapshot_and_its_open_file_lives_on_as_nfs_until_closed():
    world, a, _ = _world(seed=6)
    gc = world.spawn(a, _gc_beside_open_reader, "/shared/cas", 5000)
    world.run()
    report, silly, orphans, data, blobs, again, silly_after, snapshots = gc.result()
    new_digest = manifest_for("new", {"w.bin": b"n" * 4000}).entries[0].digest
    assert report.evicted == ["old"] and report.bytes_after == 4000
    # docs/nfs-facts.md, "Silly rename": unlinked while open on this host, renamed .nfsXXXX
    assert silly
    assert any("ENOTEMPTY" in error for error in report.errors)  # rmdir beside it
    assert orphans == []  # the orphan sweep leaves .nfs entries alone
    assert data == b"o" * 4000  # the reader still reads the evicted bytes
    assert blobs == [new_digest]
    assert again.errors == [] and silly_after == [] and snapshots == ["new"]


def test_gc_never_evicts_a_snapshot_used_within_the_hour(tmp_path):
    store = CasStore(tmp_path)
    for key in ("one", "two"):
        store.ensure_local(manifest_for(key, {"w.bin": key.encode() * 1000}),
                           serve({"w.bin": key.encode() * 1000}))
    report = store.collect_garbage(1)
    assert report.evicted == [] and report.bytes_after == report.bytes_before == 6000
    later = store.collect_garbage(1, keep=("two",), now=time.time() + 7200)
    assert later.evicted == ["one"] and later.bytes_after == 3000


# -- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"path": "../x", "digest": "0" * 64, "size": 1}, "must be relative"),
    ({"path": ".hidden", "digest": "0" * 64, "size": 1}, "dot names"),
    ({"path": "x", "digest": "ABC", "size": 1}, "64 lowercase hex"),
    ({"path": "x", "digest": "0" * 64, "size": -1}, "size -1"),
])
def test_a_bad_manifest_entry_is_refused_naming_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Entry(**kwargs)


def test_a_heartbeat_no_shorter_than_the_stale_age_is_refused(tmp_path):
    with pytest.raises(ValueError, match="heartbeat_s"):
        CasStore(tmp_path, heartbeat_s=10.0, stale_after=10.0)
    with pytest.raises(ValueError, match="snapshot key"):
        Manifest(".x", ())


def test_a_manifest_survives_its_json(tmp_path):
    assert Manifest.from_json(MANIFEST.to_json()) == MANIFEST
    assert Path(CasStore(tmp_path).ensure_local(MANIFEST, serve(FILES)),
                ".manifest.json").read_text() == MANIFEST.to_json()
