"""The training loop, its config and its CLI, on CPU.

Most runs use the smoke config shrunk to a one-layer model and a few steps (about a second each), or the toy
workload of tests/toy_workload.py. The corpus is ../shared/data/tinyshakespeare.txt when the checkout has it,
else the embedded one; only the smoke acceptance run needs tinyshakespeare.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import resource
import subprocess
import sys
import time
import typing
from pathlib import Path

import pytest
import torch
import toy_workload

from tests.user_env import user_env
from trainables import train as train_cli
from trainables.common.errors import DataError
from trainables.config import (
    ConfigError,
    TrainConfig,
    load_config,
    make_config,
    read_yaml,
    training_section,
)
from trainables.data import CharTokenizer
from trainables.training import cpu_load, loop, timing
from trainables.training.cache_use import classify
from trainables.training.loop import fp32_fused_note, lr_at, resolve_device, train
from trainables.training.result import RunResult
from trainables.training.step_model import param_groups
from trainables.workloads.workload import HybridLMWorkload, load_workload

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
SMOKE = REPO / "configs" / "smoke.yaml"
SHAKESPEARE = REPO.parent / "shared" / "data" / "tinyshakespeare.txt"
CORPUS = str(SHAKESPEARE) if SHAKESPEARE.is_file() else None  # None: the embedded corpus

TINY_MODEL = {
    "d_model": 32,
    "n_layers": 1,
    "rwkv_n_heads": 2,
    "rwkv_mix_lora_rank": 8,
    "rwkv_decay_lora_rank": 8,
    "mamba_d_state": 8,
    "mamba_headdim": 16,
    "mamba_chunk_size": 16,
}
TINY_STEPS = 8
CLI_METRICS = (
    "tokens_per_s",
    "val_loss",
    "train_loss",
    "peak_mem_mb",
    "steps",
    "tokens",
    "compile_s",
    "status",
)


@pytest.fixture(autouse=True, scope="module")
def offline():
    """Without tinyshakespeare the runs use the embedded corpus: never the network or the user's TUNER_DATA."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TUNER_OFFLINE", "1")
        patch.delenv("TUNER_DATA", raising=False)
        yield


def tiny_config(**overrides) -> TrainConfig:
    """The smoke config shrunk to about a second of CPU work: one layer, 8 steps of 4 x 32 tokens, evals at
    steps 4 and 8. The smoke lr with no warm-up steps moves the loss enough that equal losses mean something."""
    values = training_section(read_yaml(SMOKE))
    values.update(
        model=TINY_MODEL,
        seq_len=32,
        batch_size=4,
        tokens=TINY_STEPS * 4 * 32,
        eval_interval=4,
        eval_tokens=1024,
        eval_batch_size=16,
        timing_warmup_steps=2,
        log_interval=2,
        data=CORPUS,
    )
    return make_config({**values, **overrides})


def toy_config(**overrides) -> TrainConfig:
    values = {
        "workload": "toy_workload:make_workload",
        "seq_len": 16,
        "batch_size": 16,
        "tokens": 40 * 16 * 16,
        "lr": 1e-2,
        "min_lr": 1e-3,
        "warmup_frac": 0.0,
        "eval_interval": 0,
        "timing_warmup_steps": 2,
        "log_interval": 10,
    }
    return make_config({**values, **overrides})


def quiet_train(cfg: TrainConfig, **kwargs) -> RunResult:
    return train(cfg, log=None, **kwargs)


def loss_curve(result: RunResult) -> list[tuple[int, float, float]]:
    return [(p["step"], p["train_loss"], p["val_loss"]) for p in result.history]


