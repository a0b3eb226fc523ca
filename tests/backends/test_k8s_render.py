"""Kubernetes JobSets without a cluster: golden manifests, the pinned schemas, the torchrun argv, hostile values.

Regenerate the golden files after an intended change:  UPDATE_GOLDEN=1 pytest tests/backends/test_k8s_render.py
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.backends import k8s
from launcher.errors import UserError
from launcher.pipeline.shell import HostFromEnv
from tests.backends.k8s_support import (
    GOLDEN_DIR,
    expand,
    render_preset,
    resolve_preset,
    schema_errors,
    webhook_errors,
)
from tests.golden_files import assert_matches_golden

pytest.importorskip("jsonschema")

# Each golden file: (preset, overrides, nodes, GPUs per node).
GOLDEN_CASES = {
    "toy": ("toy", (), None, None),
    "345m": ("345m", (), None, None),
    "175b": ("175b", (), None, None),
    "345m-2x8-rdma-kueue": ("345m", (
        "k8s.namespace=llm", "k8s.rdma_resource=rdma/ib", "k8s.rdma_count=4",
        "k8s.network_annotation=default/ib-net1,default/ib-net2", "k8s.queue=gpu-queue", "k8s.max_restarts=5",
        "k8s.time=04:00:00", "k8s.grace_seconds=600", "k8s.ttl_seconds=3600", "k8s.image_pull_policy=IfNotPresent",
        "k8s.secret=wandb", "env.WANDB_API_KEY=not-in-the-manifest", "env.NCCL_IB_HCA=mlx5",
        "global_batch_size=256"), 2, 8),
}
POD = ("spec", "replicatedJobs", 0, "template", "spec", "template", "spec")


def _at(obj, path):
    for key in path:
        obj = obj[key]
    return obj


def container(obj):
    return _at(obj, POD)["containers"][0]


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden_jobsets(case):
    name, overrides, nodes, gpus = GOLDEN_CASES[case]
    _, text = render_preset(name, overrides, nodes, gpus)
    assert_matches_golden(text, GOLDEN_DIR / f"{case}.yaml", f"{case}: rendered JobSet", __file__)


def test_every_golden_file_has_a_case():
    assert {p.stem for p in GOLDEN_DIR.glob("*.yaml")} == set(GOLDEN_CASES)


@pytest.mark.parametrize("golden", sorted(GOLDEN_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_golden_jobsets_validate_against_the_pinned_schemas(golden):
    assert schema_errors(yaml.safe_load(golden.read_text())) == []


@pytest.mark.parametrize("golden", sorted(GOLDEN_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_golden_jobsets_pass_the_jobset_webhooks_rules(golden):
    assert webhook_errors(yaml.safe_load(golden.read_text())) == []


def test_the_longest_names_pass_the_jobset_webhooks_rules(tmp_path):
    run_dir = tmp_path / ("x" * 200 + "-20261201T213125Z-12")
    made, _ = render_preset("175b", ("k8s.name=" + "a" * 22,), run_dir=run_dir)  # the longest name allowed
    assert webhook_errors(made.obj) == []
    made, _ = render_preset("175b", run_dir=run_dir)
    assert len(made.job.name) == 22 and webhook_errors(made.obj) == []


def test_the_webhook_rules_reject_a_name_too_long_for_the_coordinator_label():
    made, _ = render_preset("345m", nodes=2)
    obj = copy.deepcopy(made.obj)
    obj["metadata"]["name"] = obj["spec"]["network"]["subdomain"] = "a" * 27
    assert webhook_errors(obj) == [f"coordinator label value '{'a' * 27}-node-0-0.{'a' * 27}' is invalid"]


def test_175b_is_one_indexed_job_of_192_pods_with_8_gpus_each():
    made, _ = render_preset("175b")
    job = _at(made.obj, ("spec", "replicatedJobs", 0, "template", "spec"))
    assert (job["completionMode"], job["completions"], job["parallelism"], job["backoffLimit"]) == \
        ("Indexed", 192, 192, 0)
    assert container(made.obj)["resources"]["limits"] == {"nvidia.com/gpu": 8}
    assert made.obj["spec"]["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True,
                                           "subdomain": "m175b"}
    assert made.obj["spec"]["coordinator"] == {"replicatedJob": "node", "jobIndex": 0, "podIndex": 0}


def _broken(mutate):
    made, _ = render_preset("345m", nodes=2)
    obj = copy.deepcopy(made.obj)
    mutate(obj)
    return schema_errors(obj)


def test_the_schemas_reject_a_wrong_enum():
    errors = _broken(lambda o: o["spec"]["failurePolicy"].update(restartStrategy="Sometimes"))
    assert errors == ["JobSet CRD: jobset.spec.failurePolicy.restartStrategy: 'Sometimes' is not one of "
                      "['Recreate', 'BlockingRecreate', 'InPlaceRestart']"]


def test_the_schemas_reject_a_gpu_count_that_is_not_a_quantity():
    errors = _broken(lambda o: container(o)["resources"]["limits"].update({"nvidia.com/gpu": "eight"}))
    assert len(errors) == 1
    assert errors[0].startswith("JobSet CRD: jobset.spec.replicatedJobs[0].template.spec.template.spec.containers[0]"
                                ".resources.limits.nvidia.com/gpu: 'eight' does not match ")


def test_the_schemas_reject_an_unknown_field_in_the_crd_and_in_the_core_pod_spec():
    errors = _broken(lambda o: container(o).update(imagee="x"))
    where = "spec.replicatedJobs[0].template.spec.template.spec.containers[0]: Additional properties are not " \
            "allowed ('imagee' was unexpected)"
    assert errors == [f"JobSet CRD: jobset.{where}", f"core: jobset.{where}"]


def test_the_schemas_reject_a_wrong_type():
    errors = _broken(lambda o: _at(o, ("spec", "replicatedJobs", 0, "template", "spec")).update(completions="2"))
    assert errors == ["JobSet CRD: jobset.spec.replicatedJobs[0].template.spec.completions: '2' is not of type "
                      "'integer'", "core: jobset.spec.replicatedJobs[0].template.spec.completions: '2' is not of type "
                      "'integer', 'null'"]


# -- the torchrun argv -------------------------------------------------------------------------------------------

def pod_argv(obj, master_addr: str) -> list[str]:
    """What the pod's `exec "$@"` runs: the args after Kubernetes' expansion, less the data files' count and list."""
    args = [expand(word, {"MASTER_ADDR": master_addr}) for word in container(obj)["args"]]
    return args[1 + int(args[0]):]


