"""The KubeRay manifests in k8s/ and the RayJob `python -m tuner.emit` writes: each kustomization (base,
cluster, storage and overlays) built the way kustomize builds it, every object validated strictly
(tests/k8s/checks.py: unknown fields fail, as `kubectl apply --validate=strict` does; KubeRay kinds against
the KubeRay v1.7.0 CRD schema and KubeRay's own admission rules, core kinds with kubernetes-validate). Then
what they run: the RayJob's entrypoint is a search command this repository accepts, the clusters fit the
search's trials, and every Ray pod mounts the shared (ReadWriteMany) results volume where OUT lies.

No cluster runs here, so this proves the manifests, not a run on Kubernetes; the image (k8s/Dockerfile)
is not built here either. The CRD schemas are vendored in tests/k8s/ (from ../shared/k8s/crds/ when it is
there, which a test below compares), so a clone without ../shared runs every check.
"""

from __future__ import annotations

import copy
import re
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from tests.k8s import checks, vendor_schema
from tests.shared_files import shared_file
from trainables.config import load_config
from tuner import emit
from tuner.config import load_search_config
from tuner.search import build_parser

REPO = Path(__file__).resolve().parent.parent
K8S = REPO / "k8s"
KUSTOMIZATIONS = sorted(p.parent for p in K8S.rglob("kustomization.yaml"))
IMAGE_HOME = "/home/ray/hybrid-tuner/"  # WORKDIR of k8s/Dockerfile: the repository inside the image
# The search each interactive RayCluster is sized for (a RayJob names its own in its entrypoint).
SIZED_FOR = {"cluster": "configs/default.yaml", "overlays/cluster-cpu": "configs/smoke.yaml"}


def _id(folder: Path) -> str:
    return folder.relative_to(K8S).as_posix()


def _kinds(objects: list[dict]) -> list[str]:
    return sorted(o["kind"] for o in objects)


def _one(objects: list[dict], kind: str) -> dict:
    (obj,) = [o for o in objects if o["kind"] == kind]
    return obj


def test_every_kustomization_is_found():
    assert [_id(p) for p in KUSTOMIZATIONS] == [
        "base",
        "cluster",
        "overlays/cluster-cpu",
        "overlays/cpu-smoke",
        "overlays/two-gpu-workers",
        "storage",
    ]


@pytest.mark.parametrize("folder", KUSTOMIZATIONS, ids=_id)
def test_manifests_validate_strictly(folder):
    objects = checks.build(folder)
    ray = {"storage": [], **{f: ["RayCluster"] for f in SIZED_FOR}}.get(_id(folder), ["RayJob"])
    assert _kinds(objects) == ["PersistentVolumeClaim", *ray]
    for obj in objects:
        assert not checks.problems(obj), (obj["kind"], checks.problems(obj))
    assert {c["image"] for c in checks.containers(objects)} <= {"hybrid-tuner:latest"}


def _worker(obj: dict) -> dict:
    return checks.cluster_spec(obj)["workerGroupSpecs"][0]


def _head(obj: dict) -> dict:
    return checks.cluster_spec(obj)["headGroupSpec"]["template"]["spec"]["containers"][0]


