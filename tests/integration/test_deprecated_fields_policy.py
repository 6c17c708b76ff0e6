"""The chart's warning on the deprecated TrainingJob field spec.priority, against the sandbox's real
kube-apiserver: applied as rendered, a TrainingJob with spec.priority is accepted with a warning naming
spec.priorityClassName; one that names a class gets none."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest
from chart_helpers import find, render

from gputopo.sandbox.harness import training_job
from gputopo.sandbox.testing import SandboxHandle

NS = "gputopo-deprecated-fields"


@pytest.fixture(scope="module")
def policy(sandbox: SandboxHandle) -> Iterator[SandboxHandle]:
    docs = render()
    name = next(
        d["metadata"]["name"]
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"].endswith("-deprecated-fields")
    )
    objects = [find(docs, "ValidatingAdmissionPolicy", name), find(docs, "ValidatingAdmissionPolicyBinding", name)]
    sandbox.kubectl("create", "namespace", NS, check=False)
    sandbox.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))
    yield sandbox
    sandbox.kubectl("delete", "namespace", NS, "--wait=false", check=False)
    sandbox.kubectl("delete", "validatingadmissionpolicybinding", objects[1]["metadata"]["name"], check=False)
    sandbox.kubectl("delete", "validatingadmissionpolicy", objects[0]["metadata"]["name"], check=False)


def _create(sandbox: SandboxHandle, manifest: dict[str, object]) -> subprocess.CompletedProcess[str]:
    argv = [str(sandbox.bin_dir / "kubectl"), "--kubeconfig", str(sandbox.kubeconfig), "create", "--dry-run=server"]
    return subprocess.run([*argv, "-f", "-"], input=json.dumps(manifest), capture_output=True, text=True, check=False)


def test_spec_priority_is_accepted_with_a_warning_naming_the_field_to_use(policy: SandboxHandle) -> None:
    def warned() -> str | None:
        out = _create(policy, training_job("old", NS, priority=10))
        assert out.returncode == 0, out.stderr
        return out.stderr if "spec.priority is deprecated" in out.stderr else None

    stderr = policy.wait_for("the warning policy to take effect", warned, timeout=30, every=0.5)
    assert "Warning" in stderr and "spec.priorityClassName" in stderr


def test_a_job_naming_a_class_gets_no_warning(policy: SandboxHandle) -> None:
    policy.wait_for(
        "the warning policy to take effect",
        lambda: "deprecated" in _create(policy, training_job("old", NS, priority=10)).stderr,
        timeout=30,
        every=0.5,
    )
    out = _create(policy, training_job("new", NS, priorityClassName="research"))
    assert out.returncode == 0, out.stderr
    assert "deprecated" not in out.stderr
