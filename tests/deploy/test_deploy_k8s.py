"""k8s/: every manifest deserialised into the official Kubernetes Python client's model for its kind (required
fields enforced, unknown fields detected by a round trip), kustomizations whose resources and patches resolve,
and the overlay's result (patches merged the way strategic merge patch does for these lists) validated again.
No kustomize binary or cluster here: the merge below covers what these manifests use (maps; lists of objects
keyed by `name`)."""

from __future__ import annotations

import copy
import inspect
import json
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from tests.deploy.conftest import DEPLOY_NOTES, REPO_ROOT

K8S = REPO_ROOT / "k8s"
KUSTOMIZATIONS = sorted(K8S.rglob("kustomization.yaml"))


def _deserialize(api, obj: dict, name: str):
    """ApiClient.deserialize of a fake API response (the signature changed across client versions)."""
    params = inspect.signature(api.deserialize).parameters
    if "response_text" in params:
        return api.deserialize(json.dumps(obj), name, "application/json")

    class _Response:
        data = json.dumps(obj)

    return api.deserialize(_Response(), name)


def model_name(obj: dict) -> str:
    version = obj["apiVersion"].split("/")[-1]
    return f"{version[0].upper()}{version[1:]}{obj['kind']}"


def _strip_empty(x):
    if isinstance(x, dict):
        return {k: _strip_empty(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_strip_empty(v) for v in x]
    return x


def unknown_fields(original, roundtrip, path="") -> list[str]:
    out = []
    if isinstance(original, dict):
        for k, v in original.items():
            if not isinstance(roundtrip, dict) or k not in roundtrip:
                out.append(f"{path}.{k}")
            else:
                out += unknown_fields(v, roundtrip[k], f"{path}.{k}")
    elif isinstance(original, list):
        for i, (a, b) in enumerate(zip(original, roundtrip or [])):
            out += unknown_fields(a, b, f"{path}[{i}]")
    return out


def validate(obj: dict) -> object:
    """Deserialize into the client's model; raise AssertionError naming unknown or invalid fields."""
    api = client.ApiClient()
    name = model_name(obj)
    assert hasattr(client, name), f"no Kubernetes model {name} for {obj['apiVersion']} {obj['kind']}"
    model = _deserialize(api, obj, name)  # raises ValueError on missing required fields / bad enums
    back = _strip_empty(api.sanitize_for_serialization(model))
    unknown = unknown_fields(obj, back)
    assert not unknown, f"{obj['kind']}/{obj['metadata']['name']}: unknown fields {unknown}"
    return model


def manifests() -> list[tuple[Path, dict]]:
    out = []
    for path in sorted(K8S.rglob("*.yaml")):
        if path.name == "kustomization.yaml" or path.parent.name == "kind":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out.append((path, doc))
    return out


@pytest.mark.parametrize("path,obj", manifests(), ids=lambda x: x.name if isinstance(x, Path) else x["kind"])
def test_manifest_matches_the_api_schema(path, obj):
    DEPLOY_NOTES.append("Kubernetes manifests validated by deserialising into the official kubernetes client's models "
                        f"(kubernetes {client.__version__ if hasattr(client, '__version__') else ''}); no cluster here")
    if path.parent.name == "gpu" and "Deployment" == obj["kind"]:
        pytest.skip("a strategic-merge patch, validated merged in test_gpu_overlay_renders_to_valid_objects")
    validate(obj)


def test_validator_rejects_typos_and_missing_required_fields():
    bad = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
           "spec": {"selector": {"matchLabels": {"a": "b"}}, "replica": 2,
                    "template": {"spec": {"containers": [{"name": "c", "image": "i:1"}]}}}}
    with pytest.raises(AssertionError, match="replica"):
        validate(bad)
    with pytest.raises(ValueError):
        validate({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
                  "spec": {"template": {}}})  # selector is required


