"""`gputopo topo import|show` and `gputopo estimate`, run through the real typer app."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from topo_builders import fixture_names, refused_fixture_names
from typer.testing import CliRunner

from gputopo.api.nodetopology import NodeTopology
from gputopo.cli.main import app
from gputopo.topology import load_node_type, load_topology, parse_nvidia_smi, to_status
from gputopo.topology.catalog import fixture_text
from gputopo.topology.fabric import with_fabric

runner = CliRunner()


@pytest.fixture
def fixtures(tmp_path: Path) -> Path:
    for name in fixture_names():
        (tmp_path / name).write_text(fixture_text(name))
    return tmp_path


def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), input=stdin)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("name", fixture_names(), ids=lambda n: n.removesuffix(".txt"))
def test_show_json_for_every_fixture(fixtures: Path, name: str) -> None:
    code, out, err = run("topo", "show", str(fixtures / name), "--json")
    if name in refused_fixture_names():
        assert code == 2 and out == ""
        assert len(err.strip().splitlines()) == 1 and "cut short" in err
        return
    assert code == 0
    doc = json.loads(out)
    t = parse_nvidia_smi(fixture_text(name))
    n = t.gpu_count
    assert doc["gpu_count"] == n and doc["nic_count"] == len(t.nics)
    assert len(doc["kinds"]) == n and all(doc["kinds"][i][i] == "X" for i in range(n))
    assert doc["nvlinks"] == [list(r) for r in t.nvlink_matrix]
    assert doc["interconnect"] in ("nvswitch", "nvlink-mesh", "nvlink-pairs", "pcie")
    assert isinstance(doc["nvlink_domain_size"], int)


def test_show_json_values(fixtures: Path) -> None:
    _, out, _ = run("topo", "show", str(fixtures / "8xH100-NVL-pcie-nvlink-bridge-pairs-nv12.txt"), "--json")
    doc = json.loads(out)
    assert doc["kinds"][0][:4] == ["X", "NV12", "NODE", "NODE"] and doc["kinds"][0][4] == "SYS"
    assert doc["interconnect"] == "nvlink-pairs" and doc["nvlink_domain_size"] == 2
    assert doc["nics"][0]["name"] == "mlx5_0" and doc["nics"][0]["nearest_gpus"] == [1]


def test_show_text_prints_matrix_and_summary(fixtures: Path) -> None:
    code, out, _ = run(
        "topo", "show", str(fixtures / "dgx1-v100-8gpu-cubemesh-4xmlx5.txt"), "--gpu-model", "Tesla V100-SXM2-32GB"
    )
    assert code == 0
    assert out.splitlines()[0].split() == [f"GPU{i}" for i in range(8)] + [f"NIC{j}" for j in range(4)] + [
        "NUMA",
        "Affinity",
    ]
    assert "Interconnect: nvlink-mesh; NVLink domain size 4" in out
    assert "NVLink domains: GPU0-3; GPU4-7" in out
    assert "Volta, NVLink2" in out
    assert "mlx5_0" in out and "nearest GPU0-1 (PIX)" in out


def test_show_reads_yaml_and_stdin(fixtures: Path) -> None:
    code, out, _ = run("topo", "import", str(fixtures / "hgx-h100-8gpu-nv18-8xmlx5-1nic-per-gpu.txt"))
    assert code == 0
    code, shown, _ = run("topo", "show", "-", "--json", stdin=out)
    assert code == 0 and json.loads(shown)["interconnect"] == "nvswitch"


def test_show_node_type_name() -> None:
    code, out, _ = run("topo", "show", "hgx-h100", "--json")
    assert code == 0 and json.loads(out)["gpu_model"] == "NVIDIA H100 80GB HBM3"


def test_import_writes_a_node_topology(fixtures: Path, tmp_path: Path) -> None:
    out_file = tmp_path / "out.yaml"
    code, _, _ = run(
        "topo",
        "import",
        str(fixtures / "alcf-polaris-4xA100-nv4-2xmlx5.txt"),
        "--gpu-model",
        "NVIDIA A100-SXM4-40GB",
        "--node-name",
        "x3005c0s7b0n0",
        "-o",
        str(out_file),
    )
    assert code == 0
    doc = yaml.safe_load(out_file.read_text())
    obj = NodeTopology.model_validate(doc)
    assert doc["kind"] == "NodeTopology" and obj.name == "x3005c0s7b0n0"
    assert obj.status.probe.backend == "nvidia-smi"
    assert {g.model for g in obj.status.gpus} == {"NVIDIA A100-SXM4-40GB"}
    assert load_topology(out_file).nvlinks(0, 3) == 4


def test_estimate_json(fixtures: Path) -> None:
    hgx = str(fixtures / "hgx-h100-8gpu-nv18-8xmlx5-1nic-per-gpu.txt")
    code, out, _ = run("estimate", "--topology", hgx, "--gpus", "0,1,2,3,4,5,6,7", "--gpu-model", "H100", "--json")
    assert code == 0
    doc = json.loads(out)
    assert set(doc) == {"busbw_GBps", "bottleneck"}
    assert doc["busbw_GBps"] == pytest.approx(476.4, abs=0.1)
    code, out, _ = run(
        "estimate",
        "--topology",
        hgx,
        "--gpus",
        "0-7",
        "--gpu-model",
        "H100",
        "--nodes",
        "2",
        "--nic-rate-gbps",
        "400",
        "--json",
    )
    assert code == 0 and json.loads(out)["busbw_GBps"] == pytest.approx(376.0)
    code, out, _ = run("estimate", "--topology", "hgx-h100", "--gpus", "all", "--nodes", "2", "--oversubscription", "2")
    assert code == 0 and "188.0 GB/s" in out


@pytest.mark.parametrize(
    ("nodes", "per_domain", "domains", "where"),
    [
        ("2", "18", [2], "intra-domain"),
        ("18", "18", [18], "intra-domain"),
        ("24", "18", [12, 12], "intra-domain"),
        ("24", "8", [8, 8, 8], "intra-domain"),  # 32 NICs per rack outrun the NVLink figure
        ("4", "2", [2, 2], "inter-domain"),
        ("3", "1", [1, 1, 1], "inter-domain"),
    ],
    ids=["2-trays-1-rack", "full-rack", "24-over-2-racks", "24-in-slices-of-8", "2x2", "a-tray-per-rack"],
)
def test_estimate_nvlink_domains(nodes: str, per_domain: str, domains: list[int], where: str) -> None:
    args = ("--topology", "gb200-tray", "--gpu-model", "NVIDIA GB200", "--nodes", nodes, "--nic-rate-gbps", "400")
    code, out, _ = run("estimate", *args, "--nodes-per-domain", per_domain, "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["domains"] == domains and doc["bottleneck"].startswith(where)
    code, out, _ = run("estimate", *args, "--json")
    assert code == 0 and json.loads(out)["busbw_GBps"] <= doc["busbw_GBps"], "a domain never loses to NICs alone"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("estimate", "--topology", "hgx-h100", "--gpus", "0,9", "--json"), "no GPU9"),
        (("estimate", "--topology", "hgx-h100", "--gpus", "a,b"), "not a GPU index"),
        (("estimate", "--topology", "hgx-h100", "--gpus", "1,1"), "twice"),
        (("estimate", "--topology", "hgx-h100", "--gpus", "0", "--nodes", "0"), "--nodes"),
        (("estimate", "--topology", "gb200-tray", "--nodes", "2", "--nodes-per-domain", "0"), "--nodes-per-domain"),
        (("estimate", "--topology", "/no/such/file", "--gpus", "0", "--json"), "no such file"),
        (("topo", "show"), "FILE or --node"),
        (("topo", "import", "/no/such/file"), "no such file"),
    ],
)
def test_errors_exit_2_on_stderr(args: tuple[str, ...], message: str) -> None:
    code, out, err = run(*args)
    assert code == 2
    assert out == ""
    assert message in err and err.startswith("error: ")


def test_malformed_matrix_names_line_and_token(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\tWHAT\n")
    code, out, err = run("topo", "show", str(bad), "--json")
    assert code == 2 and out == ""
    assert "line 3" in err and "'WHAT'" in err
    code, _, err = run("topo", "import", str(bad))
    assert code == 2 and "line 3" in err


def test_show_node_without_a_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing.kubeconfig"))
    code, out, err = run("topo", "show", "--node", "gpu-1", "--json")
    assert code == 2 and out == "" and err.startswith("error: ")


def test_topo_show_names_the_multi_node_nvlink_domain(tmp_path: Path) -> None:
    tray = with_fabric(load_node_type("gb200-tray"), "0c7a1f52-3b6e-4d2a-9f00-000000000007", 3)
    doc = {"kind": "NodeTopology", "status": to_status(tray).to_api()}
    path = tmp_path / "tray.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, out, _ = run("topo", "show", str(path), "--json")
    assert code == 0
    assert json.loads(out)["multi_node_nvlink"] == {
        "clique": "0c7a1f52-3b6e-4d2a-9f00-000000000007.3", "health": "Healthy", "reason": None,
    }  # fmt: skip
    code, out, _ = run("topo", "show", str(path))
    assert code == 0 and "Multi-node NVLink domain: 0c7a1f52-3b6e-4d2a-9f00-000000000007.3 (Healthy)" in out
    code, out, _ = run("topo", "show", "gb200-tray", "--json")
    assert code == 0 and json.loads(out)["multi_node_nvlink"] is None


GRACE_TRAY = """\
\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tNIC1\tNIC2\tNIC3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV18\tNV18\tNV18\tSYS\tSYS\tSYS\tSYS\t0-71\t0\t\t2
GPU1\tNV18\t X \tNV18\tNV18\tSYS\tSYS\tSYS\tSYS\t0-71\t0\t\t10
GPU2\tNV18\tNV18\t X \tNV18\tSYS\tSYS\tSYS\tSYS\t72-143\t1\t\t18
GPU3\tNV18\tNV18\tNV18\t X \tSYS\tSYS\tSYS\tSYS\t72-143\t1\t\t26
NIC0\tSYS\tSYS\tSYS\tSYS\t X \tSYS\tSYS\tSYS
NIC1\tSYS\tSYS\tSYS\tSYS\tSYS\t X \tSYS\tSYS
NIC2\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t X \tSYS
NIC3\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t X
"""


def test_show_prints_what_a_grace_import_assumed(tmp_path: Path) -> None:
    tray = tmp_path / "tray.txt"
    tray.write_text(GRACE_TRAY)
    code, out, _ = run("topo", "show", str(tray), "--json")
    assert code == 0
    assumed = json.loads(out)["assumptions"]
    assert assumed[0] == "GPU0-3 reach their Grace CPU by NVLink-C2C (GPU NUMA IDs 2,10,18,26)"
    assert assumed[-1] == "NIC roles not stated: all 4 NICs taken as compute rails"
    code, out, _ = run("topo", "show", str(tray))
    assert code == 0 and "Assumed:" in out and "NIC roles not stated" in out
    code, out, _ = run("topo", "show", str(tray), "--no-c2c", "--json")
    assert code == 0 and json.loads(out)["assumptions"] == []


@pytest.mark.parametrize(
    ("version", "busbw"), [("2.25.1", 112.8), ("2.27.3", 188.0), ("2.30.7", 188.0)], ids=["2.25", "2.27.3", "2.30"]
)
def test_estimate_json_on_a_grace_tray_per_nccl_version(tmp_path: Path, version: str, busbw: float) -> None:
    tray = tmp_path / "tray.txt"
    tray.write_text(GRACE_TRAY)
    args = ["estimate", "--topology", str(tray), "--gpu-model", "NVIDIA GB200", "--nodes", "3"]
    code, out, _ = run(*args, "--nic-rate-gbps", "400", "--nccl-version", version, "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["busbw_GBps"] == pytest.approx(busbw)
    assert "NIC roles not stated: all 4 NICs taken as compute rails" in doc["assumptions"]


def test_estimate_refuses_a_bad_nccl_version(tmp_path: Path) -> None:
    tray = tmp_path / "tray.txt"
    tray.write_text(GRACE_TRAY)
    code, _, err = run("estimate", "--topology", str(tray), "--nccl-version", "latest")
    assert code == 2 and "not an NCCL version" in err