def resolved_argv(command, master_addr: str) -> list[str]:
    return [word.resolve(master_addr) if isinstance(word, HostFromEnv) else word for word in command.argv]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.sampled_from([1, 2, 4]), lr=st.floats(1e-4, 1e-2),
       save=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=30))
def test_the_pods_run_exactly_the_resolved_torchrun_argv(nodes, lr, save):
    job, command = resolve_preset("345m", (f"lr={lr}", f"save=/shared/runs/345m/{save}"), nodes=nodes,
                                  gpus_per_node=1)
    made = k8s.prepare(job, command)
    reread = yaml.safe_load(k8s.render_yaml(made.obj))  # what the API server reads
    assert reread == made.obj
    host = f"{made.job.name}-node-0-0.{made.job.name}"
    assert pod_argv(reread, host) == resolved_argv(command, host)
    # torchrun's world: --nnodes and --nproc-per-node as resolved, c10d at pod 0's name when there are several
    assert pod_argv(reread, host)[:5] == ["torchrun", "--nnodes", str(nodes), "--nproc-per-node", "1"]
    assert (f"{host}:29500" in pod_argv(reread, host)) == (nodes > 1)


@given(st.text(max_size=60))
def test_escaped_words_survive_kubernetes_expansion(text):
    assert expand(k8s.k8s_word(text), {"MASTER_ADDR": "evil", "HOME": "evil"}) == text


@pytest.mark.parametrize("text", ["x$é", "$ü$", "a$\u202e", "$€(", "$(HOME)$日本"])
def test_a_dollar_before_a_non_ascii_character_survives_kubernetes_expansion(text):
    assert expand(k8s.k8s_word(text), {"HOME": "evil"}) == text


def test_the_entry_script_holds_nothing_kubernetes_would_expand():
    assert k8s.k8s_word(k8s.ENTRY_SCRIPT) == k8s.ENTRY_SCRIPT


# -- hostile values -------------------------------------------------------------------------------------------

HOSTILE = "a\nb: c\n- d\n'\"$(id)`id`${HOME} &anchor *alias !!python/object:os.system {x: [y]} # no"