def run_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    # tests/ on the path so the CLI can load the toy workload by name, as a user's own module would be.
    path = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "trainables.train", *args],
        cwd=REPO,
        env={**user_env(), "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def last_json_line(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def baseline() -> dict:
    result = quiet_train(tiny_config())
    assert result.status == "ok", result.error
    return result


# ------------------------------------------------------------------------------------------------ config


KNOB_VALUES = {
    "batch_size": 32,
    "grad_accum": 4,
    "lr": 0.001,
    "lr_scaling": "sqrt",
    "precision": "fp16",
    "compile": "max-autotune-no-cudagraphs",
    "kernels": "auto",
    "loader": "device",
    "num_workers": 3,
    "pin_memory": True,
    "fused_adamw": True,
    "activation_checkpointing": True,
    "seed": 7,
    "tokens": 123456,
    "max_steps": 10,
    "eval_interval": 50,
}


def test_every_knob_is_a_config_field_that_set_reaches():
    cfg = load_config(None, [f"{key}={json.dumps(value)}" for key, value in KNOB_VALUES.items()])
    assert {key: getattr(cfg, key) for key in KNOB_VALUES} == KNOB_VALUES


@pytest.mark.parametrize(
    "key, allowed",
    [
        ("precision", {"fp32", "tf32", "bf16", "fp16"}),
        ("lr_scaling", {"none", "sqrt", "linear"}),
        ("kernels", {"torch", "fused", "auto"}),
        ("loader", {"dataloader", "device"}),
        ("compile", {"none", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"}),
    ],
)
def test_choice_knobs_accept_exactly_their_values(key, allowed):
    assert set(typing.get_args(TrainConfig.model_fields[key].annotation)) == allowed
    for value in allowed:
        assert getattr(make_config({key: value}), key) == value


@pytest.mark.parametrize("rule, factor", [("none", 1.0), ("sqrt", 8**0.5), ("linear", 8.0)])
def test_lr_scaling_follows_the_effective_batch(rule, factor):
    # Effective batch 32 x 2 = 64 sequences against a base of 8: 8x.
    cfg = make_config({"lr": 1e-3, "lr_scaling": rule, "batch_size": 32, "grad_accum": 2, "lr_base_batch": 8})
    assert cfg.peak_lr() == pytest.approx(1e-3 * factor)
    assert max(lr_at(cfg, step) for step in range(cfg.schedule_steps)) == pytest.approx(cfg.peak_lr())


def test_lr_schedule_warms_up_linearly_then_cosines_to_min_lr():
    cfg = make_config({"tokens": 100 * 8 * 256, "warmup_frac": 0.1, "lr": 1e-3, "min_lr": 1e-4})
    lrs = [lr_at(cfg, step) for step in range(101)]
    warmup, decay = lrs[:10], lrs[10:]
    assert warmup == pytest.approx([1e-3 * (s + 1) / 10 for s in range(10)])
    assert decay[0] == pytest.approx(1e-3)
    assert all(a >= b for a, b in zip(decay, decay[1:]))
    assert lrs[55] == pytest.approx((1e-3 + 1e-4) / 2)  # halfway through the cosine
    assert lrs[100] == pytest.approx(1e-4)
    assert min(lrs) >= 1e-4 - 1e-12


def test_lr_schedule_spans_the_token_budget_even_when_max_steps_cuts_the_run():
    full = make_config({"tokens": 100 * 8 * 256, "warmup_frac": 0.1})
    short = make_config({"tokens": 100 * 8 * 256, "warmup_frac": 0.1, "max_steps": 20})
    assert (short.total_steps, short.schedule_steps) == (20, 100)
    assert [lr_at(short, s) for s in range(20)] == [lr_at(full, s) for s in range(20)]
    assert lr_at(short, 19) > 0.9 * short.peak_lr()  # a speed screen runs at near-peak lr, not decayed


def test_param_groups_give_mamba_twice_the_lr_and_no_decay_to_vectors_and_named_params():
    cfg = tiny_config()
    workload = HybridLMWorkload(cfg)
    model = workload.build_model()
    groups = param_groups(model, workload, cfg)
    group_of = {id(p): g for g in groups for p in g["params"]}
    assert len(group_of) == sum(len(g["params"]) for g in groups) == len(list(model.parameters()))
    no_decay = model.no_weight_decay()
    assert no_decay and all(p.ndim >= 2 for n, p in model.named_parameters() if n in no_decay)
    for name, param in model.named_parameters():
        group = group_of[id(param)]
        assert group["lr_mult"] == (2.0 if ".mamba." in name else 1.0), name
        decays = param.ndim >= 2 and name not in no_decay
        assert group["weight_decay"] == (cfg.weight_decay if decays else 0.0), name
    named = {n: group_of[id(p)] for n, p in model.named_parameters()}
    assert (named["blocks.0.mamba.in_proj.weight"]["lr_mult"], named["lm_head.weight"]["lr_mult"]) == (
        2.0,
        1.0,
    )
    assert named["blocks.0.mamba.A_log"]["weight_decay"] == 0.0
    assert named["blocks.0.rwkv.time_maa"]["weight_decay"] == 0.0  # 2-D, but named by no_weight_decay()
    assert named["lm_head.weight"]["weight_decay"] == cfg.weight_decay


# ----------------------------------------------------------------------------------------- bad input


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["bach_size=8"], ["'bach_size'", "allowed:", "batch_size"]),
        (["batch_size=eight"], ["'batch_size'", "integer"]),
        (["batch_size=0"], ["'batch_size'", "greater than 0"]),
        (["batch_size=-4"], ["'batch_size'"]),
        (["lr=fast"], ["'lr'"]),
        (["precision=fp8"], ["'precision'", "'fp32', 'tf32', 'bf16' or 'fp16'", "fp8"]),
        (["kernels=triton"], ["'kernels'", "'torch', 'fused' or 'auto'"]),
        (["lr_scaling=cubic"], ["'lr_scaling'", "'none', 'sqrt' or 'linear'"]),
        (["compile=fast"], ["'compile'", "'default'"]),
        (["loader=magic"], ["'loader'", "'dataloader' or 'device'"]),
        (["model.d_modle=64"], ["'d_modle'", "d_model"]),
        (["model.d_model=-1"], ["'model'", "d_model"]),
        (["batch_size"], ["--set", "key=value", "batch_size"]),
        (["=3"], ["--set", "key=value"]),
        (["seq_len=64", "seq_len.x=1"], ["seq_len"]),
    ],
)
def test_bad_values_fail_in_one_line_that_names_the_key(overrides, expected):
    with pytest.raises(ConfigError) as err:
        load_config(SMOKE, overrides)
    message = str(err.value)
    assert "\n" not in message
    for part in expected:
        assert part in message


