"""The generation-shard ledger and the refit controller of seed 001.

A generation engine that restarts comes back holding whatever weights it
read off disk, so the ledger parks it in STALE: alive, able to join a weight
transfer, not allowed to answer requests.  A completed refit is the only way
out of STALE; answering probes again is not (re-admitting it on a probe
"would feed training rollouts generated from a checkpoint hundreds of steps
stale", seed 001).

    HEALTHY <-> SUSPECT -> DEAD -> RESTARTING -> STALE -> HEALTHY
    (a process exit takes any live state to DEAD; RETIRED is terminal)

The seed's bug was in who gets promoted.  Before its PR, the promotion
asked each shard only "are you STALE?"; the PR added a participants set but
computed it from a second read of the fleet, after an ``await``, so a reload
landing between the reads (window W2, during the communicator rebuild) is
counted as a participant of a transfer it never joined.  ``RefitController``
reads membership once per attempt and feeds that one ``Membership`` to the
rebuild, the transfer and the promotion, on the first attempt and on every
recovery re-snapshot alike, so there is no gap to land in.

The per-shard weight version is written by the transfer that delivered it
(and by the reload, with the checkpoint read off disk), never by the
promotion: the seed's metric was written by the promotion, so a shard never
restarted read 0 forever and the shard that got nothing read current.

The ledger is a pure state machine: no I/O, no awaits, time only through
the injected ``clock``.  Under trio every method is atomic, because nothing
in it yields.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import trio

ShardId = int


class ShardState(enum.Enum):
    HEALTHY = "healthy"
    SUSPECT = "suspect"
    DEAD = "dead"
    RESTARTING = "restarting"
    STALE = "stale"
    RETIRED = "retired"


# Shards that can join a weight transfer: the communicator is built over these.
MEMBER_STATES = frozenset({ShardState.HEALTHY, ShardState.SUSPECT, ShardState.STALE})
# Shards the router sends requests to.  SUSPECT has missed probes but is not
# declared dead yet, so it is still routed.
SERVING_STATES = frozenset({ShardState.HEALTHY, ShardState.SUSPECT})
# States a probe cannot change: only the supervisor (DEAD -> RESTARTING ->
# STALE) or a refit (STALE -> HEALTHY) moves them on.
PROBE_DEAF_STATES = frozenset({ShardState.DEAD, ShardState.RESTARTING, ShardState.STALE,
                               ShardState.RETIRED})

_S = ShardState
_ALLOWED = frozenset({
    (_S.HEALTHY, _S.SUSPECT), (_S.SUSPECT, _S.HEALTHY), (_S.SUSPECT, _S.DEAD),  # probes
    (_S.HEALTHY, _S.DEAD), (_S.RESTARTING, _S.DEAD), (_S.STALE, _S.DEAD),      # exits
    (_S.DEAD, _S.RESTARTING), (_S.RESTARTING, _S.STALE),                      # supervisor
    (_S.STALE, _S.HEALTHY),                                                   # a refit
    *((state, _S.RETIRED) for state in _S if state is not _S.RETIRED),
})


class FleetError(Exception):
    """Base of the errors this module raises."""


class UnknownShard(FleetError, LookupError):
    """The ledger has no shard by that id."""


class IllegalTransition(FleetError, ValueError):
    """A transition the state machine does not have (e.g. DEAD -> HEALTHY)."""

    def __init__(self, shard: ShardId, state: ShardState, target: ShardState,
                 cause: str) -> None:
        super().__init__(f"shard {shard} is {state.name}; {cause} cannot move it to "
                         f"{target.name}")
        self.shard = shard
        self.state = state
        self.target = target
        self.cause = cause


class TransferFailed(FleetError):
    """A weight transfer broke (a member's process went away mid-collective)."""


class RefitFailed(FleetError):
    """Every attempt of a refit failed; nothing was promoted by its last attempt."""


@dataclass(frozen=True)
class Membership:
    """One read of the fleet: the shards that can join a transfer, and when."""

    epoch: int
    members: frozenset[ShardId]


@dataclass(frozen=True)
class Transition:
    at: float
    shard: ShardId
    old: ShardState
    new: ShardState
    epoch: int
    cause: str


@dataclass(frozen=True)
class RefitReport:
    """What one refit did: its version, who could be promoted, who was."""

    version: int
    participants: frozenset[ShardId]
    promoted: frozenset[ShardId]
    attempts: int


class ShardLedger:
    """Each shard's state and the weights it holds, as a pure state machine.

    Args:
        shards: the shard ids; every shard starts HEALTHY, holding
            ``initial_version``.
        clock: seconds, for SUSPECT's deadline and the transition history
            (``time.monotonic`` in production, virtual time in a simulation).
        suspect_timeout: seconds of failed probes after which a SUSPECT
            shard is declared DEAD.
        initial_version: the weight version every shard starts with.
    """

    def __init__(self, shards: Iterable[ShardId], *, clock: Callable[[], float],
                 suspect_timeout: float = 30.0, initial_version: int = 0) -> None:
        if suspect_timeout < 0:
            raise ValueError(f"suspect_timeout must be >= 0 seconds, not {suspect_timeout!r}")
        self._clock = clock
        self._suspect_timeout = suspect_timeout
        self._states = {shard: ShardState.HEALTHY for shard in shards}
        self._versions: dict[ShardId, int | None] = dict.fromkeys(self._states,
                                                                   initial_version)
        self._suspect_since: dict[ShardId, float] = {}
        self._epoch = 0
        self.history: list[Transition] = []

    # -- reading ------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """Bumped whenever the member set changes."""
        return self._epoch

    @property
    def shards(self) -> tuple[ShardId, ...]:
        return tuple(self._states)

    def state(self, shard: ShardId) -> ShardState:
        """Raises: UnknownShard."""
        try:
            return self._states[shard]
        except KeyError:
            raise UnknownShard(f"no shard {shard!r} in the ledger; shards: "
                               f"{sorted(self._states)}") from None

    def states(self) -> dict[ShardId, ShardState]:
        return dict(self._states)

    def weight_version(self, shard: ShardId) -> int | None:
        """The weights the shard holds, as delivered; None while it has no process.

        Raises: UnknownShard.
        """
        self.state(shard)
        return self._versions[shard]

    def membership(self) -> Membership:
        """The one read a refit attempt must build on: members and the epoch."""
        members = frozenset(shard for shard, state in self._states.items()
                            if state in MEMBER_STATES)
        return Membership(self._epoch, members)

    def serving_behind(self, version: int) -> frozenset[ShardId]:
        """Serving shards whose weights trail ``version``: a correctness bug, not capacity."""
        behind = []
        for shard, state in self._states.items():
            held = self._versions[shard]
            if state in SERVING_STATES and (held is None or held < version):
                behind.append(shard)
        return frozenset(behind)

    def as_metrics(self) -> dict[str, int]:
        """Per-shard weight version and serving flag, and the membership epoch."""
        metrics = {"fleet/membership_epoch": self._epoch}
        for shard, state in self._states.items():
            version = self._versions[shard]
            metrics[f"fleet/shard_{shard}/serving"] = int(state in SERVING_STATES)
            if version is not None:
                metrics[f"fleet/shard_{shard}/weight_version"] = version
        return metrics

    # -- probes -------------------------------------------------------------------

    def record_probe(self, shard: ShardId, ok: bool) -> ShardState:
        """A health probe's answer; returns the shard's state after it.

        A failed probe makes a HEALTHY shard SUSPECT, and a shard SUSPECT for
        ``suspect_timeout`` DEAD; an answered one clears SUSPECT.  Probes never
        move DEAD, RESTARTING, STALE or RETIRED: a restarted engine answers
        probes long before it holds the trainer's weights (seed 001).

        Raises: UnknownShard.
        """
        state = self.state(shard)
        if state in PROBE_DEAF_STATES:
            return state
        if ok:
            if state is ShardState.SUSPECT:
                self._move(shard, ShardState.HEALTHY, "an answered probe")
            return self._states[shard]
        if state is ShardState.HEALTHY:
            self._move(shard, ShardState.SUSPECT, "a failed probe")
        elif self._clock() - self._suspect_since[shard] >= self._suspect_timeout:
            self._move(shard, ShardState.DEAD, "failed probes past suspect_timeout")
        return self._states[shard]

    # -- the supervisor -------------------------------------------------------------

    def mark_dead(self, shard: ShardId) -> None:
        """The shard's process exited; its weights went with it.

        Raises: UnknownShard, IllegalTransition (already DEAD, or RETIRED).
        """
        self._move(shard, ShardState.DEAD, "a process exit")

    def mark_restarting(self, shard: ShardId) -> None:
        """The supervisor started a new process for a DEAD shard.

        Raises: UnknownShard, IllegalTransition (the shard is not DEAD).
        """
        self._move(shard, ShardState.RESTARTING, "a restart")

    def mark_loaded(self, shard: ShardId, version: int) -> None:
        """The restarted engine finished loading ``version`` off disk: STALE.

        Raises: UnknownShard, IllegalTransition (the shard is not RESTARTING).
        """
        self._move(shard, ShardState.STALE, "a finished reload")
        self._versions[shard] = version

    def retire(self, shard: ShardId) -> None:
        """Take the shard out for good.

        Raises: UnknownShard, IllegalTransition (already RETIRED).
        """
        self._move(shard, ShardState.RETIRED, "retirement")

    # -- a refit ----------------------------------------------------------------------

    def record_transfer(self, shards: Iterable[ShardId], version: int) -> None:
        """A transfer delivered ``version`` to ``shards``: the metric's only writer.

        Shards whose process exited since are skipped: the weights went with it.

        Raises: UnknownShard.
        """
        for shard in shards:
            if self.state(shard) in MEMBER_STATES:
                self._versions[shard] = version

    def promote(self, participants: Iterable[ShardId]) -> frozenset[ShardId]:
        """Move the STALE shards among ``participants`` to HEALTHY; returns them.

        ``participants`` must be the set the transfer went to: the ledger
        cannot tell which STALE shards got the weights (seed 001, W2 and W3).

        Raises: UnknownShard.
        """
        promoted = []
        for shard in sorted(set(participants)):
            if self.state(shard) is ShardState.STALE:
                self._move(shard, ShardState.HEALTHY, "a refit")
                promoted.append(shard)
        return frozenset(promoted)

    # -- the machine --------------------------------------------------------------------

    def _move(self, shard: ShardId, target: ShardState, cause: str) -> None:
        old = self.state(shard)
        if (old, target) not in _ALLOWED:
            raise IllegalTransition(shard, old, target, cause)
        now = self._clock()
        self._states[shard] = target
        if target is ShardState.SUSPECT:
            self._suspect_since[shard] = now
        else:
            self._suspect_since.pop(shard, None)
        if target in (ShardState.DEAD, ShardState.RETIRED):
            self._versions[shard] = None
        if (old in MEMBER_STATES) != (target in MEMBER_STATES):
            self._epoch += 1
        self.history.append(Transition(now, shard, old, target, self._epoch, cause))


class Communicator(Protocol):
    """The collective the weights travel over (NCCL in the seed)."""

    async def rebuild(self, members: frozenset[ShardId]) -> None:
        """Build the group over exactly ``members``."""

    async def transfer(self, members: frozenset[ShardId], version: int) -> None:
        """Send ``version`` to every member of the group built over ``members``.

        Raises:
            TransferFailed: a member went away; nobody is known to hold it.
        """


class RefitController:
    """Refit the fleet: one membership read feeds rebuild, transfer and promotion.

    Args:
        ledger: the shard ledger.
        communicator: the collective to rebuild and send over.
        max_attempts: attempts per refit (the first, then recovery re-snapshots).
        recovery_backoff: seconds to wait before each recovery attempt.
    """

    def __init__(self, ledger: ShardLedger, communicator: Communicator, *,
                 max_attempts: int = 3, recovery_backoff: float = 30.0) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, not {max_attempts!r}")
        if recovery_backoff < 0:
            raise ValueError(f"recovery_backoff must be >= 0 seconds, not "
                             f"{recovery_backoff!r}")
        self._ledger = ledger
        self._communicator = communicator
        self._max_attempts = max_attempts
        self._backoff = recovery_backoff

    async def refit(self, version: int) -> RefitReport:
        """Deliver ``version`` and promote the STALE shards that received it.

        The recovery path re-snapshots membership after a failed transfer;
        it is the seed's likelier case (the shard restarting is often the one
        whose exit failed the transfer), so it goes through the very same
        ``_refit_over`` as the first attempt.

        Raises:
            RefitFailed: every attempt's transfer failed.
        """
        failure: TransferFailed | None = None
        for attempt in range(1, self._max_attempts + 1):
            if attempt > 1:
                await trio.sleep(self._backoff)
            snapshot = self._ledger.membership()
            try:
                promoted = await self._refit_over(snapshot, version)
            except TransferFailed as error:
                failure = error
                continue
            return RefitReport(version, snapshot.members, promoted, attempt)
        raise RefitFailed(f"refit to version {version} failed {self._max_attempts} times; "
                          f"last: {failure}") from failure

    async def _refit_over(self, snapshot: Membership, version: int) -> frozenset[ShardId]:
        """Rebuild over, send to, and promote from the one ``snapshot``.

        A reload that lands while this awaits turns its shard STALE, and
        STALE is not absent; the shard is still outside ``snapshot`` and so
        outside the promotion.  The next refit takes it (seed 001, W2/W3).
        """
        await self._communicator.rebuild(snapshot.members)
        await self._communicator.transfer(snapshot.members, version)
        # No await from here on: nothing can change between the transfer's
        # end and the promotion.
        self._ledger.record_transfer(snapshot.members, version)
        return self._ledger.promote(snapshot.members)