def test_hostile_values_stay_values_and_add_no_field_or_command(tmp_path):
    run_dir = tmp_path / "runs" / "hostile"
    made, text = render_preset("345m", (f"env.HOSTILE={HOSTILE}", f"tokenizer_model={HOSTILE}",
                                        f"k8s.name=x{len(HOSTILE) % 10}"), nodes=2, gpus_per_node=1,
                               run_dir=run_dir)
    reread = yaml.safe_load(text)
    assert reread == made.obj  # the same object: nothing added, nothing lost
    env = {e["name"]: e for e in container(reread)["env"]}
    assert expand(env["HOSTILE"]["value"], {"id": "evil"}) == HOSTILE
    args = pod_argv(reread, "host")
    assert args[args.index("--tokenizer-model") + 1] == HOSTILE
    assert set(container(reread)) == {"name", "image", "command", "args", "env", "resources", "volumeMounts"}
    assert container(reread)["command"][:2] == ["bash", "-c"] and container(reread)["command"][2] == k8s.ENTRY_SCRIPT


@functools.cache
def _base_job():
    return render_preset("345m", nodes=2)[0].job


@settings(max_examples=30, deadline=None)
@given(value=st.text(st.characters(blacklist_categories=("Cs",)), max_size=80),
       word=st.text(st.characters(blacklist_categories=("Cs",)), max_size=80))
def test_any_text_in_an_env_value_or_an_argument_comes_back_unchanged_and_adds_nothing(value, word):
    job = dataclasses.replace(_base_job(), env={"ANY": value}, argv=(*_base_job().argv, "--tokenizer-model", word))
    obj = k8s.jobset(job)
    reread = yaml.safe_load(k8s.render_yaml(obj))
    assert reread == obj
    env = {e["name"]: e for e in container(reread)["env"]}
    assert expand(env["ANY"]["value"], {"MASTER_ADDR": "evil"}) == value
    assert expand(container(reread)["args"][-1], {"MASTER_ADDR": "evil"}) == word


@pytest.mark.parametrize(("setting", "message"), [
    ("k8s.image=nvcr.io/x:1\n  privileged: true", "k8s.image='nvcr.io/x:1\\n  privileged: true' is not a container "
                                                   "image reference"),
    ("k8s.name=a: {b: c}", "k8s.name='a: {b: c}' is not a JobSet name of at most 22 characters"),
    ("k8s.namespace=$(id)", "k8s.namespace='$(id)' is not a namespace name (DNS-1123 label)"),
    ("k8s.pvc=runs\nkind: Pod", "k8s.pvc='runs\\nkind: Pod' is not a PersistentVolumeClaim name"),
])
def test_hostile_names_are_refused_before_rendering(setting, message):
    with pytest.raises(UserError) as info:
        render_preset("345m", (setting,))
    assert message in info.value.render()


def test_a_secret_comes_from_a_secret_and_never_appears_in_the_manifest():
    made, text = render_preset("345m", ("env.HF_TOKEN=hf_do_not_print", "k8s.secret=tokens"))
    env = {e["name"]: e for e in container(made.obj)["env"]}
    assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "tokens", "key": "HF_TOKEN"}}}
    assert "hf_do_not_print" not in text


def test_a_secret_without_a_secret_name_is_refused_with_the_kubectl_command():
    with pytest.raises(UserError) as info:
        render_preset("345m", ("env.HF_TOKEN=hf_do_not_print",))
    rendered = info.value.render()
    assert "env.HF_TOKEN is a secret: a Kubernetes job reads it from a Secret, never from the manifest" in rendered
    assert "kubectl create secret generic NAME -n default --from-literal=HF_TOKEN=…" in rendered
    assert "hf_do_not_print" not in rendered


# -- restarts resume: the Slurm path ------------------------------------------------------------------------

def test_a_restarted_jobset_resumes_from_its_checkpoints_on_the_pvc():
    job, command = resolve_preset("345m", nodes=2, gpus_per_node=1)
    made = k8s.prepare(job, command)
    args = command.argv
    save = args[args.index("--save") + 1]
    assert args[args.index("--load") + 1] == save == "/shared/runs/345m/checkpoints"
    assert "--exit-signal-handler" in args  # resolve's signal settings, shared with Slurm
    mounts = {m["name"]: m["mountPath"] for m in container(made.obj)["volumeMounts"]}
    assert Path(save).is_relative_to(mounts["runs"]) and mounts["dshm"] == "/dev/shm"
    assert made.obj["spec"]["failurePolicy"]["maxRestarts"] == 3
    assert _at(made.obj, POD)["terminationGracePeriodSeconds"] == 300
    env = {e["name"]: e.get("value") for e in container(made.obj)["env"]}
    assert env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == "300"


