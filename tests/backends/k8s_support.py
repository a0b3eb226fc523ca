"""Shared pieces of the Kubernetes tests: JobSets rendered from the shipped presets, the pinned schemas
(tests/fixtures/k8s, made by scripts/k8s_schemas.py) as strict validators, and Kubernetes' own `$(NAME)`
expansion of container commands, args and env values."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from launcher.backends import k8s
from launcher.megatron.pin import Kernels
from launcher.pipeline.command import Command, build_command
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import ResolvedJob, kernels_of, resolve, target_for

SCHEMAS = Path(__file__).resolve().parent.parent / "fixtures" / "k8s"
JOBSET_SCHEMA = SCHEMAS / "jobset-v0.12.0.schema.json"
CORE_SCHEMA = SCHEMAS / "core-v1.33.0-jobtemplatespec.schema.json"
GOLDEN_DIR = Path(__file__).resolve().parent.parent / "golden" / "k8s"
GOLDEN_MEGATRON = Path("/opt/megatron-lm")
GOLDEN_RUNS = Path("/shared/runs")
IMAGE = "nvcr.io/nvidia/pytorch:25.01-py3"
REQUIRED = (f"k8s.image={IMAGE}", "k8s.pvc=training-runs")


def resolve_preset(name: str, overrides: tuple[str, ...] = (), nodes: int | None = None,
                   gpus_per_node: int | None = None, run_dir: Path | None = None,
                   kernels: Kernels | None = None) -> tuple[ResolvedJob, Command]:
    preset = load_preset(name, [*REQUIRED, *overrides])
    target = target_for(preset, slurm=False, kubernetes=True)
    job = resolve(preset, nodes, gpus_per_node, kernels=kernels or kernels_of(preset, target),
                  megatron_path=GOLDEN_MEGATRON, target=target, run_dir=run_dir or GOLDEN_RUNS / name)
    return job, build_command(job)


def render_preset(name: str, overrides: tuple[str, ...] = (), nodes: int | None = None,
                  gpus_per_node: int | None = None, run_dir: Path | None = None) -> tuple[k8s.Prepared, str]:
    job, command = resolve_preset(name, overrides, nodes, gpus_per_node, run_dir)
    made = k8s.prepare(job, command)
    return made, k8s.render_yaml(made.obj, made.job.about)


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' expansion of `$(NAME)` (k8s.io/kubernetes third_party/forked/golang/expansion, Expand), byte by
    byte as Go does it: `$$` is one `$`, `$(NAME)` the variable (left as written when undefined), and any other
    `$` is kept with the next byte, which Go's string(input[0]) re-encodes as the character of that byte value
    (`$é`, bytes C3 A9, becomes `$Ã©`)."""
    data, out, i = text.encode("utf-8", "surrogatepass"), bytearray(), 0
    while i < len(data):
        if data[i:i + 1] == b"$" and i + 1 < len(data):
            nxt = data[i + 1]
            if nxt == ord("$"):
                out += b"$"
                i += 2
                continue
            if nxt == ord("("):
                close = data.find(b")", i + 2)
                if close == -1:  # incomplete reference: kept
                    out += b"$("
                    i += 2
                    continue
                name = data[i + 2:close].decode("utf-8", "surrogatepass")
                out += env.get(name, f"$({name})").encode("utf-8", "surrogatepass")
                i = close + 1
                continue
            out += b"$" + chr(nxt).encode("utf-8")
            i += 2
            continue
        out.append(data[i])
        i += 1
    return out.decode("utf-8", "surrogatepass")


def _strict(schema: Any) -> Any:
    """A CRD schema as the API server reads it with fieldValidation=Strict: unknown fields are errors."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: (({name: _strict(sub) for name, sub in value.items()}) if key == "properties" else _strict(value))
           for key, value in schema.items()}
    if "properties" in out and "additionalProperties" not in out \
            and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


@functools.cache
def _validators():
    import jsonschema

    jobset = jsonschema.Draft7Validator(_strict(json.loads(JOBSET_SCHEMA.read_text())))
    core = json.loads(CORE_SCHEMA.read_text())
    job_template = jsonschema.Draft202012Validator(core)
    meta = jsonschema.Draft202012Validator({"$schema": core["$schema"], "$defs": core["$defs"],
                                            "$ref": "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"})
    return jobset, job_template, meta


def schema_errors(obj: Mapping[str, Any]) -> list[str]:
    """Every way `obj` breaks the pinned JobSet CRD schema or the core Job template / ObjectMeta definitions,
    as `where: what` lines (empty when it validates)."""
    jobset, job_template, meta = _validators()

    def lines(validator, instance, schema: str, prefix: str) -> list[str]:
        return [f"{schema}: {prefix}{''.join(f'.{p}' if isinstance(p, str) else f'[{p}]' for p in e.absolute_path)}"
                f": {e.message}" for e in validator.iter_errors(instance)]

    found = lines(jobset, obj, "JobSet CRD", "jobset")
    found += lines(meta, obj.get("metadata"), "core", "jobset.metadata")
    for i, replicated in enumerate((obj.get("spec") or {}).get("replicatedJobs") or []):
        found += lines(job_template, replicated.get("template"), "core", f"jobset.spec.replicatedJobs[{i}].template")
    return found


# JobSet v0.12.0's admission webhook (pkg/webhooks/jobset_webhook.go, ValidateCreate): the rules that concern
# the fields the launcher writes, reimplemented here; the CRD schema does not hold them.
_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_RULE_NAME = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
_JOB_FAILURE_REASONS = ("BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes", "MaxFailedIndexesExceeded",
                        "PodFailurePolicy")


def _dns1035(value: str) -> bool:
    return len(value) <= 63 and bool(_DNS1035.fullmatch(value))


def webhook_errors(obj: Mapping[str, Any]) -> list[str]:
    name, spec = obj["metadata"]["name"], obj["spec"]
    errors = []
    subdomain = spec.get("network", {}).get("subdomain") or name
    if not _dns1035(subdomain):
        errors.append(f"spec.network.subdomain {subdomain!r} is not a DNS-1035 label")
    for rjob in spec["replicatedJobs"]:
        job = rjob["template"]["spec"]
        longest_job = f"{name}-{rjob['name']}-{rjob['replicas'] - 1}"
        if not _dns1035(longest_job):
            errors.append(f"job name {longest_job!r} is not a DNS-1035 label")
        if job.get("completionMode") == "Indexed" and job.get("completions"):
            longest_pod = f"{longest_job}-{job['completions'] - 1}-abcde"
            if not _dns1035(longest_pod):
                errors.append(f"pod name {longest_pod!r} is not a DNS-1035 label")
    for rule in spec.get("failurePolicy", {}).get("rules", []):
        if not (1 <= len(rule["name"]) <= 128 and _RULE_NAME.fullmatch(rule["name"])):
            errors.append(f"failure policy rule name {rule['name']!r} is invalid")
        errors += [f"job failure reason {r!r} is not recognized" for r in rule.get("onJobFailureReasons", [])
                   if r not in _JOB_FAILURE_REASONS]
    if "coordinator" in spec:
        c = spec["coordinator"]
        label = f"{name}-{c['replicatedJob']}-{c['jobIndex']}-{c['podIndex']}.{subdomain}"
        if not (len(label) <= 63 and _LABEL_VALUE.fullmatch(label)):
            errors.append(f"coordinator label value {label!r} is invalid")
    return errors