@pytest.mark.parametrize(
    "text, expected",
    [
        ("batch_size: [8\n", ["bad YAML", "line"]),
        ("- batch_size\n", ["top level must be a mapping"]),
        ("train: 3\n", ["'train'", "mapping"]),
    ],
)
def test_bad_config_files_fail_in_one_line(tmp_path, text, expected):
    path = write(tmp_path / "bad.yaml", text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "\n" not in str(err.value) and all(part in str(err.value) for part in expected)


@pytest.mark.parametrize(
    "kind, expected",
    [
        ("binary", "is not UTF-8 text (byte 0: invalid start byte); name a YAML file"),
        ("control characters", "bad YAML in {path}: unacceptable character #x0000"),
        ("folder", "config file {path} is a directory (name a YAML file)"),
        ("unreadable", "cannot read config file {path}: Input/output error"),
        ("not a file", "config file {path} is not a regular file (name a YAML file)"),
    ],
)
def test_a_config_file_that_is_not_yaml_text_fails_in_one_line(tmp_path, kind, expected):
    path = not_yaml_text(tmp_path, kind)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "\n" not in str(err.value) and expected.format(path=path) in str(err.value), err.value


def not_yaml_text(tmp_path: Path, kind: str) -> Path:
    """A config path a user might give that holds no YAML text (as root, too: /proc/self/mem cannot be read)."""
    if kind == "binary":
        path = tmp_path / "model.bin"
        path.write_bytes(bytes([0xFF, 0xFE, 0x00, 0x80]) * 64)
        return path
    if kind == "control characters":
        return Path(write(tmp_path / "nul.yaml", "batch_size: 8\x00\n"))
    return {"folder": tmp_path, "unreadable": Path("/proc/self/mem"), "not a file": Path("/dev/null")}[kind]


def test_missing_config_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="config file not found: .*nowhere.yaml"):
        load_config(tmp_path / "nowhere.yaml")


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ({"kernels": "fused"}, ["'kernels'", "CUDA", "allowed here: torch, auto"]),
        ({"pin_memory": True}, ["'pin_memory'"]),
        ({"device": "cuda"}, ["'device'", "CUDA"]),
    ],
)
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what a machine without CUDA refuses")
def test_device_checks_refuse_what_this_machine_cannot_run(overrides, expected):
    with pytest.raises(ConfigError) as err:
        resolve_device(make_config(overrides))
    assert "\n" not in str(err.value) and all(part in str(err.value) for part in expected)


