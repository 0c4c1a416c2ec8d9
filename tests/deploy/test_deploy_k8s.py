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
        for i, (a, b) in enumerate(zip(original, roundtrip or [], strict=False)):
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
    if path.parent.name == "gpu" and obj["kind"] in ("Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget"):
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
    """Strategic-merge subset: maps merge (a null value deletes the key), lists of maps with `name` merge by
    name, other values replace."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
                continue
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
    assert c["startupProbe"]["httpGet"]["path"] == "/readyz", "started means the model loaded, not merely listening"
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
    for o in objs.values():
        validate(o)


def _gpus_needed(objs) -> dict:
    """GPUs the overlay needs at its steady state, during a rolling update, and at the HPA's maximum."""
    dep, hpa = objs["Deployment"], objs["HorizontalPodAutoscaler"]["spec"]
    per_pod = int(dep["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"])
    replicas = max(dep["spec"]["replicas"], hpa["minReplicas"])
    roll = dep["spec"]["strategy"]["rollingUpdate"]
    return {"steady": replicas * per_pod, "rollout": (replicas + int(roll["maxSurge"])) * per_pod,
            "max": hpa["maxReplicas"] * per_pod, "max_unavailable": int(roll["maxUnavailable"])}


def test_gpu_overlay_rolls_out_on_a_one_gpu_node():
    """On a node with one GPU every pod the overlay asks for must fit: no second replica, no surge pod waiting
    forever for a second GPU (which would stall `rollout status`), an HPA that never asks for one, and a PDB
    that lets a drain evict the single pod. Checked against the base, which needs several GPUs."""
    objs = _by_kind(build(K8S / "overlays" / "gpu"))
    need = _gpus_needed(objs)
    assert need["steady"] <= 1 and need["rollout"] <= 1 and need["max"] <= 1, need
    assert need["max_unavailable"] >= 1  # with maxSurge 0 the old pod must be allowed to go first
    pdb, dep = objs["PodDisruptionBudget"]["spec"], objs["Deployment"]["spec"]
    assert "minAvailable" not in pdb and pdb["maxUnavailable"] >= 1  # one replica: minAvailable 1 blocks drains
    quota = objs["ResourceQuota"]["spec"]["hard"]
    assert int(quota["requests.nvidia.com/gpu"]) >= max(need["rollout"], need["max"])
    base = _by_kind(build(K8S / "base"))  # the same arithmetic says the CPU base would not fit one GPU
    base_dep = base["Deployment"]["spec"]
    assert base_dep["replicas"] + int(base_dep["strategy"]["rollingUpdate"]["maxSurge"]) > 1
    assert dep["selector"] == base_dep["selector"]


STANDIN = '#!/bin/bash\necho "$(basename "$0") $*" >> "$RECORD"\n'
STANDINS = {
    "docker": STANDIN, "nvidia-ctk": STANDIN, "systemctl": STANDIN,
    "sudo": '#!/bin/bash\necho "sudo $*" >> "$RECORD"\nexec "$@"\n',
    "id": "#!/bin/bash\necho 1000\n",
    "kind": ('#!/bin/bash\necho "kind $*" >> "$RECORD"\n'
             '[ "$1 $2" = "get clusters" ] && [ -f "$RECORD.cluster" ] && echo servelab\n'
             '[ "$1 $2" = "create cluster" ] && touch "$RECORD.cluster"\nexit 0\n'),
    "kubectl": '#!/bin/bash\necho "kubectl $*" >> "$RECORD"\ncase "$*" in *allocatable*) echo 1;; esac\nexit 0\n',
}


def test_kind_gpu_recipe_runs_every_step_in_order(tmp_path):
    """scripts/kind_gpu_cluster.sh against recording stand-ins: host runtime, cluster, toolkit inside the kind
    node, device plugin, image, overlay, rollout — in that order, with the names the manifests use."""
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in STANDINS.items():
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    record = tmp_path / "record"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "RECORD": str(record), "HOME": str(tmp_path)}
    for _ in (1, 2):  # idempotent: the second run reuses the cluster
        out = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "kind_gpu_cluster.sh")], cwd=REPO_ROOT, env=env,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
    calls = [c for c in record.read_text().splitlines() if not c.startswith("sudo ")]
    first_run = calls[:calls.index("kubectl -n servelab rollout status deploy/servelab --timeout=15m") + 1]

    def at(prefix):
        return next(i for i, c in enumerate(first_run) if c.startswith(prefix))

    cluster = yaml.safe_load((K8S / "kind" / "cluster.yaml").read_text())
    overlay = yaml.safe_load((K8S / "overlays" / "gpu" / "kustomization.yaml").read_text())
    image = f"servelab:{overlay['images'][0]['newTag']}"
    order = [at("nvidia-ctk runtime configure --runtime=docker --set-as-default"),
             at("nvidia-ctk config --set accept-nvidia-visible-devices-as-volume-mounts=true"),
             at("systemctl restart docker"),
             at(f"kind create cluster --name {cluster['name']} --config k8s/kind/cluster.yaml"),
             at(f"docker exec {cluster['name']}-control-plane bash -euc"),
             at("kubectl apply -f https://raw.githubusercontent.com/NVIDIA/k8s-device-plugin/v"),
             at(f"kind load docker-image {image} --name {cluster['name']}"),
             at("kubectl apply -k k8s/overlays/gpu"),
             at("kubectl -n servelab rollout status deploy/servelab")]
    assert order == sorted(order), first_run
    script = (REPO_ROOT / "scripts" / "kind_gpu_cluster.sh").read_text()
    for inside in ("nvidia-ctk runtime configure --runtime=containerd --set-as-default", "systemctl restart containerd",
                   "apt-get install -y -qq nvidia-container-toolkit"):
        assert inside in script  # what runs inside the kind node (one docker exec)
    assert sum(c.startswith("kind create cluster") for c in calls) == 1


def test_kind_cluster_config():
    cfg = yaml.safe_load((K8S / "kind" / "cluster.yaml").read_text())
    assert cfg["kind"] == "Cluster" and cfg["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    roles = [n["role"] for n in cfg["nodes"]]
    assert roles.count("control-plane") == 1
    for n in cfg["nodes"]:
        tag = n["image"].rsplit(":", 1)[1]
        assert tag.startswith("v") and tag != "latest"
        assert set(n) <= {"role", "image", "extraMounts", "extraPortMappings", "labels", "kubeadmConfigPatches"}
