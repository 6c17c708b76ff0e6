"""Generate the CustomResourceDefinitions in ``crds/`` from the pydantic models of this package.

    python -m gputopo.api.crdgen --out crds          # write
    python -m gputopo.api.crdgen --out crds --check  # exit 1 when the committed YAML has drifted

It also writes the JSON Schemas of the cluster and trace files (``gputopo.api.clusterfile``) for editors,
to ``--schemas`` (default ``schemas/``).

Pydantic's JSON schema is turned into a structural OpenAPI v3 schema: references inlined, ``Optional``
unwrapped, titles dropped, nested objects defaulted to ``{}`` so their own defaults apply, and the
``x-kubernetes-validations`` (CEL) rules of the models kept.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from gputopo.api.clusterfile import file_schemas
from gputopo.api.gangplacement import GangPlacementSpec, GangPlacementStatus
from gputopo.api.group import GROUP, VERSION
from gputopo.api.nodepodgpus import NodePodGpus, NodePodGpusStatus
from gputopo.api.nodetopology import NodeTopologyStatus
from gputopo.api.trainingjob import TrainingJobSpec, TrainingJobStatus

__all__ = ["crds", "main", "render", "structural_schema"]

_DROP = {"title", "additionalProperties"}

# The part of a PodTemplateSpec the schema checks; the rest is kept as written and checked by the pod API.
_POD_TEMPLATE: dict[str, Any] = {
    "type": "object",
    "description": "Pod template of every worker (a PodTemplateSpec).",
    "required": ["spec"],
    "properties": {
        "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "spec": {
            "type": "object",
            "required": ["containers"],
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {
                "containers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "x-kubernetes-preserve-unknown-fields": True,
                        "properties": {"name": {"type": "string", "minLength": 1}},
                    },
                }
            },
        },
    },
}


def structural_schema(model: type[BaseModel], *, defaults: bool) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of a pydantic model, as a CRD version schema wants it."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs: dict[str, Any] = raw.pop("$defs", {})
    return _convert(raw, defs, defaults=defaults)


def _convert(node: dict[str, Any], defs: dict[str, Any], *, defaults: bool) -> dict[str, Any]:
    if node.get("x-gputopo-pod-template"):
        return dict(_POD_TEMPLATE)
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _convert(merged, defs, defaults=defaults)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express a union of {options} in a structural schema")
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        return _convert({**options[0], **rest}, defs, defaults=defaults)

    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "default" and (not defaults or value is None):
            continue
        if key == "properties":
            out["properties"] = {
                name: _property(prop, defs, defaults=defaults, required=name in node.get("required", ()))
                for name, prop in value.items()
            }
        elif key == "items":
            out["items"] = _convert(value, defs, defaults=defaults)
        else:
            out[key] = value
    if out.get("type") == "object" and "properties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def _property(prop: dict[str, Any], defs: dict[str, Any], *, defaults: bool, required: bool) -> dict[str, Any]:
    converted = _convert(prop, defs, defaults=defaults)
    nested_object = converted.get("type") == "object" and "properties" in converted
    if defaults and nested_object and not required and "default" not in converted:
        converted["default"] = {}
    return converted


def _columns() -> list[dict[str, Any]]:
    return [
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Workers", "type": "integer", "jsonPath": ".spec.workers"},
        {
            "name": "GPUs",
            "type": "integer",
            "jsonPath": ".spec.gpusPerWorker",
            "description": "GPUs per worker",
        },
        {
            "name": "BusBW",
            "type": "number",
            "jsonPath": ".status.placement.estimatedBusBandwidthGBps",
            "description": "Estimated all-reduce bus bandwidth of the placement, GB/s",
        },
        {"name": "Restarts", "type": "integer", "jsonPath": ".status.restarts"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]


def _gang_columns() -> list[dict[str, Any]]:
    return [
        {"name": "Source", "type": "string", "jsonPath": ".spec.source"},
        {"name": "Gang", "type": "string", "jsonPath": ".spec.gang"},
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Nodes", "type": "integer", "jsonPath": ".status.nodeCount", "description": "Nodes of the plan"},
        {"name": "GPUs", "type": "integer", "jsonPath": ".status.gpuCount", "description": "GPUs of the plan"},
        {
            "name": "BusBW",
            "type": "number",
            "jsonPath": ".status.estimatedBusBandwidthGBps",
            "description": "Estimated all-reduce bus bandwidth of the placement, GB/s",
        },
        {"name": "Restarts", "type": "integer", "jsonPath": ".status.restarts"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]


def _crd(
    *,
    kind: str,
    plural: str,
    singular: str,
    scope: str,
    short_names: list[str],
    properties: dict[str, Any],
    columns: list[dict[str, Any]],
    description: str,
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": singular,
                "shortNames": short_names,
                "categories": ["gputopo"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": description,
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                **properties,
                            },
                        }
                    },
                }
            ],
        },
    }


def _node_crd(
    *,
    kind: str,
    plural: str,
    singular: str,
    short_name: str,
    description: str,
    status: type[BaseModel],
    status_description: str,
    columns: list[dict[str, Any]],
) -> dict[str, Any]:
    """A cluster-scoped object per node that only the node's probe writes: a status, no spec."""
    return _crd(
        kind=kind,
        plural=plural,
        singular=singular,
        scope="Cluster",
        short_names=[short_name],
        description=description,
        properties={"status": {**structural_schema(status, defaults=False), "description": status_description}},
        columns=[
            *columns,
            {"name": "Observed", "type": "date", "jsonPath": ".status.observedAt"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    )


def crds() -> dict[str, dict[str, Any]]:
    """File name → CRD object, for every resource of the API."""
    trainingjob = _crd(
        kind="TrainingJob",
        plural="trainingjobs",
        singular="trainingjob",
        scope="Namespaced",
        short_names=["tj"],
        description="A gang of training workers that gputopo places together on well-connected GPUs.",
        properties={
            "spec": {**structural_schema(TrainingJobSpec, defaults=True), "description": "What the job needs."},
            "status": {
                **structural_schema(TrainingJobStatus, defaults=False),
                "description": "Where the job runs and how it is doing; written by the operator.",
            },
        },
        columns=_columns(),
    )
    trainingjob["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["required"] = ["spec"]
    # Read-only for people: `kubectl get gangs` (a short name; the plural is gangplacements).
    gangplacement = _crd(
        kind="GangPlacement",
        plural="gangplacements",
        singular="gangplacement",
        scope="Namespaced",
        short_names=["gang", "gangs"],
        description=(
            "Where gputopo placed a gang it does not own (a PodGroup's, Job's, JobSet's, LeaderWorkerSet's, "
            "PyTorchJob's, Kueue pod group's or gputopo.io/gang pods) and how it is doing; written by the operator, "
            "owned by the gang's owner."
        ),
        properties={
            "spec": {
                **structural_schema(GangPlacementSpec, defaults=False),
                "description": "Which gang this is.",
            },
            "status": {
                **structural_schema(GangPlacementStatus, defaults=False),
                "description": "Where the gang runs and how it is doing.",
            },
        },
        columns=_gang_columns(),
    )
    gangplacement["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["required"] = ["spec"]
    nodetopology = _node_crd(
        kind="NodeTopology",
        plural="nodetopologies",
        singular="nodetopology",
        short_name="ntopo",
        description="The GPU interconnect of one node (name = node name); written by the node probe.",
        status=NodeTopologyStatus,
        status_description="Discovered GPUs, links, NICs and their health.",
        columns=[
            {"name": "Model", "type": "string", "jsonPath": ".status.gpus[0].model"},
            {"name": "NVSwitch", "type": "boolean", "jsonPath": ".status.system.nvswitch"},
            {"name": "Driver", "type": "string", "jsonPath": ".status.system.driverVersion"},
        ],
    )
    nodepodgpus = _node_crd(
        kind=NodePodGpus.kind,
        plural=NodePodGpus.plural,
        singular="nodepodgpus",
        short_name="npg",
        description="Which GPUs the kubelet gave each pod on one node (name = node name); written by the node probe.",
        status=NodePodGpusStatus,
        status_description="The pods holding GPUs, from the kubelet's PodResources API.",
        columns=[{"name": "Pods", "type": "string", "jsonPath": ".status.pods[*].name"}],
    )
    return {
        "trainingjobs.yaml": trainingjob,
        "gangplacements.yaml": gangplacement,
        "nodetopologies.yaml": nodetopology,
        "nodepodgpus.yaml": nodepodgpus,
    }


def render(crd: dict[str, Any]) -> str:
    header = "# Generated from gputopo.api by `python -m gputopo.api.crdgen`; do not edit by hand.\n"
    return header + yaml.safe_dump(crd, sort_keys=False, width=110, allow_unicode=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("crds"))
    parser.add_argument("--schemas", type=Path, default=Path("schemas"), help="where the file schemas go")
    parser.add_argument("--check", action="store_true", help="fail when the files differ from the models")
    args = parser.parse_args(argv)
    drifted = []
    outputs = {args.out / name: render(crd) for name, crd in crds().items()}
    for name, schema in file_schemas().items():
        outputs[args.schemas / name] = json.dumps(schema, indent=2) + "\n"
    for path, text in outputs.items():
        if args.check:
            if not path.exists() or path.read_text() != text:
                drifted.append(str(path))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    if drifted:
        print(f"out of date: {', '.join(drifted)}; run python -m gputopo.api.crdgen --out {args.out}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