def test_missing_data_file_fails_before_training(tmp_path):
    with pytest.raises(DataError, match="no-such-corpus.txt"):
        load_workload(make_config({"data": str(tmp_path / "no-such-corpus.txt")}))


@pytest.mark.parametrize(
    "values, expected",
    [
        ({"workload": "hybridd"}, "'workload': expected 'hybrid', 'path/to/file.py:function' or 'package"),
        ({"workload": "no_such_module:make"}, "'workload': no module named 'no_such_module'"),
        ({"seq_len": 64, "eval_tokens": 32}, "'eval_tokens'.*seq_len"),
    ],
)
def test_workload_refuses_what_it_cannot_run_before_any_work(values, expected):
    with pytest.raises(ConfigError, match=expected):
        load_workload(make_config(values))


# -------------------------------------------------------------------------------------------- the loop


def test_a_run_reports_every_metric(baseline):
    cfg = tiny_config()
    result = baseline
    assert result.status == "ok" and result.error is None
    assert (result.steps, result.tokens) == (TINY_STEPS, TINY_STEPS * cfg.tokens_per_step)
    assert result.tokens_per_s > 0
    # Steady state: every step after the timing warm-up, and only those.
    assert result.window_tokens == (TINY_STEPS - cfg.timing_warmup_steps) * cfg.tokens_per_step
    assert result.window_t0 < result.window_t1
    assert 0 < result.step_ms_median <= result.step_ms_p90
    assert result.compile_s >= 0 and result.warmup_s > 0
    assert result.peak_mem_mb > 0
    assert math.isfinite(result.train_loss) and math.isfinite(result.val_loss)
    assert [p["step"] for p in result.history] == [4, 8]
    assert result.val_loss == result.history[-1]["val_loss"]
    first, last = result.history[0]["train_loss"], result.history[-1]["train_loss"]
    assert last < first  # it trains


def test_steady_speed_excludes_the_warmup_steps():
    # The first 2 steps sleep 2 s in all; 8 fast steps follow. Were the warm-up counted, tok/s could not
    # exceed the steady tokens over the sleep alone.
    cfg = toy_config(workload="toy_workload:make_slow_start_workload", tokens=10 * 16 * 16)
    result = quiet_train(cfg)
    slept = cfg.timing_warmup_steps * toy_workload.SlowStartWorkload.SLEEP_S
    assert result.status == "ok"
    assert result.window_tokens == 8 * cfg.tokens_per_step
    assert result.tokens_per_s > result.window_tokens / slept
    assert result.step_ms_p90 < 1000 * toy_workload.SlowStartWorkload.SLEEP_S
    assert result.warmup_s >= slept
    assert result.compile_s >= 0.8 * slept  # the one-off cost shows up as compile time
    # the host's CPU load over the same window (tests/test_cpu_load.py checks the figures themselves), or
    # none where the window was too short for the kernel's 10 ms ticks to say anything
    window_s = result.window_tokens / result.tokens_per_s
    if window_s >= cpu_load.MIN_WINDOW_S:
        assert result.cpu_count == os.cpu_count() and result.cpu_own_cores >= 0
        assert result.cpu_others_cores >= 0
    else:
        assert result.cpu_own_cores is None and result.cpu_others_cores is None


def test_a_first_step_over_the_compile_deadline_gives_up_at_the_deadline():
    # The first step spins in Python for 3 s (a compile); a 0.5 s deadline stops it mid-spin.
    cfg = toy_config(workload="toy_workload:make_slow_compile_workload", compile_deadline_s=0.5)
    result = quiet_train(cfg)
    assert result.status == "timeout"
    assert "0.5 s deadline" in result.error
    assert result.wall_s < toy_workload.SlowCompileWorkload.SPIN_S
    assert result.steps == 0


def test_a_deadline_wrapped_by_the_compiler_is_still_a_timeout():
    # Inductor re-raises what interrupts it as InductorError(...) from the original.
    try:
        try:
            raise timing.CompileDeadline
        except timing.CompileDeadline as inner:
            raise RuntimeError("InductorError: CompileDeadline:") from inner
    except RuntimeError as err:
        assert loop._failure(err, cpu_capped=False, deadline_s=180)[0] == "timeout"
    assert loop._failure(RuntimeError("boom"), cpu_capped=False, deadline_s=180)[0] == "error"


