"""The offline checks every manifest of this repository passes: `kustomize build` (the subset k8s/ uses),
then each object strictly (unknown fields fail, as `kubectl apply --validate=strict` does): KubeRay kinds
against their v1.7.0 CRD schema and KubeRay's own admission rules (kuberay_rules.py), core kinds with
kubernetes-validate. `problems(obj)` is the one entry point; an empty list means the object passes.
"""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path

import jsonpatch
import jsonschema
import kubernetes_validate
import yaml

from tests.k8s.kuberay_rules import raycluster_problems, rayjob_problems

HERE = Path(__file__).parent
KUBERNETES_VERSION = "1.33"
KUBERAY_KINDS = {"RayJob": "rayjob", "RayCluster": "raycluster"}
KUBERAY_RULES = {"RayJob": rayjob_problems, "RayCluster": raycluster_problems}


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
        objects += build(path) if path.is_dir() else load(path.read_text())
    for patch in spec.get("patches", []):
        target = patch["target"]
        hits = [o for o in objects if all(_matches(o, k, v) for k, v in target.items())]
        assert len(hits) == 1, f"{folder}: patch target {target} matches {len(hits)} objects"
        patched = jsonpatch.apply_patch(hits[0], yaml.safe_load(patch["patch"]))
        objects[objects.index(hits[0])] = patched
    for image in spec.get("images", []):
        new = f"{image.get('newName', image['name'])}:{image.get('newTag', 'latest')}"
        for container in containers(objects):
            if container["image"].split(":")[0] == image["name"]:
                container["image"] = new
    return objects


def load(text: str) -> list[dict]:
    """The objects of a multi-document YAML file."""
    return [d for d in yaml.safe_load_all(text) if d]


def _matches(obj: dict, key: str, value: str) -> bool:
    group, _, version = obj["apiVersion"].rpartition("/")
    actual = {"group": group, "version": version, "kind": obj["kind"], "name": obj["metadata"]["name"]}
    return actual[key] == value


def cluster_spec(obj: dict) -> dict | None:
    """The Ray cluster a KubeRay object asks for (a RayJob's rayClusterSpec, a RayCluster's spec)."""
    if obj["kind"] == "RayJob":
        return obj["spec"].get("rayClusterSpec")
    return obj["spec"] if obj["kind"] == "RayCluster" else None


def pod_specs(objects: list[dict]):
    """(group name, pod spec) of every Ray pod the objects ask for: "head", then each worker group."""
    for obj in objects:
        cluster = cluster_spec(obj)
        if cluster is None:
            continue
        yield "head", cluster["headGroupSpec"]["template"]["spec"]
        for group in cluster.get("workerGroupSpecs", []):
            yield group["groupName"], group["template"]["spec"]


def containers(objects: list[dict]):
    for _, pod in pod_specs(objects):
        yield from pod["containers"]


# --- strict validation ------------------------------------------------------------------------------------


def strict(schema: dict) -> dict:
    """An OpenAPI v3 CRD schema as JSON Schema that rejects unknown fields (the API server prunes them)."""
    node = dict(schema)
    for key in ("properties", "patternProperties"):
        if key in node:
            node[key] = {name: strict(sub) for name, sub in node[key].items()}
    for key in ("items", "additionalProperties", "not"):
        if isinstance(node.get(key), dict):
            node[key] = strict(node[key])
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


@functools.cache
def validator(kind: str) -> jsonschema.Validator:
    """The strict JSON Schema validator of a KubeRay kind, from its vendored CRD schema."""
    path = HERE / f"kuberay-{KUBERAY_KINDS[kind]}-v1.json.gz"
    return jsonschema.Draft7Validator(strict(json.loads(gzip.decompress(path.read_bytes()))))


def schema_problems(obj: dict) -> list[str]:
    errors = validator(obj["kind"]).iter_errors(obj)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]


def problems(obj: dict) -> list[str]:
    """Why the API server (KubeRay kinds: and the operator) would refuse `obj`; empty when it would not."""
    if obj.get("kind") in KUBERAY_KINDS:
        if obj.get("apiVersion") != "ray.io/v1":
            return [f"apiVersion: {obj.get('apiVersion')!r} is not ray.io/v1"]
        # the API server refuses a schema violation before the operator's rules ever see the object
        return schema_problems(obj) or KUBERAY_RULES[obj["kind"]](obj)
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as err:
        return [f"{'/'.join(map(str, err.path))}: {err.message}"]
    except kubernetes_validate.SchemaNotFoundError as err:
        return [f"no schema for {obj.get('apiVersion')} {obj.get('kind')} ({err})"]
    return []
