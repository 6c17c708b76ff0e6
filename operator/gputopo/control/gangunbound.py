"""A planned gang whose steered pods kube-scheduler does not bind: what its status says, and when it gives up (pure).

While a steered pod waits, kube-scheduler's own words (its ``PodScheduled`` reason and message, and the PodGroup's
condition) are the gang's status. A pod still refused ``unschedulable_timeout`` after it was steered is given up
(``gputopo.gangs.unbound.give_up_at``, the rule TrainingJobs follow too):

- refused as ``Unschedulable`` (no node fits it, its planned node included: another pod took the GPUs, the node
  filled up): the pod is evicted for its owner to make again, gated, and its rank planned again off that node;
- refused for any other reason (``SchedulerError``: kube-scheduler refuses the pod itself, e.g. its priority differs
  from its PodGroup's): another node would not help, and pods made again would be refused the same way, so the
  whole plan is let go (its GPUs free for others) and the gang waits, Released, with kube-scheduler's words, until
  its pods are made again (fixed). Its pods are not evicted: kube-scheduler keeps refusing them where they are.

Pods nobody makes again (a gang of bare pods) are not evicted unless the gang says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gputopo.control.gangrecords import GangRecord
from gputopo.gangs.model import Gang, Member
from gputopo.gangs.unbound import give_up_at

__all__ = ["GivenUp", "give_up", "overdue", "refused", "waiting_words"]

_BARE = 'their pods are bare, so they are not evicted: delete them, or set gputopo.io/evict-bare-pods: "true"'


@dataclass(frozen=True, slots=True)
class GivenUp:
    """What giving up on the refused ranks does: the pods to evict, the ranks whose plan goes (every rank when
    ``release``: the plan is let go, nothing evicted), the nodes to plan them off, and the gang's message."""

    ranks: tuple[int, ...]
    evict: tuple[Member, ...]
    avoid: frozenset[str]
    release: bool
    message: str


def _ranks(ranks: tuple[int, ...]) -> str:
    return ", ".join(map(str, ranks))


def refused(gang: Gang, rec: GangRecord) -> dict[int, Member]:
    """Planned ranks whose pod was steered (its gate lifted) and that kube-scheduler says it has not bound."""
    plan = rec.plan
    return {
        rank: m
        for rank, m in gang.by_rank.items()
        if rank in plan
        and not m.deleting
        and m.phase not in ("Succeeded", "Failed")
        and not m.gated
        and not m.node
        and m.refusal is not None
    }


def overdue(
    members: dict[int, Member], rec: GangRecord, now: datetime, timeout: float
) -> tuple[dict[int, Member], datetime | None]:
    """The refused ranks given up by ``now``, and when the next one is due (None: none waits)."""
    due: datetime | None = None
    late: dict[int, Member] = {}
    for rank, member in members.items():
        at = give_up_at(member.refusal, rec.planned_at, timeout)
        if at is None:
            continue
        if at <= now:
            late[rank] = member
        else:
            due = at if due is None else min(due, at)
    return late, due


def _said(members: dict[int, Member], gang: Gang) -> str:
    """kube-scheduler's words, each once: the pods', then the PodGroup's where it says otherwise."""
    words = list(dict.fromkeys(str(m.refusal) for m in members.values() if m.refusal is not None))
    if gang.group_refusal is not None and str(gang.group_refusal) not in words:
        words.append(f"PodGroup {gang.id.name}: {gang.group_refusal}")
    return "; ".join(words)


def waiting_words(members: dict[int, Member], gang: Gang) -> str:
    """A planned gang's message while kube-scheduler has not bound its steered ranks ('' when none is refused)."""
    if not members:
        return ""
    ranks = _ranks(tuple(sorted(members)))
    return f"waiting for kube-scheduler, which has not bound ranks {ranks}: {_said(members, gang)}"


def give_up(gang: Gang, rec: GangRecord, late: dict[int, Member], timeout: float) -> GivenUp:
    """Give up on the ranks ``late`` (refused past the timeout), by what kube-scheduler said of them."""
    ranks = tuple(sorted(late))
    said = _said(late, gang)
    evictable = gang.owner is not None or gang.evict_bare
    if all(m.refusal is not None and m.refusal.node_bound for m in late.values()):
        nodes = frozenset(rec.plan[r].node for r in late)
        where = ", ".join(sorted(nodes))
        if not evictable:
            why = f"ranks {_ranks(ranks)} cannot be bound on their planned nodes ({where}); {_BARE} ({said})"
            return GivenUp(ranks, (), frozenset(), False, why)
        why = f"ranks {_ranks(ranks)} stayed unschedulable on {where}: evicted, to be planned again ({said})"
        return GivenUp(ranks, tuple(late.values()), nodes, False, why)
    head = f"kube-scheduler did not bind ranks {_ranks(ranks)} within {timeout:g}s of their steering ({said})"
    tail = "its GPUs are let go; it is planned again when its pods are made again"
    return GivenUp(ranks, (), frozenset(), True, f"{head}: {tail}")
