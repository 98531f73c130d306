"""Render docs/topology-example.svg: the Kunpeng 920 fixture with four planned instances.

Usage: .venv/bin/python scripts/render_topology_example.py
"""

import pathlib
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "collections"))

from ansible_collections.llmops.vllm.plugins.module_utils._gpu import collect_gpu  # noqa: E402
from ansible_collections.llmops.vllm.plugins.module_utils._numa import collect_numa  # noqa: E402
from ansible_collections.llmops.vllm.plugins.module_utils._placement import vllm_placement  # noqa: E402
from ansible_collections.llmops.vllm.plugins.module_utils._topology_findings import topology_findings  # noqa: E402
from ansible_collections.llmops.vllm.plugins.module_utils._topology_report import render_svg  # noqa: E402
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import (  # noqa: E402
    KUNPENG920_8xA100,
    fake_nvml,
    write_sysfs,
)

INSTANCES = [
    {"name": "qwen-tp4", "device": "cuda", "tensor_parallel_size": 4},
    {"name": "llama-tp2", "device": "cuda", "tensor_parallel_size": 2},
    {"name": "embed", "device": "cuda"},
    {"name": "cpu-batch", "device": "cpu", "cpus_per_instance": 16},
]


def main():
    root = write_sysfs(pathlib.Path(tempfile.mkdtemp()) / "kunpeng", KUNPENG920_8xA100)
    gpu, numa = collect_gpu(fake_nvml(KUNPENG920_8xA100), root), collect_numa(root)
    placements = vllm_placement(INSTANCES, gpu, numa, reserved_cpus="0-1", host="gpu-node01")
    svg = render_svg(gpu, numa, topology_findings(gpu, numa), placements, "gpu-node01")
    (REPO / "docs" / "topology-example.svg").write_text(svg)


if __name__ == "__main__":
    main()
