"""The KubeRay manifests in k8s/: each kustomization (base and overlays) built the way kustomize builds
them, every object validated strictly (unknown fields fail, as `kubectl apply --validate=strict` does):
the RayJob against the KubeRay v1.7.0 CRD schema, core kinds with kubernetes-validate. Then the job itself:
its entrypoint is a search command this repository accepts, and the cluster it asks for fits the search.

No cluster runs here, so this proves the manifests, not a run on Kubernetes; the image (k8s/Dockerfile)
is not built here either.
"""

from __future__ import annotations

import copy
import gzip
import json
import re
import shlex
from importlib import metadata
from pathlib import Path

import jsonpatch
import jsonschema
import kubernetes_validate
import pytest
import yaml
from packaging.specifiers import SpecifierSet

from tuner.config import load_search_config
from tuner.search import build_parser

REPO = Path(__file__).resolve().parent.parent
K8S = REPO / "k8s"
KUSTOMIZATIONS = sorted(p.parent for p in K8S.rglob("kustomization.yaml"))
SCHEMA = Path(__file__).parent / "k8s" / "kuberay-rayjob-v1.json.gz"
KUBERNETES_VERSION = "1.33"
IMAGE_HOME = "/home/ray/hybrid-tuner/"  # WORKDIR of k8s/Dockerfile: the repository inside the image


# --- kustomize, the subset these manifests use -----------------------------------------------------------


def build(folder: Path) -> list[dict]:
    """The objects `kustomize build folder` prints, for resources, JSON 6902 patches and image renames.
    Any other kustomization field fails the test rather than being silently ignored."""
    spec = yaml.safe_load((folder / "kustomization.yaml").read_text())
    unknown = set(spec) - {"apiVersion", "kind", "resources", "patches", "images"}
    assert not unknown, f"{folder}: kustomize fields this test does not apply: {unknown}"
    objects: list[dict] = []
    for resource in spec.get("resources", []):
        path = folder / resource
        objects += build(path) if path.is_dir() else [d for d in yaml.safe_load_all(path.read_text()) if d]
    for patch in spec.get("patches", []):
        target = patch["target"]
        hits = [o for o in objects if all(_matches(o, k, v) for k, v in target.items())]
        assert len(hits) == 1, f"{folder}: patch target {target} matches {len(hits)} objects"
        patched = jsonpatch.apply_patch(hits[0], yaml.safe_load(patch["patch"]))
        objects[objects.index(hits[0])] = patched
    for image in spec.get("images", []):
        new = f"{image.get('newName', image['name'])}:{image.get('newTag', 'latest')}"
        for container in _containers(objects):
            if container["image"].split(":")[0] == image["name"]:
                container["image"] = new
    return objects


def _matches(obj: dict, key: str, value: str) -> bool:
    group, _, version = obj["apiVersion"].rpartition("/")
    actual = {"group": group, "version": version, "kind": obj["kind"], "name": obj["metadata"]["name"]}
    return actual[key] == value


def _pod_specs(objects: list[dict]):
    for obj in objects:
        if obj["kind"] == "RayJob":
            cluster = obj["spec"]["rayClusterSpec"]
            yield "head", cluster["headGroupSpec"]["template"]["spec"]
            for group in cluster.get("workerGroupSpecs", []):
                yield group["groupName"], group["template"]["spec"]


def _containers(objects: list[dict]):
    for _, pod in _pod_specs(objects):
        yield from pod["containers"]


# --- strict schema validation ----------------------------------------------------------------------------


def strict(schema: dict) -> dict:
    """An OpenAPI v3 CRD schema as JSON Schema that rejects unknown fields (the API server prunes them)."""
    node = {k: (strict(v) if isinstance(v, dict) else v) for k, v in schema.items()}
    for key in ("properties", "patternProperties"):
        if key in node:
            node[key] = {name: strict(sub) for name, sub in node[key].items()}
    if isinstance(node.get("items"), dict):
        node["items"] = strict(node["items"])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in node:
            node[key] = [strict(sub) for sub in node[key]]
    if node.pop("x-kubernetes-int-or-string", False):
        node.pop("type", None)
        node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.pop("nullable", False) and "type" in node:
        node["type"] = [node["type"], "null"]
    preserve = node.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in node and "additionalProperties" not in node and not preserve:
        node["additionalProperties"] = False
    return node


@pytest.fixture(scope="module")
def rayjob_validator() -> jsonschema.Validator:
    schema = strict(json.loads(gzip.decompress(SCHEMA.read_bytes())))
    return jsonschema.Draft7Validator(schema)


def problems(validator: jsonschema.Validator, obj: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]


def test_every_kustomization_is_found():
    assert [p.relative_to(K8S).as_posix() for p in KUSTOMIZATIONS] == [
        "base",
        "overlays/cpu-smoke",
        "overlays/two-gpu-workers",
    ]


