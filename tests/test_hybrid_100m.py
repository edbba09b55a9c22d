"""configs/hybrid-100m.yaml, the ~100M-parameter search of issue 36: its model is the size it says (built on
the meta device, so no memory is spent), its baseline the plain first recipe on the built-in corpus, and
its search section valid to the last start point, on the corpus this machine builds."""

from __future__ import annotations

import itertools

import pytest
import torch

from tests.test_train import REPO
from trainables.config import make_config
from trainables.preflight import preflight
from tuner.config import load_search_config
from tuner.space.domains import start_point
from tuner.space.knobs import loss_key
from tuner.space.sampler import distributions

CONFIG = REPO / "configs" / "hybrid-100m.yaml"


@pytest.fixture(scope="module")
def search():
    return load_search_config(str(CONFIG))


@pytest.fixture(scope="module")
def checked(search):
    """The search's own checks before Ray starts (the corpus built here: ~5 s, cached after)."""
    return preflight(search.train, local=False, section="train")


def test_the_model_has_about_100m_parameters_and_heads_of_64(search, checked):
    cfg = search.train
    vocab = checked.workload.data.tokenizer.vocab_size
    assert 60 < vocab <= 98  # the built-in corpus's characters (trainables/data/corpora.py)
    with torch.device("meta"):
        model = checked.workload.build_model()
    params = sum(p.numel() for p in model.parameters())
    assert 80e6 <= params <= 120e6, params
    hybrid = cfg.hybrid_config(vocab)
    assert hybrid.d_model // hybrid.rwkv_n_heads == 64 and hybrid.mamba_headdim == 64  # the fused kernels'


def test_the_baseline_is_a_plain_first_recipe_planned_for_1b_tokens(search):
    cfg = search.train
    assert (cfg.precision, cfg.compile, cfg.kernels, cfg.batch_size, cfg.micro_batch) == (
        "fp32",
        "none",
        "torch",
        8,
        None,
    )
    assert (cfg.data, cfg.seq_len, cfg.tokens) == ("builtin:python-source", 512, 1_000_000_000)
    assert cfg.activation_checkpointing == 0 and not cfg.fused_adamw


def test_the_space_holds_the_knobs_of_this_size(search):
    space = search.search.space
    assert {
        "batch_size", "micro_batch", "precision", "compile", "compile_scope", "activation_checkpointing",
        "kernels", "fused_adamw", "lr_scaling",
    } <= set(space)  # fmt: skip
    assert (
        "default" in space["compile"] and "max-autotune-no-cudagraphs" not in space["compile"]
    )  # 5+ min cold
    assert {"kernels": "fused"}.items() <= search.search.start_points[-1].items()  # fused timed at this size
    assert space["activation_checkpointing"] == [0, 1, 2]
    assert set(distributions(space)) == set(space)


def test_every_batch_and_micro_batch_of_the_space_combine(search):
    space, train = search.search.space, search.train.model_dump()
    for batch, micro in itertools.product(space["batch_size"], space["micro_batch"]):
        assert make_config({**train, "batch_size": batch, "micro_batch": micro}).forward_batch <= batch


def test_each_start_point_is_a_valid_config_and_the_first_is_the_baselines_twin(search):
    base = search.train.model_dump()
    points = [
        start_point(p, search.search.space, search.train, pytest.fail) for p in search.search.start_points
    ]
    for point in points:
        make_config({**base, **point}, section="train")
    assert loss_key(points[0], base) == loss_key(base, base)  # its loss run stands for the baseline's
    assert any(p["activation_checkpointing"] for p in points) and any(
        p["precision"] == "bf16" for p in points
    )
