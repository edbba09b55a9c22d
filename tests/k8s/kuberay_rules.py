"""KubeRay's own admission rules for RayJob and RayCluster, the ones its CRD schema cannot express.

A port of `ValidateRayJobMetadata`, `ValidateRayJobSpec`, `ValidateRayClusterMetadata` and
`ValidateRayClusterSpec` (ray-operator/controllers/ray/utils/validation.go, KubeRay v1.7.0, default feature
gates), which the operator's webhook and reconciler run before they accept an object. Each function returns
the rule's message, or None. A field whose rules are not ported here (GCS fault tolerance, autoscaler
options, deletion strategy, ...) is reported as such, so a manifest that starts using it fails until this
port covers it, instead of passing unchecked.
"""

from __future__ import annotations

import re

import yaml

MAX_RAYCLUSTER_NAME = 53  # utils.MaxRayClusterNameLength
MAX_RAYJOB_NAME = MAX_RAYCLUSTER_NAME - 6  # the RayCluster a RayJob creates appends "-xxxxx"
DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
AUTOSCALER_V2_ENV = "RAY_enable_autoscaler_v2"

# Fields whose KubeRay rules this port leaves out (feature-gated off by default, or long rule sets).
UNPORTED_CLUSTER_FIELDS = (
    "gcsFaultToleranceOptions",
    "autoscalerOptions",
    "upgradeStrategy",
    "managedBy",
)
GATED_OFF_CLUSTER_FIELDS = {  # default-off feature gates in KubeRay v1.7.0
    "networkPolicy": "RayClusterNetworkPolicy",
    "tlsOptions": "RayClusterMTLS",
    "historyServerOptions": "RayClusterHistoryServer",
}
UNPORTED_JOB_FIELDS = ("deletionStrategy", "submitterConfig")


def rayjob_problems(job: dict) -> list[str]:
    """Every KubeRay rule the RayJob breaks (empty when the operator would accept it)."""
    spec = job.get("spec", {})
    found = [_name_problem("RayJob", job.get("metadata", {}).get("name", ""), MAX_RAYJOB_NAME)]
    found += [
        f"RayJob: rules for spec.{f} are not ported to this check" for f in UNPORTED_JOB_FIELDS if f in spec
    ]
    found += [rule(spec) for rule in JOB_RULES]
    cluster = spec.get("rayClusterSpec")
    if cluster is not None:
        if (cluster.get("authOptions") or {}).get("enableK8sTokenAuth"):
            found.append("RayJob: K8s token auth mode is currently not supported for RayJob")
        annotations = job.get("metadata", {}).get("annotations", {})
        found += [f"RayJob: {p}" for p in cluster_spec_problems(cluster, annotations)]
    return [p for p in found if p]


def raycluster_problems(cluster: dict) -> list[str]:
    """Every KubeRay rule the RayCluster breaks (empty when the operator would accept it)."""
    meta = cluster.get("metadata", {})
    found = [_name_problem("RayCluster", meta.get("name", ""), MAX_RAYCLUSTER_NAME)]
    found += cluster_spec_problems(cluster.get("spec", {}), meta.get("annotations", {}))
    return [p for p in found if p]


def _name_problem(kind: str, name: str, limit: int) -> str | None:
    if len(name) > limit:
        return f"{kind} name should be no more than {limit} characters"
    if len(name) > 63 or not DNS1035.fullmatch(name):
        return f"{kind} name should be a valid DNS1035 label: {name!r}"
    return None


# --- RayJob spec ------------------------------------------------------------------------------------------


def _suspend(spec: dict) -> str | None:
    if spec.get("suspend") and not spec.get("shutdownAfterJobFinishes"):
        return "a RayJob with shutdownAfterJobFinishes set to false is not allowed to be suspended"
    if spec.get("suspend") and spec.get("clusterSelector"):
        return "the ClusterSelector mode doesn't support the suspend operation"
    return None