def test_a_first_step_inside_the_compile_deadline_trains_on():
    # The deadline watches the first step only: the later warm-up steps may take as long as they like.
    cfg = toy_config(
        workload="toy_workload:make_slow_start_workload", compile_deadline_s=1.5, tokens=4 * 16 * 16
    )
    result = quiet_train(cfg)
    assert result.status == "ok" and result.steps == 4
    assert result.wall_s > cfg.timing_warmup_steps * toy_workload.SlowStartWorkload.SLEEP_S


@pytest.mark.parametrize(
    "overrides, steps, eval_steps",
    [
        ({"tokens": 5 * 256 + 1}, 6, [6]),  # a partial step's worth of tokens still runs a step
        ({"tokens": 10 * 256, "max_steps": 4}, 4, [4]),
        ({"tokens": 8 * 256, "eval_interval": 3}, 8, [3, 6, 8]),
        ({"tokens": 3 * 2 * 256, "grad_accum": 2, "eval_interval": 1}, 3, [1, 2, 3]),
    ],
)
def test_token_budget_grad_accum_and_eval_interval(overrides, steps, eval_steps):
    cfg = toy_config(**overrides)
    reports = []
    result = quiet_train(cfg, report=reports.append)
    assert result.status == "ok"
    assert (result.steps, result.tokens) == (
        steps,
        steps * cfg.batch_size * cfg.grad_accum * cfg.seq_len,
    )
    assert [p["step"] for p in result.history] == eval_steps
    assert all(math.isfinite(p["val_loss"]) for p in result.history)
    assert reports[-1]["done"] and not any(r["done"] for r in reports[:-1])


def test_a_users_workload_trains_through_the_same_loop(tmp_path):
    cfg = toy_config(out_dir=str(tmp_path))
    workload = load_workload(cfg)
    assert isinstance(workload, toy_workload.ToyWorkload)
    result = quiet_train(cfg)
    assert result.status == "ok"
    assert result.val_loss < 0.5 < math.log(toy_workload.VOCAB)  # learnt the rule
    assert json.loads((tmp_path / "toy.json").read_text()) == {"vocab": toy_workload.VOCAB}  # its save()
    groups = param_groups(workload.build_model(), workload, cfg)
    assert {g["lr_mult"] for g in groups} == {1.0, toy_workload.HEAD_LR_MULT}


def test_the_loop_applies_each_groups_lr_multiplier(tmp_path, monkeypatch):
    # A multiplier of 0 freezes the toy's output layer: weights and weight decay both scale with the lr.
    monkeypatch.setattr(toy_workload, "HEAD_LR_MULT", 0.0)
    cfg = toy_config(out_dir=str(tmp_path), save_model=True, max_steps=5)
    assert quiet_train(cfg).status == "ok"
    trained = torch.load(tmp_path / "model.pt")
    torch.manual_seed(cfg.seed)  # the loop seeds just before it builds the model
    initial = load_workload(cfg).build_model().state_dict()
    assert torch.equal(trained["1.weight"], initial["1.weight"])
    assert not torch.equal(trained["0.weight"], initial["0.weight"])


@pytest.mark.parametrize("variant", [{"seed": 1337}, {"loader": "device"}, {"num_workers": 2}])
def test_same_seed_gives_identical_losses_whatever_the_loader(baseline, variant):
    # Batch k is a pure function of (seed, k): the loader is a speed knob that cannot move the loss.
    result = quiet_train(tiny_config(**variant))
    assert result.status == "ok", result.error
    assert loss_curve(result) == loss_curve(baseline)


def test_another_seed_gives_other_losses(baseline):
    assert loss_curve(quiet_train(tiny_config(seed=1))) != loss_curve(baseline)


