"""The fused kernels' autotune results: the shipped sets, their install into Triton's cache, the notice the
search gives, and evaluation through the reference ops (which pays no autotuning of its own)."""

import json
import os
import re
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement

from model import HybridConfig, HybridLM, library_env
from model.ops import tuning
from trainables.training.evaluation import evaluate
from trainables.training.loop import first_step_deadline
from tuner.space.domains import autotune_notice

VERSIONS = {"triton": "3.6.0", "fla-core": "0.6.0", "mamba-ssm": "2.3.2.post1"}


def shipped_set(root: Path, name: str = "sm90-test", capability=(9, 0), versions=VERSIONS) -> Path:
    folder = root / name
    entry = folder / "cache" / "KEYHASH" / "chunk_fwd_kernel_h.autotune.json"
    entry.parent.mkdir(parents=True)
    entry.write_text(
        json.dumps({"key": [64, "torch.bfloat16"], "configs_timings": [[{"num_warps": 4}, [0.1]]]})
    )
    manifest = {"capability": list(capability), "versions": versions, "gpu": "NVIDIA H100 80GB HBM3"}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_a_matching_set_is_copied_into_the_cache_under_its_keys(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "RESULTS", tmp_path / "results")
    shipped_set(tmp_path / "results")
    cache = tmp_path / "triton"
    line = tuning.install_tuned(cache, (9, 0), VERSIONS)
    copied = cache / "KEYHASH" / "chunk_fwd_kernel_h.autotune.json"
    assert json.loads(copied.read_text())["key"] == [64, "torch.bfloat16"]
    assert "1 kernel shapes" in line and "sm90-test" in line and "H100" in line
    assert not list(cache.rglob("*.tmp"))  # written through a temporary file, then renamed


@pytest.mark.parametrize(
    "capability, versions",
    [
        ((8, 0), VERSIONS),
        ((9, 0), {**VERSIONS, "triton": "3.5.1"}),
        ((9, 0), {**VERSIONS, "mamba-ssm": None}),
    ],
)
def test_another_gpu_target_or_version_installs_nothing(tmp_path, monkeypatch, capability, versions):
    monkeypatch.setattr(tuning, "RESULTS", tmp_path / "results")
    shipped_set(tmp_path / "results")
    assert tuning.install_tuned(tmp_path / "triton", capability, versions) is None
    assert not (tmp_path / "triton").exists()


def test_results_already_in_the_cache_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "RESULTS", tmp_path / "results")
    shipped_set(tmp_path / "results")
    mine = tmp_path / "triton" / "KEYHASH" / "chunk_fwd_kernel_h.autotune.json"
    mine.parent.mkdir(parents=True)
    mine.write_text('{"tuned": "here"}')
    tuning.install_tuned(tmp_path / "triton", (9, 0), VERSIONS)
    assert mine.read_text() == '{"tuned": "here"}'


def test_the_shipped_sets_are_whole():
    """Each set names what it was tuned on, and every file is a Triton autotune record."""
    sets = sorted(tuning.RESULTS.glob("*/manifest.json"))
    assert sets, "no shipped autotune set"
    for manifest_path in sets:
        manifest = json.loads(manifest_path.read_text())
        assert set(manifest["versions"]) == set(tuning.KEYED_ON) and len(manifest["capability"]) == 2
        files = list((manifest_path.parent / "cache").rglob("*.autotune.json"))
        assert len(files) == manifest["kernel_shapes"] > 0
        for f in files:
            record = json.loads(f.read_text())
            assert record["key"] and record["configs_timings"]
            # the winner Triton will read back: some candidate that ran
            assert min(t[0] for _, t in record["configs_timings"]) < float("inf")


def test_the_shipped_set_is_found_for_the_gpu_and_versions_it_was_tuned_on():
    manifest = json.loads(next(tuning.RESULTS.glob("*/manifest.json")).read_text())
    found = tuning.matching_set(tuple(manifest["capability"]), manifest["versions"])
    assert found is not None and found.name == "sm90-triton3.6.0"
    assert tuning.matching_set((8, 9), manifest["versions"]) is None


def test_autotune_results_are_kept_on_disk_unless_the_user_said_otherwise(monkeypatch):
    monkeypatch.delenv("TRITON_CACHE_AUTOTUNING", raising=False)
    library_env.keep_autotune_results()
    assert os.environ["TRITON_CACHE_AUTOTUNING"] == "1"
    monkeypatch.setenv("TRITON_CACHE_AUTOTUNING", "0")
    library_env.keep_autotune_results()
    assert os.environ["TRITON_CACHE_AUTOTUNING"] == "0"


