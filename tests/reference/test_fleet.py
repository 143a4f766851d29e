"""The shard ledger's state machine and the refit controller (seed 001).

The controller tests run under plain trio with an autojumping MockClock and
a scripted communicator that lands a reload at a chosen await: the windows
of seed 001 (W1 before the membership read, W2 during the rebuild, W3
during the transfer).
"""

from collections.abc import Callable

import pytest
import trio
import trio.testing

from reference.fleet import (
    IllegalTransition,
    Membership,
    RefitController,
    RefitFailed,
    ShardLedger,
    ShardState,
    TransferFailed,
    UnknownShard,
)

H, SU, D, R, ST, RET = (ShardState.HEALTHY, ShardState.SUSPECT, ShardState.DEAD,
                        ShardState.RESTARTING, ShardState.STALE, ShardState.RETIRED)
CHECKPOINT = 0  # the version a restarted engine reads off disk


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def ledger(shards=4, clock=None, suspect_timeout=30.0):
    return ShardLedger(range(shards), clock=clock or FakeClock(),
                       suspect_timeout=suspect_timeout)


def restarted(fleet, shard, *, loaded=True):
    """Take ``shard`` through an exit and a restart; STALE if ``loaded``."""
    fleet.mark_dead(shard)
    fleet.mark_restarting(shard)
    if loaded:
        fleet.mark_loaded(shard, CHECKPOINT)


def in_state(state):
    """A fresh ledger whose shard 0 is in ``state``."""
    fleet = ledger()
    if state is SU:
        fleet.record_probe(0, ok=False)
    elif state is D:
        fleet.mark_dead(0)
    elif state is R:
        restarted(fleet, 0, loaded=False)
    elif state is ST:
        restarted(fleet, 0)
    elif state is RET:
        fleet.retire(0)
    assert fleet.state(0) is state
    return fleet


# -- the state machine ------------------------------------------------------------


def test_every_shard_starts_healthy_and_a_member():
    fleet = ledger(3)
    assert fleet.states() == {0: H, 1: H, 2: H}
    assert fleet.membership() == Membership(0, frozenset({0, 1, 2}))


def test_a_failed_probe_makes_a_healthy_shard_suspect_but_still_a_serving_member():
    fleet = ledger()
    assert fleet.record_probe(1, ok=False) is SU
    assert 1 in fleet.membership().members
    assert fleet.as_metrics()["fleet/shard_1/serving"] == 1


def test_a_suspect_shard_dies_only_once_its_probes_have_failed_for_suspect_timeout():
    clock = FakeClock()
    fleet = ledger(clock=clock, suspect_timeout=30.0)
    fleet.record_probe(0, ok=False)
    clock.now += 29.9
    assert fleet.record_probe(0, ok=False) is SU
    clock.now += 0.1
    assert fleet.record_probe(0, ok=False) is D


def test_an_answered_probe_clears_suspect_and_restarts_the_suspect_timeout():
    clock = FakeClock()
    fleet = ledger(clock=clock, suspect_timeout=30.0)
    fleet.record_probe(0, ok=False)
    clock.now += 20
    assert fleet.record_probe(0, ok=True) is H
    fleet.record_probe(0, ok=False)
    clock.now += 20
    assert fleet.record_probe(0, ok=False) is SU  # 20 s, not 40 s, of failures


@pytest.mark.parametrize("state", [D, R, ST, RET])
def test_probes_never_resurrect_a_dead_restarting_stale_or_retired_shard(state):
    # Seed 001: a restarted engine answers probes long before it holds the
    # trainer's weights; only a refit may make it HEALTHY.
    fleet = in_state(state)
    for ok in (True, False, True):
        assert fleet.record_probe(0, ok=ok) is state
    assert fleet.state(0) is state


def test_a_restart_goes_dead_restarting_stale_and_the_reload_sets_the_disk_version():
    fleet = ledger()
    fleet.record_transfer([0, 1, 2, 3], 7)
    fleet.mark_dead(2)
    assert fleet.weight_version(2) is None
    fleet.mark_restarting(2)
    fleet.mark_loaded(2, 3)
    assert fleet.state(2) is ST
    assert fleet.weight_version(2) == 3
    assert [(t.old, t.new) for t in fleet.history] == [(H, D), (D, R), (R, ST)]


