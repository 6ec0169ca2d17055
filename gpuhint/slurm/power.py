"""CES power advice -> ``scontrol update nodename=... state=power_down_asap|power_up``.

Pure logic (the Slurm and Redis edges are ports, as in :mod:`gpuhint.slurm.priority`).
The cluster advisory's ``active_nodes`` is the number of nodes CES wants powered on;
the applier moves Slurm towards it, one pass at a time, within these rules:

* powered on stay at least ``busy + min_idle`` nodes (a buffer of idle nodes for new
  jobs), and at least ``min_on``;
* only an **idle** node (no running or allocated job, not already powering) is powered
  down, with ``power_down_asap`` (Slurm drains it first: it never kills a job); the
  nodes the advisory names go first, then the highest-numbered idle ones;
* powered-down nodes (``idle~``) come back with ``power_up`` when the target, or the
  idle buffer, needs them; Slurm itself also resumes them when a pending job needs one;
* an advisory that names the nodes it wants off (``off_nodes``, the job-aware policy,
  ``GPUHINT_CES_POLICY=jobs``) is applied per node: exactly those nodes are powered down
  when Slurm shows them idle (never another idle node in their place: CES picked them
  as the ones that will stay idle longest, and none a queued job is about to get), and
  a powered-down node it does not name is powered up (CES woke it, or wants it on);
  the floor below still holds. Without ``off_nodes`` (the series policy) the count
  ``active_nodes`` is the target, as above;
* an advisory older than ``max_age_s`` is ignored (then only the buffer rule acts);
* nodes in ``exclude`` are never touched;
* a node that does not come back is a **failed resume**: Slurm marked it DOWN while
  powered down (``down~``, after its ``ResumeTimeout``), or it is still not up
  ``resume_timeout_s`` after the applier's ``power_up``. It is reported (log, the
  pass's ``resume_failed``, the metric's ``resume_failed`` reason) and left out of the
  plan, so another powered-down node is woken in its place (for per-node advice that
  wakes it by name: as many nodes of ``off_nodes``, kept on while that advice holds),
  until it is up again, or until it shows powered down cleanly (``idle~``, say after an
  admin resumed it) ``retry_failed_s`` (1 h) or more after it failed: then it is back
  in the plan and may be woken again (a node that still cannot boot fails again, so it
  is retried about once per ``retry_failed_s`` + ``resume_timeout_s``).

>>> nodes = [Node("n1", "allocated"), Node("n2", "idle"), Node("n3", "idle"), Node("n4", "idle")]
>>> plan_power(nodes, target_on=2, min_idle=1).lines
['update nodename=n4,n3 state=power_down_asap']
>>> plan_power([Node("n1", "allocated"), Node("n2", "idle~")], target_on=1, min_idle=1).lines
['update nodename=n2 state=power_up']
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpuhint.wire.contract import PowerAction, PowerAdvisory

log = logging.getLogger(__name__)

_FLAGS = "~#%!*$@^-+"


@dataclass(frozen=True)
class Node:
    """A node as sinfo shows it (long state name plus Slurm's suffix flags)."""

    name: str
    state: str  # "idle", "idle~", "allocated", "mixed", "down*", "idle!", "idle#", ...

    @property
    def base(self) -> str:
        return self.state.rstrip(_FLAGS).lower()

    @property
    def off(self) -> bool:
        """Powered down (``~``) or powering down (``%``, ``!`` pending)."""
        return self.state[-1:] in ("~", "%", "!")

    @property
    def powering_up(self) -> bool:
        return self.state.endswith("#")

    @property
    def busy(self) -> bool:
        return self.base in ("allocated", "mixed", "completing")

    @property
    def usable(self) -> bool:
        """Up and schedulable: not down, drained, failing or not responding."""
        return self.base in ("idle", "allocated", "mixed", "completing") and "*" not in self.state

    @property
    def idle_on(self) -> bool:
        return self.base == "idle" and not self.off and not self.powering_up and self.usable

    @property
    def wakeable(self) -> bool:
        """Powered down and otherwise fine (``idle~``): ``power_up`` brings it back."""
        return self.base == "idle" and self.state.endswith("~")

    @property
    def resume_failed(self) -> bool:
        """Slurm gave up waking it: DOWN while powered down (``down~``)."""
        return self.base == "down" and self.state.endswith("~")

    @property
    def up(self) -> bool:
        """Powered on, schedulable and not still booting."""
        return self.usable and not self.off and not self.powering_up


@dataclass
class PowerPlan:
    down: list[str] = field(default_factory=list)
    up: list[str] = field(default_factory=list)
    on: int = 0
    busy: int = 0
    target_on: int = 0
    held_back: int = 0  # downs the advice wanted but the buffer or busy nodes forbade

    @property
    def lines(self) -> list[str]:
        return [ln for ln in (_line("down", self.down), _line("up", self.up)) if ln]


def _line(kind: str, names: Sequence[str]) -> str:
    """The ``scontrol`` line that powers ``names`` down or up ('' for no node)."""
    state = "power_down_asap" if kind == "down" else "power_up"
    return f"update nodename={','.join(names)} state={state}" if names else ""


def _natural(name: str) -> list[object]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def plan_power(
    nodes: Iterable[Node],
    *,
    target_on: int | None,
    min_idle: int = 1,
    min_on: int = 1,
    prefer_down: Sequence[str] = (),
    prefer_up: Sequence[str] = (),
    exclude: Iterable[str] = (),
) -> PowerPlan:
    """Which nodes to power down or up now, towards ``target_on`` powered-on nodes.

    ``target_on`` None: no (fresh) advice; only keep the idle buffer.
    """
    skip = set(exclude)
    ns = [n for n in nodes if n.name not in skip]
    on = [n for n in ns if not n.off and n.usable]
    busy = [n for n in on if n.busy]
    idle = [n for n in on if n.idle_on]
    off = [n for n in ns if n.wakeable]
    floor = max(len(busy) + min_idle, min_on)
    want = floor if target_on is None else max(target_on, floor)
    plan = PowerPlan(on=len(on), busy=len(busy), target_on=want)
    if len(on) > want and target_on is not None:
        first = [n for n in idle if n.name in set(prefer_down)]
        rest = sorted(
            (n for n in idle if n.name not in set(prefer_down)),
            key=lambda n: _natural(n.name),
            reverse=True,
        )
        k = min(len(on) - want, len(idle))
        plan.down = [n.name for n in (first + rest)[:k]]
    elif len(on) < want:
        first = [n for n in off if n.name in set(prefer_up)]
        rest = sorted(
            (n for n in off if n.name not in set(prefer_up)), key=lambda n: _natural(n.name)
        )
        plan.up = [n.name for n in (first + rest)[: want - len(on)]]
    if target_on is not None:
        plan.held_back = max(0, len(on) - target_on - len(plan.down))
    return plan


def plan_named(
    nodes: Iterable[Node],
    *,
    off: Collection[str],
    target_on: int | None = None,
    min_idle: int = 1,
    min_on: int = 1,
    prefer_down: Sequence[str] = (),
    prefer_up: Sequence[str] = (),
    exclude: Iterable[str] = (),
    stand_in: int = 0,
) -> PowerPlan:
    """Per-node advice: power down the idle nodes named in ``off`` (``prefer_down`` first)
    while the floor allows, power up every powered-down node not named (``prefer_up``
    first), and more (of ``off``) if the floor needs them, plus ``stand_in`` more in the
    place of nodes the advice wakes but that failed to resume.

    >>> ns = [Node("a", "allocated"), Node("b", "idle"), Node("c", "idle"), Node("d", "idle~")]
    >>> plan_named(ns, off=["b"], min_idle=1).lines
    ['update nodename=b state=power_down_asap', 'update nodename=d state=power_up']
    >>> plan_named(ns, off=["b", "c", "d"], min_idle=1).down  # the floor keeps one idle
    ['b']
    >>> plan_named(ns, off=["d"], min_idle=1, stand_in=1).up
    ['d']
    """
    skip, wanted_off = set(exclude), set(off)
    ns = [n for n in nodes if n.name not in skip]
    on = [n for n in ns if not n.off and n.usable]
    busy = sum(1 for n in on if n.busy)
    floor = max(busy + min_idle, min_on)
    plan = PowerPlan(on=len(on), busy=busy)
    first = set(prefer_down)
    named = sorted(
        (n for n in on if n.idle_on and n.name in wanted_off),
        key=lambda n: (n.name not in first, _natural(n.name)),
    )
    k = max(0, min(len(named), len(on) - floor))
    plan.down = [n.name for n in named[:k]]
    plan.held_back = len(named) - k
    up_first = set(prefer_up)
    wake = sorted((n for n in ns if n.wakeable), key=lambda n: _natural(n.name))
    wanted_on = sorted(
        (n for n in wake if n.name not in wanted_off), key=lambda n: n.name not in up_first
    )
    need = max(0, floor - (len(on) - len(plan.down) + len(wanted_on)))
    more = need + max(0, stand_in)
    plan.up = [n.name for n in wanted_on] + [n.name for n in wake if n.name in wanted_off][:more]
    plan.target_on = max(floor, len(on) - len(plan.down) + len(plan.up), target_on or 0)
    return plan


def target_from(advice: PowerAdvisory | None, now: float, max_age_s: float) -> int | None:
    """The powered-on node count an advisory asks for, or None (no advice, or too old)."""
    if advice is None or now - advice.time > max_age_s or advice.active_nodes is None:
        return None
    return advice.active_nodes


class NodePort(Protocol):
    def nodes(self) -> list[Node]: ...
    def apply(self, lines: Sequence[str]) -> list[str]: ...


class AdvicePort(Protocol):
    def cluster_advice(self, cluster: str) -> PowerAdvisory | None: ...


@dataclass
class PowerResult:
    """What one pass did (``--json``; stable keys)."""

    target_on: int
    on: int
    busy: int
    powered_down: list[str]
    powered_up: list[str]
    refused: int
    advice_age_s: float | None
    held_back: int = 0
    lines: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    resume_failed: list[str] = field(default_factory=list)
    """Nodes that did not come back, left out of the plan (all known now)."""
    newly_failed: list[str] = field(default_factory=list)
    """Of those, the ones found in this pass."""
    refused_nodes: list[str] = field(default_factory=list)
    """Nodes planned to go down or up whose ``scontrol`` line Slurm refused (not in
    ``powered_down`` / ``powered_up``)."""

    def as_dict(self) -> dict[str, object]:
        return {
            "target_on": self.target_on,
            "on": self.on,
            "busy": self.busy,
            "powered_down": self.powered_down,
            "powered_up": self.powered_up,
            "refused": self.refused,
            "held_back": self.held_back,
            "advice_age_s": None if self.advice_age_s is None else round(self.advice_age_s, 1),
            "errors": self.errors[:20],
            "resume_failed": self.resume_failed,
            "refused_nodes": self.refused_nodes,
        }


class PowerApplier:
    """One pass: read the advice and Slurm's nodes, plan, apply (or print: dry run)."""

    def __init__(
        self,
        slurm: NodePort,
        advice: AdvicePort,
        cluster: str,
        *,
        min_idle: int = 1,
        min_on: int = 1,
        max_age_s: float = 1800.0,
        exclude: Sequence[str] = (),
        dry_run: bool = False,
        resume_timeout_s: float = 900.0,
        retry_failed_s: float = 3600.0,
    ) -> None:
        self.slurm = slurm
        self.advice = advice
        self.cluster = cluster
        self.min_idle = min_idle
        self.min_on = min_on
        self.max_age_s = max_age_s
        self.exclude = tuple(exclude)
        self.dry_run = dry_run
        self.total_refused = 0
        self.resume_timeout_s = resume_timeout_s
        self.retry_failed_s = retry_failed_s
        self.waking: dict[str, float] = {}
        """Nodes this applier powered up, and when; watched until they are up."""
        self.failed: dict[str, str] = {}
        """Nodes that did not come back, and why."""
        self.failed_at: dict[str, float] = {}
        """When each of :attr:`failed` failed."""
        self.stand_ins: tuple[float, tuple[str, ...]] = (-1.0, ())
        """(advice time, nodes woken in the place of failed nodes that advice wakes)."""
        self.unreadable: str | None = None
        """Why the last advisory read could not be parsed (None: it could)."""

    def watch_resumes(self, nodes: Sequence[Node], now: float) -> list[str]:
        """Update :attr:`failed` from Slurm's node states; return the newly failed."""
        newly: list[str] = []
        for n in nodes:
            why = None
            if n.resume_failed:
                why = "DOWN while powered down (Slurm's ResumeTimeout)"
            elif n.name in self.waking and not n.up:
                waited = now - self.waking[n.name]
                if waited > self.resume_timeout_s:
                    why = f"not up {waited:.0f} s after power_up (state {n.state})"
            if why is not None and n.name not in self.failed:
                self.failed[n.name] = why
                self.failed_at[n.name] = now
                self.waking.pop(n.name, None)
                newly.append(n.name)
                log.warning("node %s did not come back: %s; waking another instead", n.name, why)
            elif n.up and (n.name in self.failed or n.name in self.waking):
                if self._forgive(n.name):
                    log.info("node %s is up again: back in the power plan", n.name)
                self.waking.pop(n.name, None)
            elif n.name in self.failed and n.wakeable and self._may_retry(n.name, now):
                self._forgive(n.name)
                log.info("node %s is powered down cleanly again: back in the power plan", n.name)
        return newly

    def _may_retry(self, name: str, now: float) -> bool:
        """Whether failed node ``name`` has waited out :attr:`retry_failed_s`."""
        return now - self.failed_at.get(name, now) >= self.retry_failed_s

    def _forgive(self, name: str) -> bool:
        """Take ``name`` out of :attr:`failed`; whether it was there."""
        self.failed_at.pop(name, None)
        return self.failed.pop(name, None) is not None

    def _read_advice(self) -> PowerAdvisory | None:
        """The cluster's advisory; None when there is none or it cannot be read (a
        ``ValueError``: another schema version, or junk), logged once until it changes."""
        try:
            adv = self.advice.cluster_advice(self.cluster)
        except ValueError as exc:
            why = " ".join(str(exc).split())
            if why != self.unreadable:
                log.warning("power advice unreadable, only the idle buffer acts: %s", why)
            self.unreadable = why
            return None
        self.unreadable = None
        return adv

    def run_pass(self, now: float) -> PowerResult:
        adv = self._read_advice()
        target = target_from(adv, now, self.max_age_s)
        named = tuple(adv.nodes) if adv is not None and target is not None else ()
        nodes = self.slurm.nodes()
        newly = self.watch_resumes(nodes, now)
        exclude = (*self.exclude, *self.failed)
        if adv is not None and target is not None and adv.off_nodes is not None:
            plan = self._plan_named(nodes, adv, target, exclude)
        else:
            plan = plan_power(
                nodes,
                target_on=target,
                min_idle=self.min_idle,
                min_on=self.min_on,
                prefer_down=named,
                prefer_up=named,
                exclude=exclude,
            )
        down, up, errors = self._apply(plan)
        self.total_refused += len(errors)
        if not self.dry_run:
            self.waking.update((name, now) for name in up)
            if adv is not None and target is not None:
                self._note_stand_ins(adv, up)
        return PowerResult(
            target_on=plan.target_on,
            on=plan.on,
            busy=plan.busy,
            powered_down=down,
            powered_up=up,
            refused=len(errors),
            advice_age_s=None if adv is None else now - adv.time,
            held_back=plan.held_back,
            lines=plan.lines,
            errors=errors,
            resume_failed=sorted(self.failed),
            newly_failed=newly,
            refused_nodes=sorted({*plan.down, *plan.up} - {*down, *up}),
        )

    def _apply(self, plan: PowerPlan) -> tuple[list[str], list[str], list[str]]:
        """Apply ``plan``'s power-down and power-up lines, each in its own ``scontrol``
        call so that a refusal is pinned on its line's nodes; the nodes powered down, the
        nodes powered up (a dry run: as planned) and Slurm's error lines."""
        if self.dry_run:
            return plan.down, plan.up, []
        errors: list[str] = []
        done: dict[str, list[str]] = {}
        for kind, names in (("down", plan.down), ("up", plan.up)):
            line = _line(kind, names)
            refusal = self.slurm.apply([line]) if line else []
            errors += refusal
            done[kind] = [] if refusal else names
        return done["down"], done["up"], errors

    def _lost(self, adv: PowerAdvisory) -> int:
        """How many nodes per-node ``adv`` wakes by name that failed to resume."""
        if adv.action is not PowerAction.WAKE or adv.off_nodes is None:
            return 0
        return sum(1 for n in adv.nodes if n in self.failed)

    def _note_stand_ins(self, adv: PowerAdvisory, up: Sequence[str]) -> None:
        """Remember the nodes of ``off_nodes`` woken while ``adv`` wakes failed nodes."""
        if not self._lost(adv):
            return
        kept, off = self._kept(adv), set(adv.off_nodes or ())
        self.stand_ins = (adv.time, kept + tuple(n for n in up if n in off and n not in kept))

    def _kept(self, adv: PowerAdvisory) -> tuple[str, ...]:
        """The nodes woken in the place of failed ones while ``adv`` holds (not failed
        themselves)."""
        if self.stand_ins[0] != adv.time:
            return ()
        return tuple(n for n in self.stand_ins[1] if n not in self.failed)

    def _plan_named(
        self, nodes: Sequence[Node], adv: PowerAdvisory, target: int, exclude: Sequence[str]
    ) -> PowerPlan:
        """The plan of per-node advice; a WAKE of a failed node wakes another in its place
        (of ``off_nodes``), kept on while that advice holds."""
        waking = adv.action is PowerAction.WAKE
        named = tuple(adv.nodes)
        kept = self._kept(adv)
        return plan_named(
            nodes,
            off=[n for n in adv.off_nodes or () if n not in kept],
            target_on=target,
            min_idle=self.min_idle,
            min_on=self.min_on,
            prefer_down=() if waking else named,
            prefer_up=named if waking else (),
            exclude=exclude,
            stand_in=max(0, self._lost(adv) - len(kept)),
        )
