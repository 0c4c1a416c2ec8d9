"""Replica and node arithmetic for the Kubernetes lesson: the autoscaler's count, then what a node holds."""

from __future__ import annotations

import pytest

from servelab.deploy.capacity import PodShape, cpu_cores, memory_mb, pod_shape, replica_plan

SHAPE = PodShape(cpu_request=1.0, memory_request_mb=1024.0, cpu_target=0.6, min_replicas=2, max_replicas=6)


def test_quantities_parse_as_kubernetes_writes_them():
    assert cpu_cores("1") == 1.0 and cpu_cores("500m") == 0.5 and cpu_cores(2) == 2.0
    assert memory_mb("1Gi") == 1024.0 and memory_mb("512Mi") == 512.0
    assert memory_mb("1G") == pytest.approx(953.67, abs=0.01)
    with pytest.raises(ValueError, match="CPU quantity"):
        cpu_cores("one")
    with pytest.raises(ValueError, match="memory quantity"):
        memory_mb("1 GB")


def test_shape_is_read_from_the_manifests():
    shape = pod_shape()
    assert (shape.cpu_request, shape.memory_request_mb) == (1.0, 1024.0)
    assert (shape.cpu_target, shape.min_replicas, shape.max_replicas) == (0.6, 2, 6)


def test_a_two_core_node_holds_two_one_cpu_pods_so_replicas_need_nodes():
    # 3 img/s per core at 60 % of 1 CPU is 1.8 img/s a pod: 20 img/s needs 12 pods, 2 per 2-core node
    plan = replica_plan(20, per_core_img_s=3.0, node_cores=2, node_memory_mb=24_000, shape=SHAPE)
    assert plan.replicas == 12 and plan.pods_per_node == 2 and plan.limited_by == "cpu" and plan.nodes == 6
    assert plan.above_hpa_max


def test_memory_can_fill_a_node_before_cpu():
    plan = replica_plan(5, per_core_img_s=5.0, node_cores=16, node_memory_mb=3 * 1024 + 50, shape=SHAPE)
    # 3 GiB + 50 MiB less the kubelet's 100 MiB eviction reserve holds only two 1 GiB requests
    assert plan.pods_per_node == 2 and plan.limited_by == "memory" and plan.nodes == 1


def test_a_node_too_small_for_one_pod_needs_a_bigger_node_not_more_of_them():
    plan = replica_plan(5, per_core_img_s=5.0, node_cores=0.5, node_memory_mb=8_000, shape=SHAPE)
    assert plan.pods_per_node == 0 and plan.nodes == 0


def test_measured_memory_above_the_request_is_flagged():
    assert replica_plan(5, 5.0, 2, 8_000, SHAPE, pod_rss_mb=1500).memory_request_too_low
    assert not replica_plan(5, 5.0, 2, 8_000, SHAPE, pod_rss_mb=690).memory_request_too_low


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="must be > 0"):
        replica_plan(20, 0, 2, 8_000, SHAPE)
    with pytest.raises(ValueError, match="cores and memory"):
        replica_plan(20, 3, 0, 8_000, SHAPE)