def smp_merge(base, patch):
    """Strategic-merge subset: maps merge, lists of maps with `name` merge by name, other values replace."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            out[k] = smp_merge(base[k], v) if k in base else copy.deepcopy(v)
        return out
    if isinstance(base, list) and isinstance(patch, list) and all(isinstance(x, dict) and "name" in x for x in base + patch):
        out = [copy.deepcopy(x) for x in base]
        for item in patch:
            idx = next((i for i, x in enumerate(out) if x["name"] == item["name"]), None)
            if idx is None:
                out.append(copy.deepcopy(item))
            else:
                out[idx] = smp_merge(out[idx], item)
        return out
    return copy.deepcopy(patch)


def build(kdir: Path) -> list[dict]:
    """A small `kustomize build`: resources (files or directories), namespace, images, patches with targets."""
    k = yaml.safe_load((kdir / "kustomization.yaml").read_text())
    assert k["apiVersion"] == "kustomize.config.k8s.io/v1beta1" and k["kind"] == "Kustomization"
    objs = []
    for res in k.get("resources", []):
        p = (kdir / res).resolve()
        assert p.exists(), f"{kdir}/kustomization.yaml: resource {res} does not exist"
        if p.is_dir():
            assert (p / "kustomization.yaml").is_file(), f"{res}: a directory resource needs a kustomization.yaml"
            objs += build(p)
        else:
            objs += [d for d in yaml.safe_load_all(p.read_text()) if d]
    if "namespace" in k:
        for o in objs:
            if o["kind"] != "Namespace":
                o["metadata"]["namespace"] = k["namespace"]
    for img in k.get("images", []):
        for o in objs:
            for c in o.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
                name = c["image"].rsplit(":", 1)[0]
                if name == img["name"]:
                    c["image"] = f"{img.get('newName', name)}:{img.get('newTag', c['image'].rsplit(':', 1)[1])}"
    for patch in k.get("patches", []):
        target = patch["target"]
        matches = [o for o in objs if o["kind"] == target["kind"] and o["metadata"]["name"] == target["name"]
                   and o["apiVersion"].split("/")[-1] == target.get("version", o["apiVersion"].split("/")[-1])]
        assert len(matches) == 1, f"{kdir}: patch {patch['path']} targets {target}, found {len(matches)} resources"
        body = yaml.safe_load((kdir / patch["path"]).read_text())
        assert body["kind"] == target["kind"] and body["metadata"]["name"] == target["name"]
        objs[objs.index(matches[0])] = smp_merge(matches[0], body)
    return objs


@pytest.mark.parametrize("kfile", KUSTOMIZATIONS, ids=lambda p: str(p.parent.relative_to(K8S)))
def test_kustomization_builds_to_valid_objects(kfile):
    objs = build(kfile.parent)
    kinds = {o["kind"] for o in objs}
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget", "ResourceQuota"} <= kinds
    for o in objs:
        validate(o)


def _by_kind(objs):
    return {o["kind"]: o for o in objs}


def test_base_semantics():
    objs = _by_kind(build(K8S / "base"))
    dep, svc, hpa, pdb = objs["Deployment"], objs["Service"], objs["HorizontalPodAutoscaler"], objs["PodDisruptionBudget"]
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz" and c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["resources"]["requests"] and c["resources"]["limits"]
    assert ":" in c["image"] and not c["image"].endswith(":latest")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())
    assert all(labels.get(k) == v for k, v in pdb["spec"]["selector"]["matchLabels"].items())
    port_names = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert svc["spec"]["ports"][0]["targetPort"] in port_names
    env = {e["name"]: e["value"] for e in c["env"]}
    assert int(env["SERVELAB_PORT"]) == port_names["http"] and env["SERVELAB_HOST"] == "0.0.0.0"
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 6)
    assert hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 60
    assert hpa["spec"]["scaleTargetRef"]["name"] == dep["metadata"]["name"]
    assert pdb["spec"]["minAvailable"] < hpa["spec"]["minReplicas"]
    assert dep["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    assert dep["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 10001  # the images' user


def test_gpu_overlay_renders_to_valid_objects():
    objs = _by_kind(build(K8S / "overlays" / "gpu"))
    c = objs["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1" and c["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert c["image"] == "servelab:gpu-baked-0.1.0"
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["SERVELAB_PROVIDER"] == "cuda" and env["SERVELAB_ENGINE"] == "onnx"  # merged, not replaced
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"  # base probes survive the patch
    quota = objs["ResourceQuota"]["spec"]["hard"]
    assert int(quota["requests.nvidia.com/gpu"]) >= objs["HorizontalPodAutoscaler"]["spec"]["maxReplicas"]
    for o in objs.values():
        validate(o)


def test_kind_cluster_config():
    cfg = yaml.safe_load((K8S / "kind" / "cluster.yaml").read_text())
    assert cfg["kind"] == "Cluster" and cfg["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    roles = [n["role"] for n in cfg["nodes"]]
    assert roles.count("control-plane") == 1
    for n in cfg["nodes"]:
        tag = n["image"].rsplit(":", 1)[1]
        assert tag.startswith("v") and tag != "latest"
        assert set(n) <= {"role", "image", "extraMounts", "extraPortMappings", "labels", "kubeadmConfigPatches"}
