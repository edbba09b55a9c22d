"""`python -m tuner.emit --best OUT/best.yaml --out FILE`: a ready KubeRay RayJob that trains the search's answer.

FILE holds two objects: a ConfigMap with the training config (best.yaml, with its machine-local paths
dropped) and a RayJob whose entrypoint is `python -m trainables.train --config .../best.yaml --json`. The
driver is the training run: `entrypointNumGpus` / `entrypointNumCpus` place it on the one worker, which
mounts the ConfigMap and, unless told not to, the results volume of k8s/storage at /results (where the
run writes its metrics, and where a search that ran on Kubernetes left its compile cache). Apply it with
`kubectl apply -f FILE`; `kubectl apply -k k8s/storage` first creates the volume if no search made it.
Exit codes: 0 written, 2 bad input.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from trainables.common.cli import OneLineParser
from trainables.config import ConfigError, is_file_spec, make_config, read_yaml, training_section
from trainables.data.corpora import is_builtin

DEFAULT_IMAGE = "hybrid-tuner:latest"  # what k8s/Dockerfile builds; pass REGISTRY/hybrid-tuner:TAG
CLAIM = "hybrid-tuner-results"  # the claim k8s/storage makes
RESULTS = "/results"
CONFIG_DIR = "/home/ray/best"
CONFIG_KEY = "best.yaml"
WORKLOAD_DIR = "/home/ray/workload"  # where a workload of the user's own is mounted in the pods
MAX_CODE_BYTES = 512 * 1024  # a ConfigMap holds at most 1 MiB; leave room for the YAML around the code
MAX_NAME = 47  # KubeRay: a RayJob's name, plus the "-xxxxx" of its RayCluster, is at most 53 characters
DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


@dataclass(frozen=True, kw_only=True)
class JobOptions:
    """What the RayJob asks for. `gpus` None: the search's hardware (OUT/summary.json beside best.yaml:
    1 when it ran on CUDA, else 0), or 1 without a summary. `data`: the corpus inside the pods (None: they
    resolve their own: TUNER_DATA, the cache, a download, the embedded default). `claim` None: no volume."""

    image: str = DEFAULT_IMAGE
    namespace: str | None = None
    name: str = "hybrid-tuner-train"
    gpus: int | None = None
    cpus: int | None = None  # None: 8 beside a GPU, 2 without
    memory: str | None = None  # None: 32Gi beside a GPU, 4Gi without
    data: str | None = None
    claim: str | None = CLAIM


def write_rayjob(best: str | Path, dest: str | Path, **options: Any) -> Path:
    """Renders the RayJob for `best` (a training config as `python -m trainables.train --config` reads
    it) into `dest`; options are JobOptions' fields. ConfigError (one line) on bad input."""
    text = render_rayjob(best, JobOptions(**options))
    dest = Path(dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
    except OSError as err:
        raise ConfigError(f"--out: cannot write {dest} ({err.strerror or err})") from None
    return dest


def render_rayjob(best: str | Path, options: JobOptions = JobOptions()) -> str:
    """The ConfigMap and the RayJob, as one multi-document YAML text."""
    _check_name(options.name)
    config = portable_config(training_section(read_yaml(best)), options)
    code = workload_code(config)
    if code:
        config = shipped_workload(config)
    gpus = options.gpus if options.gpus is not None else _search_gpus(Path(best))
    if gpus < 0:
        raise ConfigError(f"--gpus: expected 0 or more, got {gpus}")
    docs = [configmap(options, config), *([code_configmap(options, code)] if code else [])]
    docs.append(rayjob(options, gpus, shipped=tuple(code)))
    return "---\n".join(yaml.dump(d, Dumper=_Dumper, sort_keys=False) for d in docs)


class _Dumper(yaml.SafeDumper):
    """Safe YAML with multi-line strings (the ConfigMap's best.yaml) as readable literal blocks."""


def _str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _str)


def _check_name(name: str) -> None:
    if len(name) > MAX_NAME or not DNS1035.fullmatch(name):
        raise ConfigError(
            f"--name: {name!r} must be lowercase letters, digits and '-', start with a letter and have at "
            f"most {MAX_NAME} characters"
        )


def portable_config(values: dict[str, Any], options: JobOptions) -> dict[str, Any]:
    """The validated training config with the paths of the machine that wrote it dropped: `data` and
    `compile_cache` stay only where they lie on the mounted results volume (or `data` names a built-in
    corpus); `out_dir` goes (the run's
    output goes to the volume through --out)."""
    cfg = make_config(values).model_dump()
    for key in ("data", "compile_cache"):
        if key == "data" and is_builtin(cfg.get(key)):
            continue  # a built-in corpus is built where it runs, from the image's Python and torch
        if not (options.claim and _on_volume(cfg.get(key))):
            cfg[key] = None
    if options.data is not None:
        cfg["data"] = options.data
    cfg["out_dir"] = None
    return cfg


