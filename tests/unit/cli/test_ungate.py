"""`gputopo ungate`'s pure core: which pods it releases, the names a gang goes by, and the patch that lifts only
gputopo's gate while the gates read are still there."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import jsonpatch
import pytest
from typer.testing import CliRunner

from gputopo.cli.gates import gang_names, gated_pods, lift_patch
from gputopo.cli.main import app
from gputopo.gangs.model import GATE

KUEUE_GATE = "kueue.x-k8s.io/admission"


def pod(
    name: str,
    namespace: str = "ml",
    *,
    gates: tuple[str, ...] = (GATE,),
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    group: str | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {}}
    if annotations:
        meta["annotations"] = annotations
    if deleting:
        meta["deletionTimestamp"] = "2026-12-07T19:00:00Z"
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x"}]}
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {"metadata": meta, "spec": spec}


SELECTED = [
    ("gated-by-gputopo", [pod("a-0")], None, ["ml/a-0"]),
    ("after-kueues-gate", [pod("a-0", gates=(KUEUE_GATE, GATE))], None, ["ml/a-0"]),
    ("only-another-gate", [pod("a-0", gates=(KUEUE_GATE,))], None, []),
    ("no-gate", [pod("a-0", gates=())], None, []),
    ("being-deleted", [pod("a-0", deleting=True)], None, []),
    ("sorted-by-namespace-then-name", [pod("b", "z"), pod("a", "z"), pod("c", "a")], None, ["a/c", "z/a", "z/b"]),
    ("gang-by-label", [pod("a-0", labels={"gputopo.io/gang": "a"}), pod("b-0", labels={"gputopo.io/gang": "b"})],
     "a", ["ml/a-0"]),
    ("gang-by-source-and-name", [pod("a-0", labels={"kueue.x-k8s.io/pod-group-name": "a"}),
                                 pod("b-0", labels={"gputopo.io/gang": "a"})], "kueue/a", ["ml/a-0"]),
    ("gang-by-podgroup", [pod("pg-0", group="trainer"), pod("x-0")], "trainer", ["ml/pg-0"]),
    ("gang-by-job", [pod("j-0", labels={"batch.kubernetes.io/job-name": "train"})], "job/train", ["ml/j-0"]),
    ("gang-by-steered-annotation", [pod("s-0", annotations={"gputopo.io/gang-id": "jobset/big"})], "big", ["ml/s-0"]),
    ("gang-with-no-pods", [pod("a-0", labels={"gputopo.io/gang": "a"})], "nope", []),
]  # fmt: skip


@pytest.mark.parametrize(("case", "pods", "gang", "want"), SELECTED, ids=[c[0] for c in SELECTED])
def test_gated_pods_selects_what_gputopos_gate_holds(
    case: str, pods: list[dict[str, Any]], gang: str | None, want: list[str]
) -> None:
    assert [str(p) for p in gated_pods(pods, gang)] == want, case


def test_a_leaderworkerset_group_is_a_gang_of_its_own() -> None:
    labels = {"leaderworkerset.sigs.k8s.io/name": "lws", "leaderworkerset.sigs.k8s.io/group-index": "2"}
    assert {"lws-2", "leaderworkerset/lws-2"} <= gang_names(pod("lws-2-0", labels=labels))


LIFTED = [
    ("only-gputopos", (GATE,), []),
    ("kueues-kept-in-place", (KUEUE_GATE, GATE), [KUEUE_GATE]),
    ("every-copy", (GATE, "example.com/hold", GATE), ["example.com/hold"]),
]


@pytest.mark.parametrize(("case", "gates", "kept"), LIFTED, ids=[c[0] for c in LIFTED])
def test_lift_patch_removes_only_gputopos_gate(case: str, gates: tuple[str, ...], kept: list[str]) -> None:
    body = pod("a-0", gates=gates)
    after = jsonpatch.apply_patch(body, lift_patch(gates))
    assert [g["name"] for g in after["spec"]["schedulingGates"]] == kept, case


def test_lift_patch_does_not_apply_once_the_gates_changed() -> None:
    read = (GATE,)
    meanwhile = pod("a-0", gates=(GATE, "example.com/added-meanwhile"))
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(meanwhile, lift_patch(read))


REFUSED = [
    ("nothing-named", [], "--all, or --namespace"),
    ("all-and-namespace", ["--all", "-n", "ml"], "--all, or --namespace"),
    ("gang-without-namespace", ["--all", "--gang", "a"], "--gang: a gang is named within a namespace"),
    ("empty-gang", ["-n", "ml", "--gang", " "], "--gang: empty"),
]


@pytest.mark.parametrize(("case", "args", "message"), REFUSED, ids=[c[0] for c in REFUSED])
def test_bad_arguments_are_one_line_errors(case: str, args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["ungate", *args])
    assert result.exit_code == 2, case
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.output


def test_the_uninstall_hooks_command_needs_only_the_operator_images_dependencies() -> None:
    """The chart's hook runs ``python -m gputopo.cli.ungate`` in the operator image, which has no NVML binding and
    no probe fakes: the module must not load them (the whole ``gputopo`` CLI does, through the sandbox)."""
    code = (
        "import sys, gputopo.cli.ungate\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'pynvml', 'gputopo_probe', 'grpc'}"
        " or m.startswith(('gputopo.sandbox', 'gputopo.controller'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
