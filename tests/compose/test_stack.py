"""The compose stack's sequencing, readiness waits and teardown, on a fake SDK client."""

from __future__ import annotations

from pathlib import Path

import pytest

from scenarios._compose_stack import LABEL, ComposeError, ComposeStack, StackConfig

from .fake_docker import FakeClock, FakeEngine, FakeNetwork, FakeNotFound, Script, client_script

HOSTS = {"trainer": "vers=3", "consumer": "vers=3,acdirmin=3,acdirmax=3"}


def make_stack(engine: FakeEngine, **settings: object) -> ComposeStack:
    config = StackConfig(**{"ready_timeout": 30.0, **settings})
    return ComposeStack(engine.client(), config, not_found=(FakeNotFound,),
                        clock=engine.clock, sleep=engine.clock.sleep)


def started(engine: FakeEngine) -> list[str]:
    return [call[1] for call in engine.calls if call[0] == "run"]


def test_up_starts_the_server_then_one_client_per_host_and_returns_their_agents() -> None:
    engine = FakeEngine()
    agents = make_stack(engine).up(HOSTS)
    assert started(engine) == ["simfs-nfs-server", "simfs-host-trainer", "simfs-host-consumer"]
    assert agents == {"trainer": "127.0.0.1:7700", "consumer": "127.0.0.1:7701"}
    assert ("create-volume", "simfs-nfs-export") in engine.calls


def test_every_container_is_privileged_on_the_host_network_and_labelled() -> None:
    # knfsd and the NFS client belong to the host kernel, and NFSv3 locks need
    # lockd and statd reachable on rpcbind's ports (compose/README.md).
    engine = FakeEngine()
    make_stack(engine).up(HOSTS)
    for container in engine.containers:
        assert container.kwargs["network_mode"] == "host"
        assert container.kwargs["privileged"] is True
        assert container.labels == {LABEL: "simfs"}


def test_each_client_mounts_with_its_hosts_options_plus_nosharecache() -> None:
    # Two clients on one kernel share one superblock, so one cache, unless
    # each mount says nosharecache (nfs(5); docs/design.md, "Real NFS").
    engine = FakeEngine()
    make_stack(engine).up(HOSTS)
    environments = {c.name: c.kwargs["environment"] for c in engine.containers}
    consumer = environments["simfs-host-consumer"]
    assert consumer["NFS_OPTIONS"] == "vers=3,acdirmin=3,acdirmax=3,nosharecache"
    assert consumer["ROLE"] == "agent"
    assert consumer["AGENT_PORT"] == "7701"
    assert consumer["NFS_SERVER"] == "127.0.0.1"
    assert environments["simfs-host-trainer"]["NFS_OPTIONS"] == "vers=3,nosharecache"


def test_clients_run_the_repositorys_client_script_from_a_read_only_mount(
        tmp_path: Path) -> None:
    engine = FakeEngine()
    make_stack(engine, source=str(tmp_path)).up({"trainer": "vers=3"})
    client = engine.containers[-1]
    assert client.kwargs["command"] == ["/src/compose/nfs_client.sh"]
    assert client.kwargs["volumes"] == {str(tmp_path): {"bind": "/src", "mode": "ro"}}


def test_with_an_external_server_no_server_container_or_volume_is_made() -> None:
    engine = FakeEngine()
    agents = make_stack(engine, nfs_server="10.0.0.5", nfs_export="/srv/nfs").up(HOSTS)
    assert started(engine) == ["simfs-host-trainer", "simfs-host-consumer"]
    assert not engine.volumes
    assert {c.kwargs["environment"]["NFS_SERVER"] for c in engine.containers} == {"10.0.0.5"}
    assert {c.kwargs["environment"]["NFS_EXPORT"] for c in engine.containers} == {"/srv/nfs"}
    assert ("image-get", "erichough/nfs-server:2.2.1") not in engine.calls
    assert set(agents) == set(HOSTS)


def test_up_waits_for_every_mount_and_agent_polling_the_logs() -> None:
    engine = FakeEngine()
    engine.scripts["simfs-host-consumer"] = client_script("consumer", mount_at=9.0,
                                                          listen_at=12.0)
    make_stack(engine).up(HOSTS)
    # The consumer's agent listens 12 s after it starts: the stack waited that
    # long (1 s polls) and no longer.
    assert engine.clock.now == 12.0


def test_a_mount_that_never_comes_fails_naming_the_host_and_removes_everything() -> None:
    engine = FakeEngine()
    engine.scripts["simfs-host-consumer"] = Script([(0.0, "mount.nfs: Connection timed out")])
    stack = make_stack(engine)
    with pytest.raises(ComposeError, match="step 'mount-host-consumer'") as raised:
        stack.up(HOSTS)
    message = str(raised.value)
    assert "within 30 s" in message
    assert "mount.nfs: Connection timed out" in message  # the container's last lines
    assert "server container simfs-nfs-server is running" in message
    assert engine.left() == []


def test_a_client_that_exits_before_mounting_fails_at_once_with_its_log() -> None:
    engine = FakeEngine()
    engine.scripts["simfs-host-trainer"] = Script(
        [(0.0, "simfs-client trainer: cannot mount 127.0.0.1:/export after 60 tries")],
        exit_at=5.0)
    with pytest.raises(ComposeError, match=r"step 'mount-host-trainer'.*exited") as raised:
        make_stack(engine).up(HOSTS)
    assert "cannot mount 127.0.0.1:/export" in str(raised.value)
    assert engine.clock.now == 5.0  # not the whole 30 s timeout
    assert engine.left() == []