@pytest.mark.parametrize("state, move, target", [
    (H, lambda f: f.mark_restarting(0), R),
    (H, lambda f: f.mark_loaded(0, 1), ST),
    (D, lambda f: f.mark_loaded(0, 1), ST),
    (D, lambda f: f.mark_dead(0), D),
    (ST, lambda f: f.mark_restarting(0), R),
    (RET, lambda f: f.mark_dead(0), D),
    (RET, lambda f: f.mark_restarting(0), R),
    (RET, lambda f: f.retire(0), RET),
])
def test_a_transition_the_machine_lacks_is_refused_naming_the_shard_and_both_states(
        state, move: Callable[[ShardLedger], None], target):
    fleet = in_state(state)
    with pytest.raises(IllegalTransition) as raised:
        move(fleet)
    assert (raised.value.shard, raised.value.state, raised.value.target) == (0, state, target)
    assert f"shard 0 is {state.name}" in str(raised.value) and target.name in str(raised.value)
    assert isinstance(raised.value, ValueError)
    assert fleet.state(0) is state


def test_retired_is_terminal_and_leaves_the_membership():
    fleet = ledger()
    fleet.retire(1)
    fleet.record_probe(1, ok=True)
    assert fleet.promote([1]) == frozenset()
    assert fleet.state(1) is RET and 1 not in fleet.membership().members


def test_an_unknown_shard_is_a_lookup_error_that_lists_the_shards():
    with pytest.raises(UnknownShard, match=r"no shard 9 in the ledger; shards: \[0, 1\]"):
        ledger(2).mark_dead(9)
    with pytest.raises(LookupError):
        ledger(2).weight_version(9)


def test_the_membership_epoch_moves_only_when_the_member_set_changes():
    fleet = ledger()
    fleet.record_probe(0, ok=False)  # HEALTHY -> SUSPECT: still a member
    assert fleet.epoch == 0
    fleet.mark_dead(1)
    assert fleet.epoch == 1
    fleet.mark_restarting(1)  # absent -> absent
    assert fleet.epoch == 1
    fleet.mark_loaded(1, CHECKPOINT)  # STALE is not absent: it joins the next transfer
    assert fleet.epoch == 2 and 1 in fleet.membership().members
    fleet.promote([1])  # member -> member
    assert fleet.membership().epoch == 2


def test_promotion_moves_only_the_stale_shards_among_the_participants():
    fleet = ledger()
    restarted(fleet, 1)
    restarted(fleet, 2)
    restarted(fleet, 3, loaded=False)
    assert fleet.promote([0, 1, 3]) == frozenset({1})
    assert fleet.states() == {0: H, 1: H, 2: ST, 3: R}


def test_the_weight_version_is_written_by_the_transfer_and_never_by_the_promotion():
    # Seed 001: report_refit, called only by the promotion, was the metric's
    # only writer; a never-restarted shard read 0 and the shard that got
    # nothing read current.
    fleet = ledger()
    restarted(fleet, 2)
    fleet.record_transfer([0, 1, 3], 5)  # shard 2 was not in the group
    fleet.promote([0, 1, 2, 3])  # a careless caller promotes it anyway
    assert fleet.weight_version(0) == 5  # never restarted, reads what it received
    assert fleet.weight_version(2) == CHECKPOINT  # got nothing, reads the disk checkpoint
    assert fleet.serving_behind(5) == frozenset({2})
    assert fleet.as_metrics()["fleet/shard_2/weight_version"] == CHECKPOINT


def test_a_transfer_to_a_shard_whose_process_exited_since_records_nothing():
    fleet = ledger()
    fleet.mark_dead(3)
    fleet.record_transfer([0, 1, 2, 3], 4)
    assert fleet.weight_version(3) is None
    assert "fleet/shard_3/weight_version" not in fleet.as_metrics()


# -- the refit controller ------------------------------------------------------------


