"""MFU's parts: the dense peak by GPU name and precision, the FLOPs per token a workload counts (the hybrid's
own count, or 6 x trainable parameters for a workload without one), and the figure a run reports."""

from __future__ import annotations

import pytest
import torch
import toy_workload
from torch import nn

from model import HybridConfig, HybridLM
from trainables.config import ConfigError, make_config
from trainables.training.loop import train
from trainables.training.result import RunResult
from trainables.workloads import flops
from trainables.workloads.flops import PEAKS, gpu_peak, peak_flops
from trainables.workloads.workload import HybridLMWorkload, Job, check_workload

H100 = "NVIDIA H100 80GB HBM3"  # torch.cuda.get_device_name of an H100 SXM


def toy_cfg(**overrides):
    values = {"workload": "toy_workload:make_workload", "seq_len": 16, "batch_size": 8, "tokens": 8 * 16 * 6}
    values |= {"eval_interval": 0, "timing_warmup_steps": 2, "log_interval": 2, "device": "cpu"}
    return make_config(values | overrides)


# --- the peak table -----------------------------------------------------------------------------------------


def test_a_gpu_is_found_by_the_name_torch_reports_for_it():
    names = {
        H100: "H100 SXM",
        "NVIDIA H100 PCIe": "H100 PCIe",
        "NVIDIA H100 NVL": "H100 NVL",
        "NVIDIA H200": "H200 SXM",
        "NVIDIA GH200 480GB": "H200 SXM",
        "NVIDIA A100-SXM4-80GB": "A100",
        "NVIDIA A100 80GB PCIe": "A100",
        "NVIDIA A10": "A10",
        "NVIDIA L4": "L4",
        "NVIDIA L40S": "L40S",
        "NVIDIA L40": "L40",
    }
    assert {name: gpu_peak(name)[0] for name in names} == names


def test_an_unknown_gpu_or_a_cpu_has_no_peak_and_says_why():
    for name in ("NVIDIA A10G", "Tesla T4", "AMD Instinct MI300X", "", None):
        assert peak_flops(name, "bf16") is None, name
    assert "no dense peak is known for 'Tesla T4'" in flops.no_peak_reason("Tesla T4")
    assert "CPU" in flops.no_peak_reason(None)


def test_the_precision_picks_the_units_the_matmuls_run_on():
    assert peak_flops(H100, "bf16") == peak_flops(H100, "fp16") == 989.5e12  # fp16 runs at bf16's rate
    assert peak_flops(H100, "tf32") == 494.5e12 and peak_flops(H100, "fp32") == 67e12
    for model, _, peak in PEAKS:  # CUDA cores <= TF32 tensor cores <= bf16 tensor cores, on every GPU
        assert 0 < peak.fp32 <= peak.tf32 <= peak.bf16, model
    with pytest.raises(ValueError, match="precision must be one of fp32, tf32, bf16, fp16"):
        peak_flops(H100, "fp8")


# --- FLOPs per token ----------------------------------------------------------------------------------------


def test_the_hybrids_count_is_its_matmul_weights_and_its_state_updates_x3():
    cfg = HybridConfig()
    with torch.device("meta"):
        model = HybridLM(cfg)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    lora = sum(p.numel() for name, p in model.named_parameters() if name.endswith(("_w1", "_w2")))
    # state updates per token, forward: RWKV6 4 x head_size^2 per head, SSD 4 x headdim x d_state per head
    state = cfg.n_layers * 4 * (cfg.d_model**2 // cfg.rwkv_n_heads + cfg.mamba_d_inner * cfg.mamba_d_state)
    # counted from the built model's weights (2 FLOPs per weight forward, 4 backward), not the config's sums
    assert cfg.flops_per_token() == 6 * (linear + lora) + 3 * state
    # so within 6 x parameters' reach: no less than its nn.Linear weights', no more than every parameter's
    # plus the state updates (the only work per token that no parameter stands for)
    params = model.num_params()
    assert 6 * linear <= cfg.flops_per_token() <= 6 * params + 3 * state


def test_the_hybrid_workload_declares_its_count(tmp_path):
    cfg = make_config({"model": {"d_model": 32, "n_layers": 2, "rwkv_n_heads": 2, "mamba_headdim": 16},
                       "seq_len": 16, "eval_tokens": 64, "device": "cpu"})  # fmt: skip
    job = Job(HybridLMWorkload(cfg), cfg)
    model = job.build_model()
    assert job.flops_per_token(model) == (model.config.flops_per_token(), flops.FROM_WORKLOAD)


def test_a_workload_without_a_count_gets_six_times_its_trainable_parameters():
    cfg = toy_cfg()
    job = Job(toy_workload.make_workload(cfg), cfg)
    model = job.build_model()
    every = sum(p.numel() for p in model.parameters())
    assert job.flops_per_token(model) == (6 * every, "6 x parameters")
    embedding, head = model
    embedding.weight.requires_grad_(False)  # frozen: not trained, so no backward through its weights
    assert job.flops_per_token(model) == (6 * sum(p.numel() for p in head.parameters()), "6 x parameters")


class CountsBadly(toy_workload.ToyWorkload):
    def flops_per_token(self, model):
        return 0


def test_a_count_that_is_no_positive_number_is_refused_before_any_work():
    cfg = toy_cfg()
    with pytest.raises(ConfigError, match=r"flops_per_token\(model\) returned 0, expected a positive number"):
        check_workload(cfg, workload=CountsBadly(cfg))


# --- the run's figure ---------------------------------------------------------------------------------------


def test_mfu_is_tokens_per_s_times_flops_per_token_over_the_peak():
    assert flops.mfu(50_000.0, 6e8, 989.5e12) == pytest.approx(50_000 * 6e8 / 989.5e12)
    for missing in [(None, 6e8, 1e15), (5e4, None, 1e15), (5e4, 6e8, None), (0.0, 6e8, 1e15)]:
        assert flops.mfu(*missing) is None
    run = RunResult(
        tokens_per_s=50_000.0, flops_per_token=6e8, flops_source="6 x parameters", peak_flops=989.5e12
    )
    run = RunResult(
        **{**run.metrics(), "mfu": flops.mfu(run.tokens_per_s, run.flops_per_token, run.peak_flops)}
    )
    assert run.mfu_line("bf16") == (
        "MFU 3.0%: 6e+08 training FLOPs per token (6 x parameters) x 50,000 tok/s against a dense bf16 peak "
        "of 989.5 TFLOP/s"
    )
    assert RunResult(tokens_per_s=5e4).mfu_line("bf16") == ""


def test_a_cpu_run_reports_its_count_and_no_mfu():
    lines: list[str] = []
    result = train(toy_cfg(), log=lines.append)
    assert result.status == "ok" and result.tokens_per_s > 0
    assert result.flops_per_token == 6 * result.params and result.flops_source == "6 x parameters"
    assert result.peak_flops is None and result.mfu is None  # a CPU has no peak in the table
    assert not any(line.startswith("MFU") for line in lines)
    assert {"flops_per_token", "flops_source", "peak_flops", "mfu"} <= set(result.metrics())