@pytest.mark.parametrize(
    "variant, tolerance",
    [
        ({"precision": "tf32"}, 0.0),  # no TF32 on a CPU: the same numbers
        ({"activation_checkpointing": True}, 1e-5),
        ({"kernels": "auto"}, 1e-5),  # the torch reference where no fused kernels can run
        ({"fused_adamw": True}, 1e-3),
        ({"precision": "bf16"}, 0.05),
        ({"precision": "fp16"}, 0.05),  # with a GradScaler
    ],
)
def test_speed_knobs_run_on_cpu_and_keep_the_loss(baseline, variant, tolerance):
    result = quiet_train(tiny_config(**variant))
    assert result.status == "ok", result.error
    for (step, train_loss, val_loss), (_, base_train, base_val) in zip(
        loss_curve(result), loss_curve(baseline), strict=True
    ):
        assert train_loss == pytest.approx(base_train, abs=tolerance), step
        assert val_loss == pytest.approx(base_val, abs=tolerance + 1e-5), step  # val is rounded to 5 places


def test_compile_default_runs_on_cpu(monkeypatch):
    """The loop's compile path on CPU Inductor, on the toy (the hybrid whole-model compiled is minutes of CPU
    Inductor; its blocks compiled: tests/test_compile_scope.py, and compiled on a GPU: tests/test_fused_gpu.py)."""
    import torch._inductor.config as inductor_config

    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    before = inductor_config.compile_threads  # put back by assignment: monkeypatch's undo deletes it
    try:
        result = quiet_train(toy_config(compile="default", max_steps=4, compile_threads=1))
        assert result.compile_threads == 1 == inductor_config.compile_threads  # as best.yaml names them
    finally:
        inductor_config.compile_threads = before
    assert result.status == "ok", result.error
    assert result.steps == 4 and math.isfinite(result.val_loss)
    eager = quiet_train(toy_config(max_steps=4))  # the same schedule and batches, eager
    assert result.train_loss == pytest.approx(eager.train_loss, abs=1e-3)
    assert result.compile_s > result.step_ms_median / 1000  # compiling costs more than a step


def test_a_run_uses_and_reports_the_cpu_threads_its_config_names():
    before = torch.get_num_threads()
    named = 2 if before == 1 else 1  # not this process's count (1 under tests/conftest.py's xdist workers)
    try:
        result = quiet_train(tiny_config(max_steps=2, eval_interval=0, cpu_threads=named))
        assert result.status == "ok" and result.cpu_threads == named == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    assert quiet_train(tiny_config(max_steps=2, eval_interval=0)).cpu_threads == before  # None: torch's own


def test_non_finite_loss_ends_the_run_with_status_nan():
    result = quiet_train(tiny_config(precision="fp16", lr=1e4, log_interval=1))
    assert result.status == "nan"
    assert "loss is" in result.error
    assert result.steps < TINY_STEPS and result.val_loss is None
    assert result.peak_mem_mb > 0


def test_oom_is_reported_and_the_same_process_trains_again():
    limit_before = resource.getrlimit(resource.RLIMIT_AS)
    # The smoke model at 2048 sequences needs far more than 300 MB beyond what the process has mapped.
    smoke = training_section(read_yaml(SMOKE))
    oom = quiet_train(
        make_config({**smoke, "data": CORPUS, "memory_cap_mb": 300, "batch_size": 2048, "max_steps": 1})
    )
    assert oom.status == "oom", oom.error
    assert "out of memory" in oom.error
    assert resource.getrlimit(resource.RLIMIT_AS) == limit_before
    again = quiet_train(tiny_config(max_steps=2, eval_interval=0))
    assert again.status == "ok", again.error


def test_peak_memory_is_each_runs_own_when_the_process_trains_again():
    # Ray reuses a worker process for several trials: a small run after a big one reports its own peak.
    small, large, again = (
        quiet_train(tiny_config(batch_size=batch, max_steps=2, eval_interval=0)) for batch in (4, 512, 4)
    )
    assert [r.status for r in (small, large, again)] == ["ok"] * 3
    assert large.peak_mem_mb > small.peak_mem_mb + 200  # the big batch needs clearly more
    assert again.peak_mem_mb < (small.peak_mem_mb + large.peak_mem_mb) / 2


def test_out_dir_holds_config_tokenizer_and_result(tmp_path):
    cfg = tiny_config(out_dir=str(tmp_path / "run"), max_steps=2, save_model=True)
    result = quiet_train(cfg)
    run = tmp_path / "run"
    assert load_config(run / "config.yaml") == cfg
    tokenizer = CharTokenizer.load(run / "tokenizer.json")
    state = torch.load(run / "model.pt")
    assert state["embedding.weight"].shape[0] == tokenizer.vocab_size
    assert json.loads((run / "result.json").read_text()) == result.as_json()