def test_the_search_says_what_autotuning_will_cost_only_when_fused_is_searched():
    assert autotune_notice({"kernels": ["torch"]}, {"autotune_set": "sm90-triton3.6.0"}) is None
    assert "shipped for this GPU (sm90-triton3.6.0)" in autotune_notice({"kernels": ["torch", "fused"]},
                                                                       {"autotune_set": "sm90-triton3.6.0"})  # fmt: skip
    assert "no shipped autotune results" in autotune_notice({"kernels": ["fused", "torch"]}, {})


SMALL = dict(vocab_size=11, d_model=32, n_layers=2, seq_len=16, rwkv_n_heads=2, mamba_d_state=8,
             mamba_headdim=16, mamba_chunk_size=8, rwkv_mix_lora_rank=8, rwkv_decay_lora_rank=8)  # fmt: skip


def backends(model: HybridLM) -> set[tuple[str, str, str]]:
    return {(b.rwkv.backend, b.mamba.ssd_backend, b.mamba.conv_backend) for b in model.blocks}


def test_using_kernels_switches_every_mixer_and_restores_them_even_on_error():
    model = HybridLM(HybridConfig(**SMALL, kernels="fused"))
    with model.using_kernels("torch"):
        assert backends(model) == {("torch", "torch", "torch")}
    assert backends(model) == {("fla", "mamba_ssm", "mamba_ssm")}
    with pytest.raises(RuntimeError), model.using_kernels("naive"):
        raise RuntimeError("boom")
    assert backends(model) == {("fla", "mamba_ssm", "mamba_ssm")}
    with pytest.raises(ValueError, match="kernels must be one of"), model.using_kernels("cuda"):
        pass


class _EvalWorkload:
    """The hybrid workload's eval seam, on a model whose configured kernels cannot run on a CPU."""

    def __init__(self):
        self.seen = set()

    def loss(self, model, batch):
        self.seen |= backends(model)
        return model(*batch)[1]

    def evaluation(self, model):
        return model.using_kernels("torch")


def test_evaluation_runs_on_the_reference_ops_whatever_trained_the_weights():
    """A model configured for the fused kernels (which need CUDA) evaluates on a CPU: the val loss comes from
    the reference ops, so it is the same function of the weights as its torch twin's."""
    torch.manual_seed(0)
    fused = HybridLM(HybridConfig(**SMALL, kernels="fused"))
    twin = HybridLM(HybridConfig(**SMALL, kernels="torch"))
    twin.load_state_dict(fused.state_dict())
    idx = torch.randint(0, SMALL["vocab_size"], (2, 17))
    batches = [(idx[:, :-1], idx[:, 1:])]
    workload = _EvalWorkload()
    assert evaluate(fused, workload, batches) == pytest.approx(evaluate(twin, workload, batches), abs=0)
    assert workload.seen == {("torch", "torch", "torch")} and fused.training


def test_a_first_step_that_must_autotune_gets_the_cold_autotune_on_top_of_its_deadline():
    assert first_step_deadline(180.0, autotunes=True) == 180.0 + tuning.COLD_AUTOTUNE_S
    assert first_step_deadline(180.0, autotunes=False) == 180.0  # shipped results: compile only
    assert first_step_deadline(None, autotunes=True) is None  # no deadline stays none


def test_the_cuda_extra_bounds_each_kernel_package_and_admits_the_versions_the_shipped_sets_were_made_with():
    """model/ops/*_fused.py call the kernel packages' internal functions: a new minor is not installed until
    it is tested, and the versions the shipped autotune sets were tuned on stay installable."""
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    extra = re.search(r"^cuda = \[(.*?)\]", text, re.M | re.S).group(1)
    ranges = {r.name: r.specifier for r in map(Requirement, re.findall(r'"([^"]+)"', extra))}
    assert set(ranges) == {"fla-core", "mamba-ssm", "causal-conv1d"}
    for name, spec in ranges.items():
        assert any(s.operator == "<" for s in spec), f"{name}{spec} has no upper bound"
    manifests = sorted(tuning.RESULTS.glob("*/manifest.json"))
    assert manifests
    for manifest in manifests:
        versions = json.loads(manifest.read_text())["versions"]
        for name in ("fla-core", "mamba-ssm"):
            assert versions[name] in ranges[name], (manifest.parent.name, name, versions[name], ranges[name])
