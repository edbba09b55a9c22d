"""The search space: knobs that do not apply here are dropped with a notice; batch bounds; Tune domains."""

import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from tests.factories import search_context
from trainables.config import ConfigError, TrainConfig
from tuner.config import Range, SearchSection, load_search_config, parse_duration
from tuner.context import Notices, SearchContext
from tuner.pipeline import fit_to_hardware
from tuner.space.domains import applicable, bound_batch
from tuner.space.sampler import distributions
from tuner.state.hardware import Hardware

CPU = {"cuda": False, "bf16": False, "cpus": 2, "backends": {"fla": "no CUDA", "mamba_ssm": "no CUDA"}}
GPU = {"cuda": True, "bf16": True, "cpus": 16, "backends": {"fla": True, "mamba_ssm": True}}
SPACE = {
    "precision": ["fp32", "tf32", "bf16", "fp16"],
    "kernels": ["torch", "fused", "auto"],
    "pin_memory": [False, True],
    "compile": ["none", "default", "reduce-overhead", "max-autotune"],
    "num_workers": [0, 2, 4],
    "batch_size": [8, 64, 512],
}


def test_cpu_drops_what_needs_a_gpu_and_says_why():
    space, fixed, notices = applicable(SPACE, CPU)
    assert space["precision"] == ["fp32", "fp16"]
    assert space["compile"] == ["none", "default"]
    assert space["num_workers"] == [0, 2]
    assert fixed == {"kernels": "torch", "pin_memory": False}  # one choice left: not searched
    text = " ".join(notices)
    for knob in ("precision", "kernels", "pin_memory", "compile"):
        assert knob in text


def test_gpu_keeps_everything():
    space, fixed, notices = applicable(SPACE, GPU)
    assert space == SPACE and fixed == {} and notices == []
    no_kernels = {**GPU, "backends": {"fla": True, "mamba_ssm": "not importable"}}
    assert applicable(SPACE, no_kernels)[0]["kernels"] == ["torch", "auto"]


def cpu_context(tmp_path, *overrides: str) -> SearchContext:
    cfg = load_search_config("configs/smoke.yaml", list(overrides))
    return search_context(cfg, tmp_path, hw=Hardware(**CPU), cluster_cpus=2)


def test_the_knobs_left_one_choice_are_the_baselines_typed_and_as_the_dict_had_them(tmp_path):
    ctx = cpu_context(tmp_path)
    space, base = fit_to_hardware(ctx.cfg, ctx.hw, Notices())
    assert "precision" not in space and isinstance(base, TrainConfig)  # bf16 dropped: fp32 fixed
    assert base.model_dump() == {**ctx.cfg.train.model_dump(), "precision": "fp32"}


def test_a_knob_left_one_choice_that_cannot_train_with_the_baseline_is_one_line(tmp_path):
    """The fixed values are checked with the baseline's, as the user's own are: batch 12 cannot train in
    micro-batches of 8, the space's one micro_batch (which its batch sizes 8 to 64 all pair with)."""
    ctx = cpu_context(tmp_path, "train.batch_size=12", "search.space.micro_batch=[8]")
    with pytest.raises(ConfigError) as err:
        fit_to_hardware(ctx.cfg, ctx.hw, Notices())
    assert str(err.value) == (
        "config key 'train.micro_batch': must divide batch_size 12 (one of [1, 2, 3, 4, 6]) or be at least it "
        "(got 8); the search space leaves one choice of each here: {'precision': 'fp32', 'micro_batch': 8}"
    )


def test_batch_bound():
    space, notices = bound_batch({"batch_size": [8, 64, 512]}, 100)
    assert space["batch_size"] == [8, 64] and notices
    assert bound_batch({"batch_size": [8, 64]}, 4)[0]["batch_size"] == [8]  # the smallest stays


def test_the_samplers_distributions():
    found = distributions(
        {
            "precision": ["fp32", "bf16"],
            "lr": Range(low=1e-4, high=1e-2, log=True),
            "grad_accum": Range(low=1, high=4, integer=True),
        }
    )
    assert found["precision"] == CategoricalDistribution(["fp32", "bf16"])
    assert found["lr"] == FloatDistribution(1e-4, 1e-2, log=True)
    assert found["grad_accum"] == IntDistribution(1, 4), "both ends drawn"


@pytest.mark.parametrize(
    "space, message",
    [
        ({"precision": ["fp32", "fp7"]}, "fp7"),
        ({"flux": [1]}, "unknown knob"),
        ({"batch_size": []}, "no choices"),
        ({"batch_size": [0, 8]}, "batch_size"),
    ],
)
def test_bad_spaces(space, message):
    with pytest.raises(ValueError, match=message):
        SearchSection(space=space)


def test_start_points_must_name_knobs_of_the_space():
    with pytest.raises(ValueError, match="start point"):
        SearchSection(space={"batch_size": [8, 16]}, start_points=[{"precision": "bf16"}])


def test_search_config_errors_are_config_errors(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("train: {batch_size: 8}\nsearch: {space: {}}\n")
    with pytest.raises(ConfigError, match="empty search space"):
        load_search_config(str(path))
    path.write_text("train: {batch_size: 8}\nsearch: {space: {batch_size: [8]}}\nqualty: {}\n")
    with pytest.raises(ConfigError, match="qualty"):
        load_search_config(str(path))


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("20m", 1200), ("1h30m", 5400), ("45", 45)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_bad_duration():
    with pytest.raises(ValueError, match="duration"):
        parse_duration("soon")