def test_an_agent_that_never_listens_fails_naming_the_agent_step() -> None:
    engine = FakeEngine()
    engine.scripts["simfs-host-trainer"] = Script(
        [(1.0, "simfs-client trainer: mounted 127.0.0.1:/export at /mnt/nfs"),
         (2.0, "ModuleNotFoundError: No module named 'trio'")], exit_at=3.0)
    with pytest.raises(ComposeError, match="step 'agent-host-trainer'") as raised:
        make_stack(engine).up(HOSTS)
    assert "No module named 'trio'" in str(raised.value)
    assert engine.left() == []


def test_with_an_external_server_a_failed_mount_points_at_the_server() -> None:
    engine = FakeEngine()
    engine.scripts["simfs-host-trainer"] = Script(exit_at=1.0)
    with pytest.raises(ComposeError, match=r"server 10\.0\.0\.5:/export: is it up"):
        make_stack(engine, nfs_server="10.0.0.5").up(HOSTS)


def test_a_missing_image_without_a_registry_fails_before_starting_anything() -> None:
    engine = FakeEngine()
    engine.images.discard("python:3.11-slim-bookworm")
    with pytest.raises(ComposeError, match=r"step .image python:3\.11-slim-bookworm.") as raised:
        make_stack(engine).up(HOSTS)
    assert "no such host" in str(raised.value)  # the pull's own error
    assert "NFS_CLIENT_IMAGE" in str(raised.value)
    assert started(engine) == []


def test_a_missing_image_is_pulled_when_a_registry_answers() -> None:
    engine = FakeEngine()
    engine.images.discard("erichough/nfs-server:2.2.1")
    engine.registry = True
    make_stack(engine).up(HOSTS)
    assert ("image-pull", "erichough/nfs-server:2.2.1") in engine.calls


def test_a_container_the_engine_refuses_fails_naming_it_and_the_others_go() -> None:
    engine = FakeEngine()
    engine.refuse.add("simfs-host-consumer")
    with pytest.raises(ComposeError, match=r"step 'start-host-consumer'.*simfs-host-consumer"):
        make_stack(engine).up(HOSTS)
    assert engine.left() == []
    assert ("remove-container", "simfs-host-trainer") in engine.calls


def test_ctrl_c_while_waiting_for_a_mount_still_tears_everything_down() -> None:
    engine = FakeEngine()
    engine.scripts["simfs-host-trainer"] = Script()

    def interrupted(seconds: float) -> None:
        raise KeyboardInterrupt

    stack = ComposeStack(engine.client(), StackConfig(), not_found=(FakeNotFound,),
                         clock=engine.clock, sleep=interrupted)
    with pytest.raises(KeyboardInterrupt):
        stack.up(HOSTS)
    assert engine.left() == []


def test_up_first_removes_what_a_killed_run_of_the_same_project_left() -> None:
    engine = FakeEngine()
    make_stack(engine).up(HOSTS)
    stale = list(engine.containers)
    make_stack(engine).up(HOSTS)  # as if the first run had been killed
    assert all(container.removed for container in stale)
    assert len(engine.left()) == 4  # server, two clients, the volume


def test_down_leaves_other_projects_alone() -> None:
    engine = FakeEngine()
    make_stack(engine, project="other").up(HOSTS)
    make_stack(engine).down()
    assert sorted(engine.left()) == ["other-host-consumer", "other-host-trainer",
                                     "other-nfs-export", "other-nfs-server"]


def test_down_unmounts_each_client_lazily_and_removes_clients_before_the_server() -> None:
    engine = FakeEngine()
    stack = make_stack(engine)
    stack.up(HOSTS)
    engine.networks.append(FakeNetwork(engine, "simfs-default", {LABEL: "simfs"}))
    engine.calls.clear()
    assert stack.down() == []
    teardown = [call for call in engine.calls if call[0] in ("exec", "remove-container",
                                                             "remove-volume", "remove-network")]
    assert teardown == [
        ("exec", "simfs-host-trainer", ("umount", "-l", "/mnt/nfs")),
        ("remove-container", "simfs-host-trainer"),
        ("exec", "simfs-host-consumer", ("umount", "-l", "/mnt/nfs")),
        ("remove-container", "simfs-host-consumer"),
        ("remove-container", "simfs-nfs-server"),
        ("remove-volume", "simfs-nfs-export"),
        ("remove-network", "simfs-default"),
    ]
    assert engine.left() == []


def test_down_goes_on_past_a_removal_that_fails_and_reports_it() -> None:
    engine = FakeEngine()
    stack = make_stack(engine)
    stack.up(HOSTS)
    engine.fail_remove = "simfs-host-trainer"
    problems = stack.down()
    assert problems == ["container simfs-host-trainer: cannot remove simfs-host-trainer: "
                        "device or resource busy"]
    assert engine.left() == ["simfs-host-trainer"]


def test_ctrl_c_during_down_finishes_the_teardown_then_stops() -> None:
    engine = FakeEngine()
    stack = make_stack(engine)
    stack.up(HOSTS)
    engine.interrupt_remove = "simfs-host-trainer"
    with pytest.raises(KeyboardInterrupt):
        stack.down()
    assert engine.left() == ["simfs-host-trainer"]


def test_down_keeps_every_containers_log_when_asked(tmp_path: Path) -> None:
    engine = FakeEngine()
    stack = make_stack(engine, log_dir=str(tmp_path / "logs"))
    stack.up(HOSTS)
    stack.down()
    log = (tmp_path / "logs" / "simfs-host-consumer.log").read_text()
    assert "simfs-client consumer: mounted" in log
    assert (tmp_path / "logs" / "simfs-nfs-server.log").exists()


def test_up_and_down_record_how_long_they_took() -> None:
    engine = FakeEngine(FakeClock())
    stack = make_stack(engine)
    stack.up(HOSTS)
    stack.down()
    assert stack.timings == {"up_s": 3.0, "down_s": 0.0}