def test_a_different_exit_signal_is_refused_as_for_slurm():
    with pytest.raises(UserError, match="exit_signal=SIGUSR1 would never fire"):
        resolve_preset("345m", ("exit_signal=SIGUSR1",))


def test_a_checkpoint_directory_outside_the_pvc_is_warned_about():
    made, _ = render_preset("345m", ("save=/elsewhere/ckpt",))
    assert "save=/elsewhere/ckpt is not on the PVC (mounted at /shared/runs): a restarted pod will not find it" \
        in made.warnings


def test_megatron_below_the_pvc_is_warned_about_and_the_root_is_refused_as_mount_point():
    made, _ = render_preset("345m", run_dir=Path("/opt/345m"))
    assert "Megatron-LM at /opt/megatron-lm is below the PVC's mount point /opt: the pods run the copy on the PVC, " \
        "not the image's" in made.warnings
    with pytest.raises(UserError, match="the run root / cannot be the PVC's mount point in the pods"):
        render_preset("345m", run_dir=Path("/345m"))


def test_names_come_from_the_run_directory_and_fit_the_coordinator_label():
    assert k8s.default_name(Path("/r/345m-20261201T213125Z")) == "m345m-261201213125"
    assert k8s.default_name(Path("/r/My Preset!-20261201T213125Z-3")) == "my-pres-261201213125-3"
    name = k8s.default_name(Path("/r/" + "x" * 200 + "-20261201T213125Z-12"))
    assert len(f"{name}-r99-node-0-0.{name}-r99") <= 63


def test_the_default_image_is_the_container_the_pin_was_tested_in_which_check_assumes():
    from launcher.megatron.target import DECLARED_TE_VERSION, NGC_IMAGE, AssumedMachine
    from launcher.pipeline.k8s_settings import parse_k8s_settings

    assert parse_k8s_settings({"pvc": "runs"}).image == NGC_IMAGE
    assumed = AssumedMachine("h200-141gb", True, True).describe()
    assert f"Transformer Engine {DECLARED_TE_VERSION} ({NGC_IMAGE})" in assumed


def test_a_null_in_env_is_unset_in_the_pod_even_where_the_image_sets_it(tmp_path):
    """launcher.env's null: the manifest names it, and the entry script unsets it before torchrun."""
    import subprocess

    made, _ = render_preset("345m", ("env.NCCL_DEBUG=null",))
    env = {e["name"]: e.get("value") for e in container(made.obj)["env"]}
    assert env["MEGATRON_LAUNCH_UNSET"] == "NCCL_DEBUG" and "NCCL_DEBUG" not in env
    pod_env = {"NNODES": "1", "NODE_RANK": "0", "MASTER_ADDR": "localhost", "MEGATRON_LAUNCH_DNS_TIMEOUT": "1",
               "MEGATRON_LAUNCH_LOG_DIR": str(tmp_path / "logs"), "PATH": "/usr/bin:/bin",
               "NCCL_DEBUG": "INFO", "MEGATRON_LAUNCH_UNSET": env["MEGATRON_LAUNCH_UNSET"],
               "MEGATRON_LAUNCH_SUPERVISOR": env["MEGATRON_LAUNCH_SUPERVISOR"]}
    pod_env["PATH"] = f"{Path(sys.executable).parent}:{pod_env['PATH']}"  # the image's python3
    probe = 'echo "${NCCL_DEBUG-unset} ${MEGATRON_LAUNCH_UNSET-unset}"'
    out = subprocess.run(["bash", "-c", k8s.ENTRY_SCRIPT, "megatron-launch", "0", "bash", "-c", probe],
                         env=pod_env, capture_output=True, text=True, timeout=30, check=True).stdout
    assert out.splitlines()[-1] == "unset unset"
    refused = k8s.check_job(dataclasses.replace(made.job, unset=("MASTER_ADDR",)), resolve_preset("345m")[0])
    assert any("env.MASTER_ADDR is set by the Kubernetes backend" in p.message for p in refused)