def _ttl(spec: dict) -> str | None:
    ttl = spec.get("ttlSecondsAfterFinished", 0)
    if ttl < 0:
        return "TTLSecondsAfterFinished must be a non-negative integer"
    if not spec.get("shutdownAfterJobFinishes") and ttl > 0:
        return "a RayJob with shutdownAfterJobFinishes set to false cannot have TTLSecondsAfterFinished"
    return None


def _cluster_source(spec: dict) -> str | None:
    selector = spec.get("clusterSelector") or {}
    if spec.get("rayClusterSpec") is None and not selector:
        return "one of RayClusterSpec or ClusterSelector must be set"
    if selector:
        if not selector.get("ray.io/cluster"):
            return "cluster name in ClusterSelector should not be empty"
        if spec.get("submissionMode") == "SidecarMode":
            return "ClusterSelector is not supported in SidecarMode"
        if spec.get("backoffLimit", 0) > 0:
            return "BackoffLimit is incompatible with ClusterSelector mode"
    return None


def _submission_mode(spec: dict) -> str | None:
    mode = spec.get("submissionMode")
    if mode == "InteractiveMode" and spec.get("backoffLimit", 0) > 0:
        return "BackoffLimit is incompatible with InteractiveMode"
    if mode == "SidecarMode":
        if "submitterPodTemplate" in spec:
            return "Currently, SidecarMode doesn't support SubmitterPodTemplate"
        head = spec.get("rayClusterSpec", {}).get("headGroupSpec", {}).get("template", {}).get("spec", {})
        if head.get("restartPolicy", "Never") != "Never":
            return "restartPolicy for head Pod should be Never or unset when using SidecarMode"
    return None


def _runtime_env(spec: dict) -> str | None:
    try:
        parsed = yaml.safe_load(spec.get("runtimeEnvYAML") or "") or {}
    except yaml.YAMLError as err:
        return f"runtimeEnvYAML is not valid YAML ({err})"
    return None if isinstance(parsed, dict) else "runtimeEnvYAML must be a YAML mapping"


def _deadlines(spec: dict) -> str | None:
    for key in ("activeDeadlineSeconds", "preRunningDeadlineSeconds"):
        if key in spec and spec[key] <= 0:
            return f"{key} must be a positive integer"
    if spec.get("backoffLimit", 0) < 0:
        return "backoffLimit must be a positive integer"
    return None


JOB_RULES = (_suspend, _ttl, _cluster_source, _submission_mode, _runtime_env, _deadlines)


# --- RayCluster spec --------------------------------------------------------------------------------------


def cluster_spec_problems(spec: dict, annotations: dict) -> list[str]:
    found = [f"rules for spec.{f} are not ported to this check" for f in UNPORTED_CLUSTER_FIELDS if f in spec]
    found += [
        f"spec.{f} requires the {g} feature gate" for f, g in GATED_OFF_CLUSTER_FIELDS.items() if f in spec
    ]
    head = spec.get("headGroupSpec", {})
    if not head.get("template", {}).get("spec", {}).get("containers"):
        return [*found, "headGroupSpec should have at least one container"]
    found += _group_problems("Head", head)
    autoscaling = bool(spec.get("enableInTreeAutoscaling"))
    for group in spec.get("workerGroupSpecs", []):
        found += _worker_problems(group, autoscaling, spec.get("rayVersion", ""))
    found += [_fault_tolerance(spec, annotations), _autoscaler_env(spec, autoscaling), _auth(spec)]
    return [p for p in found if p]


def _group_problems(name: str, group: dict) -> list[str]:
    params, found = group.get("rayStartParams", {}), []
    if any(params.get(k) for k in ("num-cpus", "num-gpus", "memory", "resources")) and group.get("resources"):
        found.append(
            f"resource fields should not be set in both rayStartParams and Resources for {name} group"
        )
    if "labels" in params:
        found.append(f"rayStartParams['labels'] is not supported for {name} group")
    for key, value in (group.get("labels") or {}).items():
        if not _qualified_name(key):
            found.append(f"invalid label key for {name} group: {key!r}")
        if len(value) > 63 or not LABEL_VALUE.fullmatch(value):
            found.append(f"invalid label value for key {key!r} in {name} group: {value!r}")
    return found