def workload_code(config: dict[str, Any]) -> dict[str, str]:
    """{path in WORKLOAD_DIR: source} of a user's workload: the .py files of its file's folder, or of its
    module's top-level package under workload_path; {} for the hybrid or a module the image must hold.
    ConfigError when it is too large for a ConfigMap (then the image has to carry it)."""
    spec = config["workload"]
    if spec == "hybrid" or not (is_file_spec(spec) or config.get("workload_path")):
        return {}
    if is_file_spec(spec):
        root = Path(spec.rpartition(":")[0]).parent
        files = sorted(root.glob("*.py"))
    else:
        root, top = Path(config["workload_path"]), spec.partition(".")[0].partition(":")[0]
        files = [root / f"{top}.py"] if (root / f"{top}.py").is_file() else sorted((root / top).rglob("*.py"))
    files = [f for f in files if "__pycache__" not in f.parts]
    if not files:
        raise ConfigError(f"workload {spec!r}: no Python files found in {root} to ship with the RayJob")
    size = sum(f.stat().st_size for f in files)
    if size > MAX_CODE_BYTES:
        raise ConfigError(
            f"workload {spec!r}: {root} holds {size // 1024} KiB of Python, more than a ConfigMap carries "
            f"({MAX_CODE_BYTES // 1024} KiB): build it into the image (k8s/Dockerfile) and point "
            "train.workload at its path there"
        )
    return {str(f.relative_to(root)): f.read_text() for f in files}


def shipped_workload(config: dict[str, Any]) -> dict[str, Any]:
    """The config with its workload read from where the pods mount the shipped code."""
    spec = config["workload"]
    if is_file_spec(spec):
        target, _, attr = spec.rpartition(":")
        return {**config, "workload": f"{WORKLOAD_DIR}/{Path(target).name}:{attr}"}
    return {**config, "workload_path": WORKLOAD_DIR}


def _on_volume(path: str | None) -> bool:
    return bool(path and Path(path).is_relative_to(RESULTS))


def _search_gpus(best: Path) -> int:
    """1 when the search that wrote best.yaml trained on CUDA (its summary.json says), else 0; 1 when
    there is no summary beside it."""
    summary = best.parent / "summary.json"
    try:
        hardware = json.loads(summary.read_text()).get("hardware") or {}
    except (OSError, ValueError):
        return 1
    return 1 if hardware.get("cuda") else 0


# --- the objects ------------------------------------------------------------------------------------------


def _metadata(options: JobOptions, name: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if options.namespace:
        meta["namespace"] = options.namespace
    meta["labels"] = {"app.kubernetes.io/name": "hybrid-tuner", "app.kubernetes.io/component": "train"}
    return meta


def configmap(options: JobOptions, config: dict[str, Any]) -> dict[str, Any]:
    body = yaml.safe_dump(config, sort_keys=False)
    meta = _metadata(options, f"{options.name}-config")
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {CONFIG_KEY: body}}


def code_configmap(options: JobOptions, code: dict[str, str]) -> dict[str, Any]:
    """The workload's code; keys are paths with '/' as '__' (a key allows no '/'), mounted back as paths."""
    meta = _metadata(options, f"{options.name}-workload")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {_key(p): t for p, t in code.items()},
    }


def _key(path: str) -> str:
    return path.replace("/", "__")


def entrypoint(options: JobOptions) -> str:
    argv = ["python", "-m", "trainables.train", "--config", f"{CONFIG_DIR}/{CONFIG_KEY}", "--json"]
    if options.claim:
        argv += ["--out", f"{RESULTS}/runs/{options.name}"]
    return " ".join(argv)


def rayjob(options: JobOptions, gpus: int, shipped: tuple[str, ...] = ()) -> dict[str, Any]:
    cpus = options.cpus or (8 if gpus else 2)
    spec: dict[str, Any] = {"entrypoint": entrypoint(options), "entrypointNumCpus": cpus}
    if gpus:
        spec["entrypointNumGpus"] = gpus
    spec |= {
        "submissionMode": "K8sJobMode",
        "backoffLimit": 0,  # a training run does not resume: a retry would start over
        "shutdownAfterJobFinishes": True,
        "ttlSecondsAfterFinished": 600,
        "rayClusterSpec": cluster_spec(options, cpus, gpus, shipped),
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": _metadata(options, options.name),
        "spec": spec,
    }


