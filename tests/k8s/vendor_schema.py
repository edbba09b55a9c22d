"""Writes the v1 schema of each KubeRay CRD (descriptions dropped) next to this file, as
kuberay-rayjob-v1.json.gz and kuberay-raycluster-v1.json.gz.

    python tests/k8s/vendor_schema.py ../shared/k8s/crds/ray.io_rayjobs.yaml ../shared/k8s/crds/ray.io_rayclusters.yaml

The CRDs themselves are 1-1.4 MB of YAML kept outside the repository; the tests need only their
openAPIV3Schema. The files are byte-for-byte reproducible (gzip mtime 0, sorted keys).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).parent


def without_descriptions(node):
    if isinstance(node, dict):
        return {k: without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [without_descriptions(v) for v in node]
    return node


def target(doc: dict) -> Path:
    return HERE / f"kuberay-{doc['spec']['names']['singular']}-v1.json.gz"


def vendor(crd: str) -> None:
    doc = yaml.load(Path(crd).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (version,) = [v for v in doc["spec"]["versions"] if v["name"] == "v1"]
    schema = without_descriptions(version["schema"]["openAPIV3Schema"])
    body = json.dumps(schema, sort_keys=True, separators=(",", ":")).encode()
    path = target(doc)
    path.write_bytes(gzip.compress(body, mtime=0))
    print(f"{path}: {len(body):,} bytes of schema, {path.stat().st_size:,} gzipped")


if __name__ == "__main__":
    for crd in sys.argv[1:]:
        vendor(crd)
