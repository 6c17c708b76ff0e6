"""Garbage a tenant may write, for tests and benchmarks: pods and owner objects whose labels, annotations, env and
spec fields hold what gputopo reads numbers and names from, set to huge numbers, long strings, wrong types and
digits of other scripts. Every object is one the API server accepts (label values keep to its syntax; only
annotations, env and the specs of CRDs that keep unknown fields carry anything at all).

The same seed makes the same objects. Pods are gputopo's members (its gate, or its ``gputopo.io/gang``
annotation), so its gang reader reads every one; none asks for a GPU, so none takes GPUs from a valid gang.
"""

from __future__ import annotations

import random
from typing import Any, Final

__all__ = ["GATE", "OWNER_KINDS", "garbage_owners", "garbage_pods"]

GATE: Final = "gputopo.io/placement"

# (apiVersion, kind, plural) of the owners the gang reader looks up; their CRDs keep whatever spec they are given.
OWNER_KINDS: Final = (
    ("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets"),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "leaderworkersets"),
    ("kubeflow.org/v1", "PyTorchJob", "pytorchjobs"),
)

HUGE: Final = "9" * 5000  # past Python's integer-string limit (4,300 digits)

# Label values the API server accepts (63 characters at most, alphanumeric at both ends).
LABEL_VALUES: Final = (
    "9" * 63,
    "1" * 20,
    "8193",
    "0",
    "1e5",
    "1_000",
    "0x10",
    "NaN",
    "abc",
    "v1.2-3",
    "",
)
# Annotation and env values: any string.
TEXT_VALUES: Final = (
    HUGE,
    "7" * 4301,
    "-1",
    "+3",
    "1_000",
    " 7 ",
    "\u0663",  # ARABIC-INDIC DIGIT THREE
    "\u00b2",  # SUPERSCRIPT TWO
    "\U0001d7d7",  # MATHEMATICAL BOLD DIGIT NINE
    "inf",
    "nan",
    "1e400",
    "x" * 10_000,
    "\u00f1" * 300,
    "[1, 2]",
    '{"a": 1}',
    "true",
    "",
    "0," * 2000,
    f"0,{HUGE}",
    "rack 2",
)
# Spec fields of owners: any JSON value.
SPEC_VALUES: Final[tuple[object, ...]] = (
    HUGE,
    "-5",
    -5,
    0,
    1e300,
    2**62,
    [],
    {},
    True,
    None,
    "\u0663",
    "x" * 3000,
    10_000,
)

LABEL_KEYS: Final = (
    "gputopo.io/gang",
    "gputopo.io/gang-size",
    "gputopo.io/rank",
    "kueue.x-k8s.io/pod-group-name",
    "kueue.x-k8s.io/pod-group-pod-index",
    "batch.kubernetes.io/job-completion-index",
    "jobset.sigs.k8s.io/jobset-name",
    "jobset.sigs.k8s.io/replicatedjob-name",
    "jobset.sigs.k8s.io/job-index",
    "leaderworkerset.sigs.k8s.io/name",
    "leaderworkerset.sigs.k8s.io/group-index",
    "leaderworkerset.sigs.k8s.io/worker-index",
    "training.kubeflow.org/job-name",
    "training.kubeflow.org/replica-type",
    "training.kubeflow.org/replica-index",
)
ANNOTATION_KEYS: Final = (
    "gputopo.io/gang",
    "gputopo.io/gpus-per-rank",
    "gputopo.io/required-tier",
    "gputopo.io/preferred-tier",
    "gputopo.io/slice-size",
    "gputopo.io/min-bus-bandwidth",
    "gputopo.io/intra-node",
    "gputopo.io/evict-bare-pods",
    "gputopo.io/gpus",
    "gputopo.io/placement-generation",
    "gputopo.io/checkpoint-interval-seconds",
    "gputopo.io/checkpoint-time",
    "kueue.x-k8s.io/pod-group-total-count",
    "kueue.x-k8s.io/pod-group-pod-index-label",
    "kueue.x-k8s.io/podset-required-topology",
    "batch.kubernetes.io/job-completion-index",
    "leaderworkerset.sigs.k8s.io/size",
    "alpha.jobset.sigs.k8s.io/exclusive-topology",
)
ENV_NAMES: Final = ("RANK", "PET_NODE_RANK", "PET_NNODES")


def garbage_owners(namespace: str, seed: int = 39) -> list[dict[str, Any]]:
    """A JobSet, a LeaderWorkerSet and a PyTorchJob for each spec value, that field of theirs set to it."""
    rng = random.Random(seed)
    owners: list[dict[str, Any]] = []
    for i, value in enumerate(SPEC_VALUES):
        other = rng.choice(SPEC_VALUES)
        specs = (
            {
                "replicatedJobs": [
                    {"name": "w", "replicas": value, "template": {"spec": {"parallelism": other, "completions": 2}}}
                ]
            },
            {"replicas": other, "leaderWorkerTemplate": {"size": value}},
            {"pytorchReplicaSpecs": {"Master": {"replicas": other}, "Worker": {"replicas": value}}},
        )
        for (api, kind, _), spec in zip(OWNER_KINDS, specs, strict=True):
            name = f"garbage-{kind.lower()}-{i}"
            owners.append(
                {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": namespace}, "spec": spec}
            )
    return owners


def garbage_pods(
    namespace: str, count: int, owners: list[dict[str, Any]] | None = None, seed: int = 39
) -> list[dict[str, Any]]:
    """``count`` pods of garbage; ``owners`` as the API server returned them (with their uids): some pods name one
    as their controller, labelled as its controller labels its pods."""
    rng = random.Random(seed)
    pods = []
    for i in range(count):
        labels = {key: rng.choice(LABEL_VALUES) for key in rng.sample(LABEL_KEYS, rng.randint(1, 5))}
        annotations = {key: rng.choice(TEXT_VALUES) for key in rng.sample(ANNOTATION_KEYS, rng.randint(1, 4))}
        labels.setdefault(rng.choice(("gputopo.io/gang", "kueue.x-k8s.io/pod-group-name")), f"garbage-{i % 7}")
        meta: dict[str, Any] = {"name": f"garbage-{i}", "namespace": namespace, "labels": labels}
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox"}],
        }
        if i % 2:
            spec["schedulingGates"] = [{"name": GATE}]
        else:
            annotations.setdefault("gputopo.io/gang", rng.choice(TEXT_VALUES)[:200] or "x")
        if i % 3 == 0:
            spec["containers"][0]["env"] = [{"name": name, "value": rng.choice(TEXT_VALUES)} for name in ENV_NAMES]
        if owners and i % 4 == 0:
            owner = owners[rng.randrange(len(owners))]
            ref = {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"].get("uid", ""),
                "controller": True,
            }
            meta["ownerReferences"] = [ref]
            labels.update(_owner_labels(owner["kind"], owner["metadata"]["name"]))
        meta["annotations"] = annotations
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
    return pods


def _owner_labels(kind: str, name: str) -> dict[str, str]:
    """The label its controller puts on its pods, naming the owner (so a source looks the owner up)."""
    if kind == "JobSet":
        return {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/replicatedjob-name": "w"}
    if kind == "LeaderWorkerSet":
        return {"leaderworkerset.sigs.k8s.io/name": name}
    return {"training.kubeflow.org/job-name": name, "training.kubeflow.org/operator-name": "pytorchjob-controller"}
