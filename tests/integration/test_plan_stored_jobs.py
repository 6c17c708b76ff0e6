"""`gputopo plan --job` on a Job as the sandbox's 1.37 API server stores it reads the gang the operator reads from
what the Job controller makes of it: a Job with spec.scheduling whose gang leaves minCount unset, Indexed and
NonIndexed. The Job is read back from the API server and planned; the operator's reader (``read_gangs``) is given
the Job controller's PodGroup and pods as listed; both give the same size and shape.

The pods carry gputopo's placement gate in their template (as the chart's admission policy would add it), so they
stay Pending: nothing runs, and no operator is needed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gputopo.cli.main import app
from gputopo.gangs.claims import Owners
from gputopo.gangs.model import GATE
from gputopo.gangs.read import read_gangs
from gputopo.sandbox.testing import SandboxHandle

NS = "plan-stored-test"
TIER0, TIER1 = "fabric.topograph.run/tier-0", "fabric.topograph.run/tier-1"
CLUSTER = {
    "nodes": [{"name": f"n{i}", "type": "hgx-h100", "labels": {TIER0: "leaf-a", TIER1: "spine-1"}} for i in range(4)]
}


@pytest.fixture(scope="module")
def ns(sandbox: SandboxHandle) -> Any:
    sandbox.kubectl("create", "namespace", NS, check=False)
    yield NS
    sandbox.kubectl("delete", "namespace", NS, "--wait=false", check=False)


def _gang_job(name: str, mode: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "completionMode": mode,
            "completions": 3,
            "parallelism": 3,
            "scheduling": {"schedulingPolicy": {"gang": {}}},
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "schedulingGates": [{"name": GATE}],
                    "containers": [
                        {"name": "rank", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": 8}}}
                    ],
                },
            },
        },
    }


@pytest.mark.parametrize("mode", ["Indexed", "NonIndexed"])
def test_plan_reads_a_stored_gang_job_as_the_operator_reads_the_job_controller_s_objects(
    sandbox: SandboxHandle, ns: str, tmp_path: Path, mode: str
) -> None:
    name = f"gang-{mode.lower()}"
    sandbox.kubectl("apply", "-f", "-", input=json.dumps(_gang_job(name, mode)))
    try:
        stored = sandbox.get_json("job", name, "-n", ns)
        assert stored["spec"]["scheduling"]["schedulingPolicy"] == {"gang": {}}  # minCount stored unset

        def podgroup() -> dict[str, Any] | None:
            groups = sandbox.get_json("podgroups.v1beta1.scheduling.k8s.io", "-n", ns)["items"]
            uid = stored["metadata"]["uid"]
            refs = ((g, r) for g in groups for r in g["metadata"].get("ownerReferences", []))
            return next((g for g, r in refs if r["kind"] == "Job" and r["uid"] == uid), None)

        group = sandbox.wait_for("the Job controller's PodGroup", podgroup, timeout=60)
        assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == 3  # the Job's parallelism

        def pods() -> list[dict[str, Any]] | None:
            got = sandbox.get_json("pods", "-n", ns, "-l", f"batch.kubernetes.io/job-name={name}")["items"]
            return got if len(got) == 3 else None

        members = sandbox.wait_for("the Job's three gated pods", pods, timeout=60)
        owners = Owners(podgroups={(ns, group["metadata"]["name"]): group}, jobs={(ns, name): stored})
        found = read_gangs(members, owners)
        assert not found.refused and not found.unclaimed
        (operator_gang,) = found.gangs
        assert operator_gang.declared is not None and operator_gang.declared.shape == (8, 8, 8)

        job_file, cluster_file = tmp_path / "job.yaml", tmp_path / "cluster.yaml"
        job_file.write_text(yaml.safe_dump(stored))
        cluster_file.write_text(yaml.safe_dump(CLUSTER))
        result = CliRunner().invoke(app, ["plan", "--job", str(job_file), "--cluster", str(cluster_file), "--json"])
        assert result.exit_code == 0, result.stderr
        doc = json.loads(result.stdout)
        assert (doc["source"], doc["namespace"], doc["placed"]) == (operator_gang.id.source, ns, True)
        assert doc["size"] == operator_gang.declared.size
        assert [r["gpuCount"] for r in doc["ranks"]] == list(operator_gang.declared.shape)
    finally:
        sandbox.kubectl("delete", "job", name, "-n", ns, "--cascade=background", "--wait=false", check=False)
