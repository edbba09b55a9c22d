"""Writes the RayJob v1 schema of the KubeRay CRD (descriptions dropped) as tests/k8s/kuberay-rayjob-v1.json.gz.

    python tests/k8s/vendor_schema.py ../shared/k8s/crds/ray.io_rayjobs.yaml

The CRD itself is 1.4 MB of YAML kept outside the repository; the tests need only its openAPIV3Schema.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import yaml

TARGET = Path(__file__).with_name("kuberay-rayjob-v1.json.gz")


def without_descriptions(node):
    if isinstance(node, dict):
        return {k: without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [without_descriptions(v) for v in node]
    return node


def main(crd: str) -> None:
    doc = yaml.safe_load(Path(crd).read_text())
    (version,) = [v for v in doc["spec"]["versions"] if v["name"] == "v1"]
    schema = without_descriptions(version["schema"]["openAPIV3Schema"])
    body = json.dumps(schema, sort_keys=True, separators=(",", ":")).encode()
    TARGET.write_bytes(gzip.compress(body, mtime=0))
    print(f"{TARGET}: {len(body):,} bytes of schema, {TARGET.stat().st_size:,} gzipped")


if __name__ == "__main__":
    main(sys.argv[1])
