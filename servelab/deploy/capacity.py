"""How many replicas a load needs, and how many nodes hold them: the autoscaler's arithmetic, then the scheduler's.

The HorizontalPodAutoscaler adds pods until their average CPU use is its target share of what each pod
*requests*; the scheduler then places a pod only on a node whose allocatable CPU and memory still cover the
pod's requests. A replica count that ignores the second step can name pods no node can hold.

    shape = pod_shape()                                  # requests and HPA bounds, read from k8s/base
    plan = replica_plan(20.0, per_core_img_s=3.1, node_cores=2, node_memory_mb=24_000, pod_rss_mb=690, shape=shape)
    plan.replicas, plan.pods_per_node, plan.nodes, plan.limited_by, plan.memory_request_too_low

Allocatable is the node's capacity less what the kubelet keeps back: by default only its hard-eviction
threshold of 100 MiB of memory (a kind node sets no other reserve; managed clusters reserve more CPU and
memory through kubeReserved/systemReserved, so pass those in `reserved_cpu` and `reserved_memory_mb`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from servelab.errors import InvalidValue

KUBELET_EVICTION_MB = 100.0  # the kubelet's default evictionHard memory.available<100Mi
_UNITS_MB = {"Ki": 1 / 1024, "Mi": 1.0, "Gi": 1024.0, "Ti": 1024.0**2, "k": 1e3 / 2**20, "M": 1e6 / 2**20,
             "G": 1e9 / 2**20, "T": 1e12 / 2**20, "": 1 / 2**20}


def cpu_cores(quantity: str | int | float) -> float:
    """A Kubernetes CPU quantity in cores: "1" -> 1.0, "500m" -> 0.5."""
    text = str(quantity).strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(m?)", text)
    if not m:
        raise InvalidValue(f"not a CPU quantity (like '1' or '500m'): {quantity!r}")
    return float(m[1]) / (1000 if m[2] else 1)


def memory_mb(quantity: str | int | float) -> float:
    """A Kubernetes memory quantity in MiB: "1Gi" -> 1024, "512Mi" -> 512, "1G" -> 953.7."""
    text = str(quantity).strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T|)", text)
    if not m:
        raise InvalidValue(f"not a memory quantity (like '1Gi' or '512Mi'): {quantity!r}")
    return float(m[1]) * _UNITS_MB[m[2]]


@dataclass(frozen=True)
class PodShape:
    """What one replica asks of a node, and the autoscaler's bounds, as the manifests say."""

    cpu_request: float       # cores
    memory_request_mb: float
    cpu_target: float        # the HPA's averageUtilization, as a fraction of the CPU request
    min_replicas: int
    max_replicas: int


def pod_shape(k8s_dir: str | Path | None = None) -> PodShape:
    """The servelab container's requests (deployment.yaml) and the HPA's target and bounds (hpa.yaml)."""
    base = Path(k8s_dir) if k8s_dir else Path(__file__).resolve().parents[2] / "k8s" / "base"
    deployment = yaml.safe_load((base / "deployment.yaml").read_text())
    hpa = yaml.safe_load((base / "hpa.yaml").read_text())
    container = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "servelab")
    requests = container["resources"]["requests"]
    cpu_metric = next(m for m in hpa["spec"]["metrics"] if m["type"] == "Resource" and m["resource"]["name"] == "cpu")
    return PodShape(cpu_request=cpu_cores(requests["cpu"]), memory_request_mb=memory_mb(requests["memory"]),
                    cpu_target=cpu_metric["resource"]["target"]["averageUtilization"] / 100,
                    min_replicas=int(hpa["spec"]["minReplicas"]), max_replicas=int(hpa["spec"]["maxReplicas"]))


@dataclass(frozen=True)
class ReplicaPlan:
    """The autoscaler's replica count for a load, and the nodes the scheduler needs to place them."""

    replicas: int               # what the HPA settles at (before its min/max bounds)
    per_pod_img_s: float        # one pod's throughput at the HPA's CPU target
    pods_per_node: int          # how many pods' requests fit a node's allocatable CPU and memory
    limited_by: str             # "cpu" or "memory": which request fills the node first
    nodes: int                  # nodes needed to hold `replicas` (0 when no pod fits a node)
    allocatable_cpu: float
    allocatable_memory_mb: float
    memory_request_too_low: bool  # the pod's measured memory is above its request: the packing is optimistic
    above_hpa_max: bool


def replica_plan(load_img_s: float, per_core_img_s: float, node_cores: float, node_memory_mb: float,
                 shape: PodShape, pod_rss_mb: float | None = None, reserved_cpu: float = 0.0,
                 reserved_memory_mb: float = KUBELET_EVICTION_MB) -> ReplicaPlan:
    """Replicas for `load_img_s` at the HPA's target, then how many of them a node of `node_cores` and
    `node_memory_mb` holds (allocatable = capacity - reserves) and so how many such nodes the load needs."""
    if load_img_s <= 0 or per_core_img_s <= 0:
        raise InvalidValue(f"load and per-core throughput must be > 0, got {load_img_s} and {per_core_img_s}")
    if node_cores <= 0 or node_memory_mb <= 0:
        raise InvalidValue(f"a node needs cores and memory > 0, got {node_cores} and {node_memory_mb}")
    per_pod = per_core_img_s * shape.cpu_request * shape.cpu_target
    replicas = math.ceil(load_img_s / per_pod - 1e-9)
    alloc_cpu = max(0.0, node_cores - reserved_cpu)
    alloc_mem = max(0.0, node_memory_mb - reserved_memory_mb)
    by_cpu = math.floor(alloc_cpu / shape.cpu_request + 1e-9)
    by_mem = math.floor(alloc_mem / shape.memory_request_mb + 1e-9)
    fit = min(by_cpu, by_mem)
    return ReplicaPlan(replicas=replicas, per_pod_img_s=per_pod, pods_per_node=fit,
                       limited_by="cpu" if by_cpu <= by_mem else "memory",
                       nodes=math.ceil(replicas / fit) if fit else 0,
                       allocatable_cpu=alloc_cpu, allocatable_memory_mb=alloc_mem,
                       memory_request_too_low=bool(pod_rss_mb and pod_rss_mb > shape.memory_request_mb),
                       above_hpa_max=replicas > shape.max_replicas)
