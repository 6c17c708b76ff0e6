"""ClaimMemo: a pod is claimed again only when it, or an owner object its claim looked up, changed."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from gang_builders import job, job_pod, pod

from gputopo.gangs.claimmemo import ClaimMemo
from gputopo.gangs.claims import Claim, Owners
from gputopo.gangs.read import Refusal, claim_pod, read_gangs

NS = "team-a"
Said = Claim | Refusal | None


def _group(name: str, size: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS}, "spec": {"schedulingPolicy": {"gang": {"minCount": size}}}}


class Counting:
    """``claim_pod``, counting the pods it is asked about."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, body: Any, owners: Owners) -> Said:
        self.asked.append(body["metadata"]["name"])
        return claim_pod(body, owners)


def test_a_pod_is_claimed_again_only_when_it_or_an_owner_it_looked_up_changed() -> None:
    memo: ClaimMemo[Said] = ClaimMemo()
    claim = Counting()
    red, blue = pod("red-0").gpus(8).group("red").build(), pod("blue-0").gpus(8).group("blue").build()
    groups = {(NS, "red"): _group("red", 2), (NS, "blue"): _group("blue", 2)}
    owners = Owners(podgroups=groups)
    first = [memo.claim(p, owners, claim) for p in (red, blue)]
    memo.done()
    again = [memo.claim(p, owners, claim) for p in (red, blue)]
    memo.done()
    assert claim.asked == ["red-0", "blue-0"]  # the second read reused both
    assert all(a is b for a, b in zip(again, first, strict=True))

    resized = Owners(podgroups={**groups, (NS, "red"): _group("red", 4)})  # the watch's new body for red
    red_claim = memo.claim(red, resized, claim)
    assert isinstance(red_claim, Claim) and red_claim.declared is not None and red_claim.declared.size == 4
    assert memo.claim(blue, resized, claim) is first[1]
    memo.done()
    assert claim.asked == ["red-0", "blue-0", "red-0"]

    changed = {**red, "metadata": {**red["metadata"], "labels": {"gputopo.io/rank": "1"}}}
    assert memo.claim(changed, resized, claim) == claim_pod(changed, resized)
    assert claim.asked[-1] == "red-0"


def test_an_owner_that_appears_or_goes_is_a_change() -> None:
    memo: ClaimMemo[Said] = ClaimMemo()
    member = pod("red-0").gpus(8).group("red").build()
    unknown = memo.claim(member, Owners(), claim_pod)
    memo.done()
    assert isinstance(unknown, Claim) and unknown.declared is None  # its PodGroup is not read yet
    known = memo.claim(member, Owners(podgroups={(NS, "red"): _group("red", 2)}), claim_pod)
    memo.done()
    assert isinstance(known, Claim) and known.declared is not None
    assert memo.claim(member, Owners(), claim_pod) == unknown


def test_a_claim_template_count_that_changes_is_a_change() -> None:
    memo: ClaimMemo[Said] = ClaimMemo()
    member = pod("red-0").group("red").build()
    member["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "eight"}]
    groups = {(NS, "red"): _group("red", 2)}
    eight = memo.claim(member, Owners(podgroups=groups, claim_templates={(NS, "eight"): 8}), claim_pod)
    memo.done()
    four = memo.claim(member, Owners(podgroups=groups, claim_templates={(NS, "eight"): 4}), claim_pod)
    assert isinstance(eight, Claim) and isinstance(four, Claim)
    assert eight.declared is not None and four.declared is not None
    assert (eight.declared.shape, four.declared.shape) == ((8, 8), (4, 4))


def test_the_owner_a_job_pod_is_claimed_through_is_looked_up_too() -> None:
    memo: ClaimMemo[Said] = ClaimMemo()
    indexed = job("train", parallelism=2, gpus=8, completions=4)
    member = job_pod(indexed, 0, 8).build()
    before = memo.claim(member, Owners(jobs={(NS, "train"): indexed}), claim_pod)
    memo.done()
    wider = {**indexed, "spec": {**indexed["spec"], "parallelism": 3}}
    after = memo.claim(member, Owners(jobs={(NS, "train"): wider}), claim_pod)
    assert isinstance(before, Claim) and isinstance(after, Claim)
    assert before.declared is not None and after.declared is not None
    assert (before.declared.size, after.declared.size) == (2, 3)


def test_every_map_of_the_owners_is_watched() -> None:
    """A map added to ``Owners`` later must be recorded too, or a change to it would go unseen."""
    seen: list[Owners] = []

    def spy(body: Any, owners: Owners) -> Said:
        seen.append(owners)
        return None

    ClaimMemo[Said]().claim(pod("p").build(), Owners(claim_templates={}), spy)
    (looked,) = seen
    for f in fields(Owners):
        assert type(getattr(looked, f.name)).__name__ == "_Looked", f.name


def test_a_claim_that_read_a_whole_map_is_not_kept() -> None:
    memo: ClaimMemo[Said] = ClaimMemo()
    asked: list[str] = []

    def counting_all(body: Any, owners: Owners) -> Said:
        asked.append(f"{body['metadata']['name']} of {len(owners.podgroups)}")
        return None

    member = pod("p").build()
    memo.claim(member, Owners(), counting_all)
    memo.done()
    memo.claim(member, Owners(), counting_all)
    assert asked == ["p of 0", "p of 0"] and len(memo) == 0


def test_read_gangs_with_a_claim_memo_reads_what_it_reads_without() -> None:
    groups = Owners(podgroups={(NS, "red"): _group("red", 2)})
    pods = [pod(f"red-{r}").gpus(8).group("red").label("gputopo.io/rank", str(r)).build() for r in range(2)]
    memo: ClaimMemo[Said] = ClaimMemo()
    first = read_gangs(pods, groups, claims=memo)
    again = read_gangs(pods, groups, claims=memo)
    assert first == again == read_gangs(pods, groups)
    assert len(memo) == 2
    read_gangs(pods[:1], groups, claims=memo)
    assert len(memo) == 1  # a pod no longer read is forgotten