def _qualified_name(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    ok_prefix = not prefix or (len(prefix) <= 253 and re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", prefix))
    return bool(ok_prefix) and 0 < len(name) <= 63 and bool(QUALIFIED_NAME.fullmatch(name))


def _worker_problems(group: dict, autoscaling: bool, ray_version: str) -> list[str]:
    name = group.get("groupName", "")
    if not group.get("template", {}).get("spec", {}).get("containers"):
        return ["workerGroupSpec should have at least one container"]
    lo, hi = group.get("minReplicas"), group.get("maxReplicas")
    found = []
    if not autoscaling and (lo is None or hi is None):
        found.append(
            f"worker group {name} must set both minReplicas and maxReplicas when autoscaling is disabled"
        )
    found += [
        f"worker group {name} has negative {k}"
        for k, v in (("minReplicas", lo), ("maxReplicas", hi))
        if v and v < 0
    ]
    if lo is not None and hi is not None and lo > hi:
        found.append(f"worker group {name} has minReplicas {lo} greater than maxReplicas {hi}")
    found += _group_problems(name, group)
    if "idleTimeoutSeconds" in group or group.get("priority"):
        found.append(f"worker group {name}: idleTimeoutSeconds and priority need autoscaler v2 (not ported)")
    if group.get("suspend") and autoscaling:
        found.append(f"worker group {name} cannot be suspended with Autoscaler enabled")
    return found


def _head_env(spec: dict) -> dict[str, dict]:
    container = spec["headGroupSpec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e for e in container.get("env", [])}


def _fault_tolerance(spec: dict, annotations: dict) -> str | None:
    env, params = _head_env(spec), spec["headGroupSpec"].get("rayStartParams", {})
    ft = annotations.get("ray.io/ft-enabled", "").lower() == "true"
    if "RAY_REDIS_ADDRESS" in env and not ft:
        return "RAY_REDIS_ADDRESS is set, which implicitly enables GCS fault tolerance, but GcsFaultToleranceOptions is not set"
    if params.get("redis-username") or "REDIS_USERNAME" in env:
        return "cannot set redis username in rayStartParams or environment variables"
    return None


def _autoscaler_env(spec: dict, autoscaling: bool) -> str | None:
    value = _head_env(spec).get(AUTOSCALER_V2_ENV, {}).get("value")
    if not autoscaling and value in ("1", "true"):
        return f"environment variable {AUTOSCALER_V2_ENV} cannot be set to {value!r} when enableInTreeAutoscaling is false"
    return None


def _auth(spec: dict) -> str | None:
    options = spec.get("authOptions") or {}
    k8s = bool(options.get("enableK8sTokenAuth"))
    if options.get("mode") != "token":
        return (
            "authOptions.enableK8sTokenAuth is enabled but authOptions.mode not set to 'token'"
            if k8s
            else None
        )
    version = _version(spec.get("rayVersion", ""))
    if version is None:
        return f"authOptions.mode is 'token' but rayVersion {spec.get('rayVersion')!r} is missing or invalid"
    if version < (2, 52, 0):
        return f"authOptions.mode is 'token' but minimum Ray version is 2.52.0, got {spec['rayVersion']}"
    if k8s and version < (2, 55, 0):
        return f"authOptions.enableK8sTokenAuth needs Ray 2.55.0 or later, got {spec['rayVersion']}"
    if k8s and options.get("secretName"):
        return "authOptions.enableK8sTokenAuth is enabled and authOptions.secretName is also set"
    return None


def _version(text: str) -> tuple[int, ...] | None:
    match = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(g or 0) for g in match.groups()) if match else None
