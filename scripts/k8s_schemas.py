"""Extract the pinned Kubernetes schemas that tests/backends validate JobSets against (tests/fixtures/k8s/).

1. The JobSet CRD's openAPIV3Schema (version v1alpha2) from a kubernetes-sigs/jobset release:
       git -C JOBSET_CLONE show v0.12.0:config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml > jobsets.yaml
2. The core definitions reachable from io.k8s.api.batch.v1.JobTemplateSpec (it holds PodTemplateSpec) from
   the Kubernetes OpenAPI as the PyPI package kubernetes-validate ships it, strict (additionalProperties: false):
       pip download kubernetes-validate==1.37.0 --no-deps -d /tmp/kv
       unzip /tmp/kv/kubernetes_validate-1.37.0-py3-none-any.whl \
           'kubernetes_validate/kubernetes-json-schema/v1.33.0-local-strict/_definitions.json' -d /tmp/kv

   python scripts/k8s_schemas.py jobsets.yaml \
       /tmp/kv/kubernetes_validate/kubernetes-json-schema/v1.33.0-local-strict/_definitions.json

Descriptions are dropped (they do not validate anything and are most of the bytes); nothing else is changed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "k8s"
JOBSET_RELEASE = "v0.12.0"
JOBSET_COMMIT = "f22e565ac3cc3265c7c45ef67ecffdc689af5d77"
KUBERNETES_VERSION = "v1.33.0"
ROOT = "io.k8s.api.batch.v1.JobTemplateSpec"


def without_descriptions(schema: Any) -> Any:
    """The schema less its `description`s; a property that happens to be named description is kept."""
    if isinstance(schema, list):
        return [without_descriptions(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "description" and isinstance(value, str):
            continue
        if key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(value, dict):
            out[key] = {name: without_descriptions(sub) for name, sub in value.items()}
        else:
            out[key] = without_descriptions(value)
    return out


def refs(schema: Any) -> set[str]:
    if isinstance(schema, dict):
        found = {schema["$ref"].rsplit("/", 1)[-1]} if isinstance(schema.get("$ref"), str) else set()
        return found.union(*(refs(v) for v in schema.values()))
    if isinstance(schema, list):
        return set().union(*(refs(v) for v in schema))
    return set()


def reachable(defs: dict[str, Any], root: str) -> dict[str, Any]:
    todo, seen = [root], set()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(refs(defs[name]) - seen)
    return {name: defs[name] for name in sorted(seen)}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("crd", type=Path, help="jobset.x-k8s.io_jobsets.yaml of the JobSet release")
    parser.add_argument("definitions", type=Path, help="kubernetes-validate's _definitions.json")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)

    crd = yaml.safe_load(args.crd.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2")
    jobset = {
        "$comment": f"openAPIV3Schema of {crd['metadata']['name']} v1alpha2, kubernetes-sigs/jobset {JOBSET_RELEASE} "
                    f"(commit {JOBSET_COMMIT}) config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml, sha256 "
                    f"{sha256(args.crd)}; descriptions dropped by scripts/k8s_schemas.py",
        **without_descriptions(version["schema"]["openAPIV3Schema"]),
    }
    (OUT / f"jobset-{JOBSET_RELEASE}.schema.json").write_text(json.dumps(jobset, indent=None, sort_keys=True) + "\n")

    source = json.loads(args.definitions.read_text())
    core = {
        "$schema": source["$schema"],
        "$comment": f"Kubernetes {KUBERNETES_VERSION} OpenAPI definitions reachable from {ROOT}, from PyPI "
                    f"kubernetes-validate 1.37.0 kubernetes-json-schema/{KUBERNETES_VERSION}-local-strict/"
                    f"_definitions.json (sha256 {sha256(args.definitions)}); descriptions dropped by "
                    "scripts/k8s_schemas.py",
        "$ref": f"#/$defs/{ROOT}",
        "$defs": without_descriptions(reachable(source["$defs"], ROOT)),
    }
    (OUT / f"core-{KUBERNETES_VERSION}-jobtemplatespec.schema.json").write_text(
        json.dumps(core, indent=None, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
