"""Priority and topology-aware preemption, pure: which whole lower-priority gangs to end so a gang places.

``plan_preemption`` picks the victims per candidate domain and the domain (``plan_exclusive_preemption``, one
domain of its exclusive label per part of a gang of exclusive parts); ``hold_nominations`` keeps the
GPUs freed for a preemptor from every other gang; ``preempt_by_priority`` is the topology-blind peer
(lowest priority, then most recently started) the simulator compares against.
"""

from gputopo.placement.preemption.domains import Domain
from gputopo.placement.preemption.eligibility import min_runtime, victim_refusal
from gputopo.placement.preemption.exclusive import plan_exclusive_preemption
from gputopo.placement.preemption.gangs import (
    Nomination,
    PreemptionPolicy,
    PreemptionRules,
    Preemptor,
    RunningGang,
    gpus_by_node,
    resumes_from,
    victim_allowance,
)
from gputopo.placement.preemption.index import RunningIndex
from gputopo.placement.preemption.nominations import hold_nominations, lapsed_nominations
from gputopo.placement.preemption.running import held_placement
from gputopo.placement.preemption.victims import NoPreemption, PreemptionCost, PreemptionPlan, plan_preemption

__all__ = [
    "Domain",
    "NoPreemption",
    "Nomination",
    "PreemptionCost",
    "PreemptionPlan",
    "PreemptionPolicy",
    "PreemptionRules",
    "Preemptor",
    "RunningGang",
    "RunningIndex",
    "gpus_by_node",
    "held_placement",
    "hold_nominations",
    "lapsed_nominations",
    "min_runtime",
    "plan_exclusive_preemption",
    "plan_preemption",
    "resumes_from",
    "victim_allowance",
    "victim_refusal",
]