MISTAKES = {  # what is broken: (kustomization, kind, the change, what the check says)
    # the CRD schema, strictly
    "a misspelt field": (
        "base",
        "RayJob",
        lambda o: _worker(o).update(replica=2),
        "'replica' was unexpected",
    ),
    "a wrong type": ("base", "RayJob", lambda o: o["spec"].update(backoffLimit="one"), "backoffLimit"),
    "a misspelt pod field": (
        "cluster",
        "RayCluster",
        lambda o: _head(o).update(volumeMount=[]),
        "'volumeMount'",
    ),
    "another API version": (
        "cluster",
        "RayCluster",
        lambda o: o.update(apiVersion="ray.io/v1alpha1"),
        "ray.io/v1",
    ),
    # KubeRay's own rules, which the schema cannot express
    "min over max replicas": (
        "cluster",
        "RayCluster",
        lambda o: _worker(o).update(minReplicas=9),
        "maxReplicas",
    ),
    "a name that is no label": (
        "base",
        "RayJob",
        lambda o: o["metadata"].update(name="Hybrid_Tuner"),
        "DNS1035",
    ),
    "a name too long": ("base", "RayJob", lambda o: o["metadata"].update(name="h" * 48), "no more than 47"),
    "token auth on old Ray": (
        "cluster",
        "RayCluster",
        lambda o: o["spec"].update(rayVersion="2.50.0"),
        "minimum Ray version is 2.52.0",
    ),
    "resources twice": (
        "base",
        "RayJob",
        lambda o: _worker(o).update(rayStartParams={"num-cpus": "4"}, resources={"CPU": "4"}),
        "both rayStartParams and Resources",
    ),
    "a TTL without shutdown": (
        "base",
        "RayJob",
        lambda o: o["spec"].update(shutdownAfterJobFinishes=False),
        "cannot have TTLSecondsAfterFinished",
    ),
    "a field whose rules are not ported": (
        "cluster",
        "RayCluster",
        lambda o: o["spec"].update(autoscalerOptions={}),
        "not ported",
    ),
    # core kinds, strictly
    "a misspelt claim field": (
        "storage",
        "PersistentVolumeClaim",
        lambda o: o["spec"].update(accessMode=["ReadWriteMany"]),
        "'accessMode' was unexpected",
    ),
    "a claim field of the wrong type": (
        "storage",
        "PersistentVolumeClaim",
        lambda o: o["spec"].update(accessModes="ReadWriteMany"),
        "is not of type 'array'",
    ),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_the_validation_catches_mistakes(mistake):
    folder, kind, change, needle = MISTAKES[mistake]
    obj = copy.deepcopy(_one(checks.build(K8S / folder), kind))
    change(obj)
    found = checks.problems(obj)
    assert any(needle in p for p in found), found


def _quantity(value: str | int) -> float:
    units = {"m": 1e-3, "": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    number, unit = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(value)).groups()
    return float(number) * units[unit]


def _limits(pod: dict) -> tuple[float, int]:
    limits = pod["containers"][0]["resources"]["limits"]
    return _quantity(limits["cpu"]), int(limits.get("nvidia.com/gpu", 0))


def assert_results_on_every_pod(objects: list[dict], out: str | None = None) -> None:
    """The claim is ReadWriteMany and every Ray pod mounts it at one path (where OUT lies, if given)."""
    pvc = _one(objects, "PersistentVolumeClaim") if "PersistentVolumeClaim" in _kinds(objects) else None
    claims, paths = set(), set()
    for _, pod in checks.pod_specs(objects):
        (volume,) = [v for v in pod["volumes"] if v["name"] == "results"]
        (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "results"]
        claims.add(volume["persistentVolumeClaim"]["claimName"])
        paths.add(mount["mountPath"])
    assert len(claims) == 1 and len(paths) == 1, (claims, paths)
    if pvc is not None:
        assert claims == {pvc["metadata"]["name"]} and pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    if out is not None:
        assert Path(out).is_relative_to(paths.pop())


def assert_fits(objects: list[dict], config: str, overrides: list[str] = ()) -> None:
    """Every worker can hold a trial (its CPUs, and its GPU when the search asks for one), a GPU worker the
    runs that share its GPU all at once, and the head runs no trials."""
    cfg = load_search_config(REPO / config, list(overrides))
    pods = dict(checks.pod_specs(objects))
    assert pods.pop("head") and all(c["rayStartParams"]["num-cpus"] == "0" for c in _clusters(objects))
    assert pods, "no worker group"
    for name, pod in pods.items():
        cpus, gpus = _limits(pod)
        assert cpus >= cfg.resources.cpus_per_trial, name
        if "gpu" in name:
            assert gpus >= 1, name
            per_gpu = max(int(1 / cfg.resources.loss_check_gpu_fraction), cfg.resources.speed_runs_per_gpu)
            assert cpus >= gpus * per_gpu * cfg.resources.cpus_per_trial, name
        else:
            assert gpus == 0 and "tolerations" not in pod, name


def _clusters(objects: list[dict]) -> list[dict]:
    return [checks.cluster_spec(o)["headGroupSpec"] for o in objects if checks.cluster_spec(o)]


@pytest.mark.parametrize(
    "folder", [f for f in KUSTOMIZATIONS if _id(f) not in (*SIZED_FOR, "storage")], ids=_id
)
def test_the_job_runs_a_search_this_repository_accepts_on_a_cluster_that_fits_it(folder):
    objects = checks.build(folder)
    job = _one(objects, "RayJob")
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[:3] == ["python", "-m", "tuner.search"]
    args = build_parser().parse_args(argv[3:])
    assert args.address == "auto" and args.resume  # joins the RayJob's cluster; a retry resumes
    assert args.config.startswith(IMAGE_HOME)
    assert_results_on_every_pod(objects, args.out)
    assert_fits(objects, args.config.removeprefix(IMAGE_HOME), args.overrides)


@pytest.mark.parametrize("folder", [K8S / f for f in SIZED_FOR], ids=_id)
def test_the_interactive_cluster_fits_its_search_and_shares_the_results_volume(folder):
    objects = checks.build(folder)
    cluster = _one(objects, "RayCluster")
    assert cluster["spec"]["authOptions"] == {"mode": "token"}
    assert_results_on_every_pod(objects)
    assert_fits(objects, SIZED_FOR[_id(folder)])
    for group in cluster["spec"]["workerGroupSpecs"]:
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]