@pytest.mark.parametrize("folder", KUSTOMIZATIONS, ids=lambda p: p.relative_to(K8S).as_posix())
def test_manifests_validate_strictly(folder, rayjob_validator):
    objects = build(folder)
    assert sorted(o["kind"] for o in objects) == ["PersistentVolumeClaim", "RayJob"]
    for obj in objects:
        if obj["kind"] == "RayJob":
            assert obj["apiVersion"] == "ray.io/v1"
            assert not problems(rayjob_validator, obj), problems(rayjob_validator, obj)
        else:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    assert {c["image"] for c in _containers(objects)} == {"hybrid-tuner:latest"}


def test_the_validation_catches_mistakes(rayjob_validator):
    (job,) = [o for o in build(K8S / "base") if o["kind"] == "RayJob"]
    typo = copy.deepcopy(job)
    typo["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replica"] = 2  # not "replicas"
    assert any("'replica' was unexpected" in p for p in problems(rayjob_validator, typo))
    wrong_type = copy.deepcopy(job)
    wrong_type["spec"]["backoffLimit"] = "one"
    assert any(p.startswith("spec/backoffLimit") for p in problems(rayjob_validator, wrong_type))
    pod = copy.deepcopy(job)
    pod["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    assert any("'volumeMount' was unexpected" in p for p in problems(rayjob_validator, pod))
    pvc = [o for o in build(K8S / "base") if o["kind"] == "PersistentVolumeClaim"][0]
    pvc["spec"]["accessMode"] = ["ReadWriteOnce"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pvc, KUBERNETES_VERSION, strict=True)


def _quantity(value: str | int) -> float:
    units = {"m": 1e-3, "": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    number, unit = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(value)).groups()
    return float(number) * units[unit]


@pytest.mark.parametrize("folder", KUSTOMIZATIONS, ids=lambda p: p.relative_to(K8S).as_posix())
def test_the_job_runs_a_search_this_repository_accepts_on_a_cluster_that_fits_it(folder, tmp_path):
    objects = build(folder)
    (job,) = [o for o in objects if o["kind"] == "RayJob"]
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[:3] == ["python", "-m", "tuner.search"]
    args = build_parser().parse_args(argv[3:])
    assert args.address == "auto" and args.resume  # joins the RayJob's cluster; a retry resumes
    assert args.config.startswith(IMAGE_HOME)
    cfg = load_search_config(REPO / args.config.removeprefix(IMAGE_HOME), args.overrides, data=args.data)

    # OUT lies on the results volume the head mounts
    (pvc,) = [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    pods = dict(_pod_specs(objects))
    head = pods.pop("head")
    (mount,) = [m for m in head["containers"][0]["volumeMounts"] if m["name"] == "results"]
    (volume,) = [v for v in head["volumes"] if v["name"] == "results"]
    assert volume["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    assert Path(args.out).is_relative_to(mount["mountPath"])

    # every worker can hold a trial (its CPUs, and its GPU when the search asks for one), and a GPU worker
    # the loss check's runs that share its GPU, all at once
    for name, pod in pods.items():
        limits = pod["containers"][0]["resources"]["limits"]
        cpus, gpus = _quantity(limits["cpu"]), int(limits.get("nvidia.com/gpu", 0))
        assert cpus >= cfg.resources.cpus_per_trial, name
        if "gpu" in name:
            assert gpus >= 1, name
            per_gpu = max(int(1 / cfg.resources.loss_check_gpu_fraction), cfg.resources.speed_runs_per_gpu)
            assert cpus >= gpus * per_gpu * cfg.resources.cpus_per_trial, name
        else:
            assert gpus == 0 and "tolerations" not in pod, name


def test_ray_versions_agree():
    """rayVersion, the image's Ray and the pin in pyproject.toml are one version (and the one installed)."""
    (job,) = [o for o in build(K8S / "base") if o["kind"] == "RayJob"]
    pinned = re.search(r'"ray\[[^\]]*\]==([0-9.]+)"', (REPO / "pyproject.toml").read_text()).group(1)
    image = re.search(r"^FROM rayproject/ray:([0-9.]+)-py312", (K8S / "Dockerfile").read_text(), re.M)
    assert job["spec"]["rayClusterSpec"]["rayVersion"] == pinned == image.group(1)
    assert metadata.version("ray") == pinned


def test_one_torch_range_across_pyproject_ci_and_the_image():
    """The image (the GPU machine's 2.11) and CI (2.13, the CPU wheel) both pin a torch inside the range
    pyproject.toml declares, so both ends of the range are tested somewhere."""
    spec = re.search(r'"torch([<>=!~][^"]*)"', (REPO / "pyproject.toml").read_text()).group(1)
    image = re.search(r"torch==([0-9.]+)", (K8S / "Dockerfile").read_text()).group(1)
    ci = re.search(r"torch==([0-9.]+)", (REPO / ".ci" / "run").read_text()).group(1)
    assert image in SpecifierSet(spec) and ci in SpecifierSet(spec), (spec, image, ci)
    assert metadata.version("torch").split("+")[0] in SpecifierSet(spec)