class ScriptedCommunicator:
    """A communicator whose awaits run scripted events (a reload landing) midway.

    ``during["rebuild"]`` and ``during["transfer"]`` are lists, one entry per
    attempt, of callables run halfway through that step; ``failures`` is how
    many transfers fail.  ``holds`` is what each shard really received.
    """

    def __init__(self, fleet, during=None, failures=0):
        self.fleet = fleet
        self.during = {"rebuild": [], "transfer": [], **(during or {})}
        self.failures = failures
        self.rebuilt_over = []
        self.sent_to = []
        self.holds = {}

    async def _step(self, name):
        await trio.sleep(5)
        script = self.during[name]
        if script:
            script.pop(0)()
        await trio.sleep(5)

    async def rebuild(self, members):
        self.rebuilt_over.append(members)
        await self._step("rebuild")

    async def transfer(self, members, version):
        assert members == self.rebuilt_over[-1], "sent over a group it was not built for"
        self.sent_to.append(members)
        await self._step("transfer")
        if self.failures:
            self.failures -= 1
            raise TransferFailed("a member left the group")
        self.holds.update(dict.fromkeys(members, version))


def refit(fleet, communicator, version=1, **kwargs):
    controller = RefitController(fleet, communicator, **kwargs)
    return trio.run(controller.refit, version,
                    clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_shard_stale_before_the_membership_read_gets_the_weights_and_is_promoted():
    fleet = ledger()
    restarted(fleet, 2)  # W1
    communicator = ScriptedCommunicator(fleet)
    report = refit(fleet, communicator)
    assert communicator.holds[2] == 1
    assert report.promoted == frozenset({2}) and fleet.state(2) is H
    assert fleet.weight_version(2) == 1


@pytest.mark.parametrize("window, step", [("W2", "rebuild"), ("W3", "transfer")])
def test_a_reload_landing_mid_refit_is_left_stale_for_the_next_refit(window, step):
    fleet = ledger()
    restarted(fleet, 2, loaded=False)
    communicator = ScriptedCommunicator(
        fleet, during={step: [lambda: fleet.mark_loaded(2, CHECKPOINT)]})
    report = refit(fleet, communicator)
    assert 2 not in communicator.holds
    assert report.participants == frozenset({0, 1, 3}) == communicator.sent_to[0]
    assert report.promoted == frozenset()
    assert fleet.state(2) is ST and fleet.weight_version(2) == CHECKPOINT
    assert fleet.serving_behind(1) == frozenset()
    # The next refit takes it as a W1.
    assert refit(fleet, communicator, version=2).promoted == frozenset({2})
    assert communicator.holds[2] == 2 and fleet.weight_version(2) == 2


def test_the_recovery_re_snapshot_feeds_its_own_rebuild_and_promotion():
    # Seed 001: the recovery path (L4739) is the likelier one: the shard is
    # restarting because that refit just failed.  Shard 1 lands during the
    # failing transfer, before the re-snapshot (W1 of the recovery); shard 2
    # during the recovery's rebuild (its W2).
    fleet = ledger()
    restarted(fleet, 1, loaded=False)
    restarted(fleet, 2, loaded=False)
    communicator = ScriptedCommunicator(fleet, failures=1, during={
        "transfer": [lambda: fleet.mark_loaded(1, CHECKPOINT)],
        "rebuild": [lambda: None, lambda: fleet.mark_loaded(2, CHECKPOINT)]})
    report = refit(fleet, communicator, recovery_backoff=60.0)
    assert report.attempts == 2
    assert communicator.rebuilt_over == [frozenset({0, 3}), frozenset({0, 1, 3})]
    assert report.participants == frozenset({0, 1, 3})
    assert report.promoted == frozenset({1})
    assert fleet.state(2) is ST and 2 not in communicator.holds


def test_a_refit_whose_every_transfer_fails_promotes_nobody_and_says_so():
    fleet = ledger()
    restarted(fleet, 2)
    communicator = ScriptedCommunicator(fleet, failures=3)
    with pytest.raises(RefitFailed, match="refit to version 1 failed 3 times"):
        refit(fleet, communicator, max_attempts=3)
    assert fleet.state(2) is ST and fleet.weight_version(0) == 0


@pytest.mark.parametrize("kwargs, message", [
    ({"max_attempts": 0}, "max_attempts must be >= 1"),
    ({"recovery_backoff": -1.0}, "recovery_backoff must be >= 0"),
])
def test_the_controller_refuses_settings_it_cannot_honour(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RefitController(ledger(), ScriptedCommunicator(None), **kwargs)