# ---------------------------------------------------------------------------------------------- the CLI


CLI_BAD_INPUT = [
    (["--set", "bach_size=8"], ["'bach_size'"]),
    (["--set", "precision=fp8"], ["'precision'", "'fp32', 'tf32', 'bf16' or 'fp16'"]),
    (["--set", "kernels=fused", "--set", "device=cpu"], ["'kernels'", "CUDA", "'device' is 'cpu'"]),
    (["--data", "no-such-corpus.txt"], ["no-such-corpus.txt"]),
    (["--set", "batch_size"], ["--set", "key=value"]),
    (["--set"], ["--set", "expected one argument"]),
    (["--config", "{tmp}/bad.yaml"], ["bad YAML"]),
    (["--set", "eval_tokens=8"], ["'eval_tokens'", "seq_len"]),
]


def cli_in_process(*args: str) -> subprocess.CompletedProcess:
    """The CLI's `main` in this process (a subprocess's imports are most of a bad-input test): its exit code,
    as `sys.exit(main())` or argparse gives it, and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = train_cli.main(list(args))
        except SystemExit as done:
            code = done.code
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


@pytest.mark.parametrize("args, expected", CLI_BAD_INPUT, ids=[" ".join(args) for args, _ in CLI_BAD_INPUT])
def test_cli_rejects_bad_input_with_one_line_and_exit_2(tmp_path, args, expected, monkeypatch):
    """The first case as a user runs it (a subprocess: nothing else reaches stderr), the rest in process."""
    write(tmp_path / "bad.yaml", "train: {batch_size: [8}\n")
    monkeypatch.chdir(REPO)  # the subprocess's cwd
    cli = run_cli if args == CLI_BAD_INPUT[0][0] else cli_in_process
    args = [a.format(tmp=tmp_path) for a in args]
    config = [] if "--config" in args else ["--config", str(SMOKE)]
    done = cli(*config, *args, "--json")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert all(part in lines[0] for part in expected), lines[0]
    assert done.stdout == ""  # nothing ran, so nothing to report


def test_the_cli_with_no_arguments_prints_its_usage_and_trains_nothing(tmp_path):
    # the seed's defaults alone would train for hours
    done = subprocess.run(
        [sys.executable, "-m", "trainables.train"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith("usage: python -m trainables.train [-h] [--config CONFIG]"), lines
    assert lines[-1].startswith("error: --config is needed, e.g. --config configs/smoke.yaml"), lines
    assert all(not line.startswith("error") for line in lines[:-1])  # the usage block, then one line
    assert done.stdout == "" and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "overrides, status, returncode",
    [([], "ok", 0), (["precision=fp16", "lr=1e4", "log_interval=1"], "nan", 1)],
)
def test_cli_json_ends_with_one_metrics_line(tmp_path, overrides, status, returncode):
    """The run that trains as a user runs it (a subprocess); the one that diverges through the same `main` in
    this process (a subprocess's imports were most of it): the same exit code, stdout and stderr."""
    sets = ["workload=toy_workload:make_workload", "seq_len=16", "batch_size=16", "tokens=5120", *overrides]
    cli = run_cli if status == "ok" else cli_in_process
    done = cli(*[a for s in sets for a in ("--set", s)], "--out", str(tmp_path), "--json")
    assert done.returncode == returncode, done.stderr
    metrics = last_json_line(done.stdout)
    assert set(CLI_METRICS) <= set(metrics)
    assert metrics["status"] == status
    assert "training " in done.stderr  # progress goes to stderr
    written = json.loads((tmp_path / "result.json").read_text())
    assert {k: v for k, v in written.items() if k != "history"} == metrics


@pytest.mark.parametrize("path", sorted((REPO / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_config_in_the_repo_is_valid(path):
    loaded = load_config(path).model_dump()
    section = training_section(read_yaml(path))
    said = {k: v for k, v in section.items() if k not in ("workload", "workload_path")}  # made absolute
    assert said, "the file gives its training settings"
    for key, value in said.items():  # each as the file says it, none dropped or left at its default
        assert value.items() <= loaded[key].items() if isinstance(value, dict) else loaded[key] == value, key


def test_interim_reports_carry_the_steady_window_so_far():
    # A trial stopped early is joined to the GPU samples of the window its last interim report named.
    cfg = toy_config(log_interval=5)
    reports = []
    result = quiet_train(cfg, report=reports.append)
    steady = [r for r in reports if r["step"] > cfg.timing_warmup_steps]
    assert len(steady) == len(reports) == 8
    assert all(r["window_t0"] == result.window_t0 < r["window_t1"] for r in steady)
    tokens = [r["window_tokens"] for r in steady]
    assert tokens == sorted(set(tokens)) and tokens[-1] == result.window_tokens
    assert {(r["node"], r["pid"]) for r in reports} == {(result.node, os.getpid())}
    # and its CPU share so far (None while the window is under cpu_load.MIN_WINDOW_S): an early-stopped
    # row is judged like a finished one
    assert all("cpu_others_cores" in r and "cpu_own_cores" in r for r in steady)


def test_an_interim_report_over_a_long_enough_window_has_its_cpu_share():
    cfg = toy_config(workload="toy_workload:make_paced_workload", log_interval=1, tokens=12 * 16 * 16)
    reports = []
    quiet_train(cfg, report=reports.append)
    steady = [r for r in reports if r["window_t1"] is not None]
    judged = [r for r in steady if r["window_t1"] - r["window_t0"] >= cpu_load.MIN_WINDOW_S]
    assert judged and all(r["cpu_others_cores"] >= 0 and r["cpu_count"] == os.cpu_count() for r in judged)


def test_time_spent_in_interim_reports_is_not_training_time():
    # Ray Tune's report blocks until the driver takes the result; a slow driver must not slow the figure.
    cfg = toy_config(log_interval=1, tokens=12 * 16 * 16)
    pause_s = 0.2

    def slow_driver(_metrics):
        time.sleep(pause_s)

    result = quiet_train(cfg, report=slow_driver)
    steady_steps = cfg.total_steps - cfg.timing_warmup_steps
    assert result.status == "ok"
    # Were the pauses counted, steady time would be at least steady_steps * pause_s.
    assert result.window_tokens / result.tokens_per_s < 0.5 * steady_steps * pause_s


@pytest.mark.parametrize(
    ("precision", "kernels", "on_cuda", "triton_f32", "noted"),
    [
        ("fp32", "fused", True, None, True),  # Triton's default: TF32 dots inside the fused kernels
        ("fp32", "fused", True, "ieee", False),
        ("tf32", "fused", True, None, False),
        ("fp32", "torch", True, None, False),
        ("fp32", "fused", False, None, False),
    ],
)
def test_fp32_through_fused_kernels_says_it_is_tf32_inside(precision, kernels, on_cuda, triton_f32, noted):
    note = fp32_fused_note(precision, kernels, on_cuda, triton_f32)
    assert (note is not None) == noted
    if noted:
        assert "TF32" in note and "TRITON_F32_DEFAULT=ieee" in note


@pytest.mark.parametrize("installed", [True, False])
def test_fp32_note_with_auto_kernels_follows_what_is_installed(monkeypatch, installed):
    import trainables.training.loop

    backends = {"naive": True, "torch": True, "fla": installed or "not importable", "mamba_ssm": "no"}
    monkeypatch.setattr(trainables.training.loop, "available_backends", lambda: backends)
    assert (fp32_fused_note("fp32", "auto", True, None) is not None) == installed


def test_a_run_says_whether_its_compile_came_from_the_cache(tmp_path, monkeypatch):
    # Real Inductor on CPU: the first run compiles the toy model into an empty cache, the second (a fresh
    # compile in the same process, as every run makes) finds its graphs there; eager runs compile nothing.
    for var in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "unused"))  # restored after; the run points them at its cache
    cfg = toy_config(compile="default", compile_cache=str(tmp_path / "cache"), tokens=4 * 16 * 16)
    first, second = quiet_train(cfg), quiet_train(cfg)
    assert first.status == second.status == "ok"
    assert (first.compile_cache_use, second.compile_cache_use) == ("miss", "hit")
    assert any((tmp_path / "cache").glob("*/inductor/*")), "the graphs went to the run's cache, under its key"
    assert quiet_train(toy_config(tokens=4 * 16 * 16)).compile_cache_use is None
    assert classify(hits=1, misses=1) == "partial"  # e.g. the forward graph cached, the backward not