def test_ray_versions_agree():
    """rayVersion of every manifest, the image's Ray and the pin in pyproject.toml are one version (and the
    one installed)."""
    pinned = re.search(r'"ray\[[^\]]*\]==([0-9.]+)"', (REPO / "pyproject.toml").read_text()).group(1)
    image = re.search(r"^FROM rayproject/ray:([0-9.]+)-py312", (K8S / "Dockerfile").read_text(), re.M)
    versions = {
        checks.cluster_spec(o)["rayVersion"]
        for f in KUSTOMIZATIONS
        for o in checks.build(f)
        if checks.cluster_spec(o)
    }
    assert versions == {pinned} == {image.group(1)}
    assert metadata.version("ray") == pinned


def test_one_torch_range_across_pyproject_ci_and_the_image():
    """The image (the GPU machine's 2.11) and CI (2.13, the CPU wheel) both pin a torch inside the range
    pyproject.toml declares, so both ends of the range are tested somewhere."""
    spec = re.search(r'"torch([<>=!~][^"]*)"', (REPO / "pyproject.toml").read_text()).group(1)
    image = re.search(r"torch==([0-9.]+)", (K8S / "Dockerfile").read_text()).group(1)
    ci = re.search(r"torch==([0-9.]+)", (REPO / ".ci" / "run").read_text()).group(1)
    assert image in SpecifierSet(spec) and ci in SpecifierSet(spec), (spec, image, ci)
    assert metadata.version("torch").split("+")[0] in SpecifierSet(spec)


@pytest.mark.parametrize("crd", ["ray.io_rayjobs.yaml", "ray.io_rayclusters.yaml"])
def test_the_vendored_schemas_are_the_crds(crd, tmp_path, monkeypatch):
    crds = shared_file("k8s", "crds")  # the KubeRay CRDs: skipped in a clone, required in CI where there
    vendored = {p.name: p.read_bytes() for p in vendor_schema.HERE.glob("*.json.gz")}
    monkeypatch.setattr(vendor_schema, "HERE", tmp_path)
    vendor_schema.vendor(str(crds / crd))
    (fresh,) = tmp_path.glob("*.json.gz")
    assert vendored[fresh.name] == fresh.read_bytes(), f"regenerate with: python {vendor_schema.__file__} ..."


# --- the RayJob that trains the search's answer (tuner/emit.py) -------------------------------------------


@pytest.fixture
def best_yaml(tmp_path) -> Path:
    """A best.yaml as a search writes it: the smoke config, with the paths of the machine it ran on."""
    cfg = load_config(REPO / "configs" / "smoke.yaml", ["precision=bf16", "batch_size=32"])
    cfg.data, cfg.compile_cache = "/home/me/corpus.txt", str(tmp_path / "compile-cache")
    path = tmp_path / "best.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(), sort_keys=False))
    return path