def cluster_spec(options: JobOptions, cpus: int, gpus: int, shipped: tuple[str, ...] = ()) -> dict[str, Any]:
    head = _container(options, "ray-head", {"cpu": "1", "memory": "2Gi"}, shipped)
    head_pod = {"containers": [head], "volumes": _volumes(options, shipped)}
    return {
        "rayVersion": metadata.version("ray"),
        "authOptions": {"mode": "token"},
        "headGroupSpec": {
            "rayStartParams": {"num-cpus": "0", "dashboard-host": "0.0.0.0"},
            "template": {"spec": head_pod},
        },
        "workerGroupSpecs": [_worker_group(options, cpus, gpus, shipped)],
    }


def _worker_group(options: JobOptions, cpus: int, gpus: int, shipped: tuple[str, ...]) -> dict[str, Any]:
    limits = {"cpu": str(cpus), "memory": options.memory or ("32Gi" if gpus else "4Gi")}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    container = _container(options, "ray-worker", limits, shipped)
    container["volumeMounts"].append({"name": "shm", "mountPath": "/dev/shm"})
    pod: dict[str, Any] = {"containers": [container], "volumes": _volumes(options, shipped)}
    pod["volumes"].append({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "4Gi"}})
    if gpus:
        pod["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    group = {"groupName": "gpu" if gpus else "cpu", "replicas": 1, "minReplicas": 1, "maxReplicas": 1}
    return group | {"rayStartParams": {}, "template": {"spec": pod}}


def _container(
    options: JobOptions, name: str, limits: dict[str, str], shipped: tuple[str, ...]
) -> dict[str, Any]:
    mounts = [{"name": "best", "mountPath": CONFIG_DIR, "readOnly": True}]
    if shipped:
        mounts.append({"name": "workload", "mountPath": WORKLOAD_DIR, "readOnly": True})
    if options.claim:
        mounts.append({"name": "results", "mountPath": RESULTS})
    return {
        "name": name,
        "image": options.image,
        "env": [{"name": "RAY_USAGE_STATS_ENABLED", "value": "0"}],
        "resources": {"requests": dict(limits), "limits": dict(limits)},
        "volumeMounts": mounts,
    }


def _volumes(options: JobOptions, shipped: tuple[str, ...]) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = [{"name": "best", "configMap": {"name": f"{options.name}-config"}}]
    if shipped:  # every key of the workload's ConfigMap back at its path (keys cannot hold '/')
        items = [{"key": _key(p), "path": p} for p in shipped]
        volumes.append(
            {"name": "workload", "configMap": {"name": f"{options.name}-workload", "items": items}}
        )
    if options.claim:
        volumes.append({"name": "results", "persistentVolumeClaim": {"claimName": options.claim}})
    return volumes


# --- CLI --------------------------------------------------------------------------------------------------


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="python -m tuner.emit", description=__doc__.splitlines()[0])
    p.add_argument("--best", required=True, help="the training config to run (a search's OUT/best.yaml)")
    p.add_argument("--out", required=True, help="where to write the manifests (YAML)")
    p.add_argument(
        "--image", default=DEFAULT_IMAGE, help=f"the image k8s/Dockerfile built (default {DEFAULT_IMAGE})"
    )
    p.add_argument("--namespace", help="namespace of the objects (default: kubectl's current one)")
    p.add_argument("--name", default=JobOptions.name, help=f"RayJob name (default {JobOptions.name})")
    p.add_argument("--gpus", type=int, help="GPUs for the run (default: 1 if the search ran on CUDA, else 0)")
    p.add_argument("--cpus", type=int, help="CPUs for the run (default 8 with a GPU, 2 without)")
    p.add_argument("--memory", help="memory for the run (default 32Gi with a GPU, 4Gi without)")
    p.add_argument("--data", help="corpus path inside the pods (default: the pods resolve their own)")
    p.add_argument("--claim", default=CLAIM, help=f"results PVC mounted at {RESULTS} (default {CLAIM})")
    p.add_argument("--no-results-volume", action="store_true", help="mount no results volume")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    fields = ("image", "namespace", "name", "gpus", "cpus", "memory", "data", "claim")
    options = {f: getattr(args, f) for f in fields}
    if args.no_results_volume:
        options["claim"] = None
    try:
        dest = write_rayjob(args.best, args.out, **options)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {dest}: kubectl apply -f {dest}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
