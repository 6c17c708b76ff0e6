"""The sandbox's placement-gate policy: rendered by `helm template --show-only` of the chart's template for the
operator's namespace, applied, and waited for until a dry-run GPU pod of a gang (in a namespace opted into
gating) comes back gated; helm missing,
a render of other kinds and a policy that never takes effect are SandboxErrors."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from gputopo.gangs.model import GATE
from gputopo.sandbox import SandboxError, admission
from gputopo.sandbox.cluster import Sandbox

POLICY = """\
---
# Source: gputopo/templates/operator/gang-gate-policy.yaml
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: gputopo-placement-gate
---
# Source: gputopo/templates/operator/gang-gate-policy.yaml
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: gputopo-placement-gate
"""


def fake_helm(tmp_path: Path, output: str) -> tuple[Path, Path]:
    """A helm that records its arguments and prints ``output``."""
    args = tmp_path / "helm-args"
    helm = tmp_path / "helm"
    (tmp_path / "out.yaml").write_text(output)
    helm.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {args}\ncat {tmp_path / "out.yaml"}\n')
    helm.chmod(helm.stat().st_mode | stat.S_IXUSR)
    return helm, args


def test_the_policy_is_rendered_from_the_chart_for_the_release_namespace(tmp_path: Path) -> None:
    helm, args = fake_helm(tmp_path, POLICY)
    docs = admission.render_gate_policy(helm, "gputopo-system")
    assert [d["kind"] for d in docs] == ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"]
    argv = args.read_text().splitlines()
    assert argv[:3] == ["template", admission.RELEASE, str(admission.chart_dir())]
    assert argv[3:] == ["-n", "gputopo-system", "--show-only", "templates/operator/gang-gate-policy.yaml"]
    assert (admission.chart_dir() / argv[-1]).is_file()


def test_a_render_without_the_policy_is_an_error(tmp_path: Path) -> None:
    helm, _ = fake_helm(tmp_path, POLICY[: POLICY.index("---", 4)])  # the policy without its binding
    with pytest.raises(SandboxError, match="rendered"):
        admission.render_gate_policy(helm, "default")


def test_without_helm_the_error_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match=r"build-k8s\.sh"):
        admission.render_gate_policy(tmp_path / "helm", "default")


class FakeKubectl:
    """Applies anything; a dry-run pod comes back gated from the ``gated_after``-th try on."""

    def __init__(self, gated_after: int | None) -> None:
        self.calls: list[tuple[tuple[str, ...], str | None]] = []
        self.gated_after = gated_after
        self.tries = 0

    def __call__(self, *args: str, input: str | None = None, check: bool = True) -> str:
        self.calls.append((args, input))
        if args[0] in ("apply", "label"):
            return ""
        self.tries += 1
        pod: dict[str, Any] = json.loads(input or "{}")
        if self.gated_after is not None and self.tries >= self.gated_after:
            pod["spec"]["schedulingGates"] = [{"name": GATE}]
        return json.dumps(pod)


def test_install_applies_the_rendered_objects_and_waits_for_the_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admission.time, "sleep", lambda s: None)
    kubectl = FakeKubectl(gated_after=3)
    docs = [{"kind": "MutatingAdmissionPolicy"}, {"kind": "MutatingAdmissionPolicyBinding"}]
    admission.install_gate_policy(kubectl, docs, timeout=60)
    (label_args, _), (apply_args, applied), *probes = kubectl.calls
    # Gating is opt-in: the namespace of the dry-run pod is labelled before it is asked.
    assert label_args == ("label", "namespace", admission.PROBE_NAMESPACE, "gputopo.io/gating=enabled", "--overwrite")
    assert apply_args[:2] == ("apply", "--server-side")
    assert [json.loads(d)["kind"] for d in (applied or "").split("\n---\n")] == [d["kind"] for d in docs]
    assert len(probes) == 3
    assert all("--dry-run=server" in args and admission.PROBE_NAMESPACE in args for args, _ in probes)


def test_a_policy_that_never_gates_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admission.time, "sleep", lambda s: None)
    with pytest.raises(SandboxError, match="did not take effect"):
        admission.install_gate_policy(FakeKubectl(gated_after=None), [], timeout=0)


def test_the_release_namespace_is_the_operators(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GPUTOPO_OPERATOR_NAMESPACE", raising=False)
    assert Sandbox("x", root=tmp_path).operator_namespace == "default"
    monkeypatch.setenv("GPUTOPO_OPERATOR_NAMESPACE", "gputopo-system")
    assert Sandbox("x", root=tmp_path).operator_namespace == "gputopo-system"