@pytest.mark.parametrize("gpus", [0, 1])
def test_the_emitted_rayjob_validates_and_trains_the_winning_config(best_yaml, tmp_path, gpus):
    dest = emit.write_rayjob(
        best_yaml, tmp_path / "job.yaml", image="reg.example/ht:1", namespace="ml", gpus=gpus
    )
    objects = checks.load(dest.read_text())
    assert _kinds(objects) == ["ConfigMap", "RayJob"]
    for obj in objects:
        assert not checks.problems(obj), (obj["kind"], checks.problems(obj))
        assert obj["metadata"]["namespace"] == "ml"
    job, configmap = _one(objects, "RayJob"), _one(objects, "ConfigMap")
    assert {c["image"] for c in checks.containers(objects)} == {"reg.example/ht:1"}
    assert checks.cluster_spec(job)["rayVersion"] == metadata.version("ray")

    # the entrypoint trains the config the ConfigMap carries, mounted where the entrypoint reads it
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[:3] == ["python", "-m", "trainables.train"] and "--json" in argv
    config_path = Path(argv[argv.index("--config") + 1])
    shipped = tmp_path / "shipped.yaml"
    shipped.write_text(configmap["data"][config_path.name])
    want = load_config(best_yaml).model_dump() | {"data": None, "compile_cache": None}
    assert load_config(shipped).model_dump() == want  # local paths dropped, every knob kept
    pods = dict(checks.pod_specs(objects))
    for pod in pods.values():
        (volume,) = [v for v in pod["volumes"] if v.get("configMap")]
        (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
        assert volume["configMap"]["name"] == configmap["metadata"]["name"]
        assert mount["mountPath"] == str(config_path.parent)
    assert_results_on_every_pod(objects, argv[argv.index("--out") + 1])

    # the driver (the training run) lands on the worker, which can hold it
    (worker,) = [pod for name, pod in pods.items() if name != "head"]
    cpus, worker_gpus = _limits(worker)
    assert (
        job["spec"]["entrypointNumCpus"] <= cpus
        and job["spec"].get("entrypointNumGpus", 0) == gpus == worker_gpus
    )
    assert checks.cluster_spec(job)["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"


def test_emit_keeps_paths_on_the_results_volume_and_takes_the_gpus_from_the_search(best_yaml, tmp_path):
    cfg = load_config(best_yaml)
    cfg.data, cfg.compile_cache = "/results/data/corpus.txt", "/results/search/compile-cache"
    best_yaml.write_text(yaml.safe_dump(cfg.model_dump()))
    (best_yaml.parent / "summary.json").write_text('{"hardware": {"cuda": true}}')
    objects = checks.load(emit.render_rayjob(best_yaml))
    shipped = yaml.safe_load(_one(objects, "ConfigMap")["data"]["best.yaml"])
    assert (shipped["data"], shipped["compile_cache"]) == (cfg.data, cfg.compile_cache)
    assert _one(objects, "RayJob")["spec"]["entrypointNumGpus"] == 1
    cfg.data = "builtin:python-source"  # a name, built where the job runs: kept
    best_yaml.write_text(yaml.safe_dump(cfg.model_dump()))
    shipped = yaml.safe_load(
        _one(checks.load(emit.render_rayjob(best_yaml)), "ConfigMap")["data"]["best.yaml"]
    )
    assert shipped["data"] == "builtin:python-source"
    bare = checks.load(emit.render_rayjob(best_yaml, emit.JobOptions(claim=None, data="/data/x.txt")))
    assert yaml.safe_load(_one(bare, "ConfigMap")["data"]["best.yaml"])["data"] == "/data/x.txt"
    assert "results" not in str(list(checks.pod_specs(bare))) and all(not checks.problems(o) for o in bare)


def test_the_emit_cli_writes_the_file_or_says_what_is_wrong_in_one_line(best_yaml, tmp_path, capsys):
    out = tmp_path / "k8s" / "train.yaml"
    args = ["--best", str(best_yaml), "--out", str(out)]
    ok = subprocess.run([sys.executable, "-m", "tuner.emit", *args], cwd=REPO, capture_output=True, text=True)
    assert ok.returncode == 0 and f"kubectl apply -f {out}" in ok.stderr, ok.stderr
    assert all(not checks.problems(o) for o in checks.load(out.read_text()))
    for bad, needle in [
        (["--name", "Bad_Name"], "--name"),
        (["--gpus", "-1"], "--gpus"),
        (["--best", str(tmp_path / "nope.yaml")], "config file not found"),
        (["--out", str(best_yaml / "x.yaml")], "cannot write"),
    ]:
        assert emit.main(args + bad) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], lines
