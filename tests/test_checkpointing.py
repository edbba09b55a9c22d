"""Activation checkpointing (`activation_checkpointing: k`): the loop recomputes the k-th, 2k-th, ... of the
workload's blocks (compile_regions) in the backward pass instead of keeping their activations. The same
loss and gradients as without, eager and compiled (CPU Inductor, both compile scopes), fewer bytes saved for
backward, offered only to a workload that names its blocks, and a bad k refused in one line before any work."""

from __future__ import annotations

import pytest
import torch
import toy_workload
from torch._dynamo.utils import counters
from torch.autograd.graph import saved_tensors_hooks

from tests.test_compile_scope import BLOCKS, losses
from tests.test_train import SMOKE, TINY_MODEL, cli_in_process, tiny_config, toy_config
from trainables.config import ConfigError, TrainConfig, make_config
from trainables.preflight import preflight
from trainables.training.step_model import step_module
from trainables.workloads.workload import HybridLMWorkload, Job, check_workload, load_workload
from trainables.workloads.workload_job import as_job
from tuner.config import load_search_config
from tuner.space.domains import fit_to_workload

FOUR_BLOCKS = {**TINY_MODEL, "n_layers": 4}


def hybrid_job(**overrides) -> tuple[TrainConfig, Job]:
    cfg = tiny_config(model=FOUR_BLOCKS, **overrides)
    return cfg, Job(HybridLMWorkload(cfg), cfg)


def one_step(cfg: TrainConfig, job: Job) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
    """One forward and backward of the first batch through the module the loop steps: the loss, the
    gradients and the bytes autograd saved for backward outside any checkpoint."""
    torch.manual_seed(0)
    model = job.build_model()
    stepped = step_module(cfg, job, model)
    batch = next(job.train_batches(torch.device("cpu")))
    saved = []
    with saved_tensors_hooks(lambda t: saved.append(t.nbytes) or t, lambda t: t):
        loss = job.loss(stepped, batch)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}, sum(saved)


def test_the_checkpointed_hybrid_gives_the_same_loss_and_gradients_and_saves_less():
    loss, grads, saved = one_step(*hybrid_job())
    for every in (1, 2):
        ckpt_loss, ckpt_grads, ckpt_saved = one_step(*hybrid_job(activation_checkpointing=every))
        torch.testing.assert_close(ckpt_loss, loss, rtol=0, atol=0)
        torch.testing.assert_close(ckpt_grads, grads)
        assert ckpt_saved < saved * (0.3 if every == 1 else 0.65), (every, ckpt_saved, saved)


def test_the_kth_blocks_run_their_forward_again_in_backward():
    cfg, job = hybrid_job(activation_checkpointing=2)
    model = job.build_model()
    stepped = step_module(cfg, job, model)
    calls = [0] * len(model.blocks)
    for i, block in enumerate(model.blocks):
        # a pre-hook: the recompute stops once it has what backward needs, before the ffn returns
        block.ffn.register_forward_pre_hook(lambda *_, i=i: calls.__setitem__(i, calls[i] + 1))
    loss = job.loss(stepped, next(job.train_batches(torch.device("cpu"))))
    assert calls == [1, 1, 1, 1]
    loss.backward()
    assert calls == [1, 2, 1, 2]  # the 2nd and 4th blocks recomputed; the others kept their activations
    with torch.no_grad():  # an eval has no backward: nothing is checkpointed, nothing runs twice
        job.loss(stepped, next(job.train_batches(torch.device("cpu"))))
    assert calls == [2, 3, 2, 3]


def toy_blocks_job(**overrides) -> tuple[TrainConfig, Job]:
    cfg = toy_config(workload=BLOCKS, **overrides)
    return cfg, as_job(load_workload(cfg), cfg)


# The hybrid block by block (its mixers under CPU Inductor, checkpointed outside the compiled block): a cold
# compile of the hybrid's block, 28 s alone and ~55 s beside the fast suite's other worker on 2 cores, so
# in the slow suite; the toy's blocks hold the same rule in the fast suite. The whole-model scope on the
# toy's blocks, where the checkpoint is traced into the model's one graph (the hybrid whole: minutes of CPU
# Inductor).
@pytest.mark.parametrize(
    "scope, build, every",
    [
        pytest.param("blocks", hybrid_job, 2, marks=pytest.mark.slow),
        ("blocks", toy_blocks_job, 1),
        ("model", toy_blocks_job, 1),
    ],
)
def test_the_compiled_model_checkpointed_gives_the_same_loss_and_gradients_and_saves_less(
    scope, build, every
):
    """CPU Inductor: a checkpoint around each compiled block (blocks) or traced into the model's graph; the
    compiled model's own loss and gradients are the eager model's."""
    eager_loss, eager_grads, _ = one_step(*build())
    loss, grads, saved = one_step(*build(compile="default", compile_scope=scope))
    torch.testing.assert_close(loss, eager_loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grads, eager_grads, rtol=1e-4, atol=1e-5)
    counters.clear()
    ckpt_loss, ckpt_grads, ckpt_saved = one_step(
        *build(compile="default", compile_scope=scope, activation_checkpointing=every)
    )
    if scope == "blocks":  # outside the compiled block: checkpointed or not, the blocks share one graph
        assert counters["stats"]["unique_graphs"] == 1
    torch.testing.assert_close(ckpt_loss, loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ckpt_grads, grads, rtol=1e-4, atol=1e-5)
    assert ckpt_saved < saved * 0.8, (ckpt_saved, saved)


@pytest.mark.parametrize("scope", ["blocks", "model"])
def test_a_compiled_checkpointed_run_trains_to_the_eager_losses(scope):
    eager = losses(toy_config(workload=BLOCKS, max_steps=8))
    compiled = losses(
        toy_config(
            workload=BLOCKS, max_steps=8, compile="default", compile_scope=scope, activation_checkpointing=2
        )
    )
    assert compiled == pytest.approx(eager, rel=1e-4, abs=1e-5)


def test_a_workload_without_compile_regions_is_not_offered_the_knob():
    toy, blocks = check_workload(toy_config()), check_workload(toy_config(workload=BLOCKS))
    assert "activation_checkpointing" in toy.unsupported
    assert "activation_checkpointing" in blocks.supports
    assert "activation_checkpointing" in check_workload(TrainConfig()).supports  # the hybrid names its blocks
    search = load_search_config(str(SMOKE), ["search.space.activation_checkpointing=[0, 1]"])
    assert "activation_checkpointing" not in fit_to_workload(search, toy).search.space
    assert fit_to_workload(search, blocks).search.space["activation_checkpointing"] == [0, 1]
    with pytest.raises(ConfigError, match=r"^config key 'activation_checkpointing': 1 does nothing .*"):
        preflight(toy_config(activation_checkpointing=1))


def test_a_workload_that_checkpoints_itself_is_refused():
    workload = toy_workload.BlocksWorkload(toy_config(workload=BLOCKS))
    workload.supports = {"activation_checkpointing"}  # the contract before the loop applied it: twice
    with pytest.raises(ConfigError, match="leave it out of supports") as err:
        check_workload(toy_config(workload=BLOCKS), workload=workload)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "cfg, expected",
    [
        (
            lambda: tiny_config(activation_checkpointing=2),
            "names 1 block, so none would be (use 0 = off to 1)",
        ),
        (lambda: tiny_config(model=FOUR_BLOCKS, activation_checkpointing=5), "names 4 blocks"),
        (lambda: toy_config(workload=BLOCKS, activation_checkpointing=4), "names 3 blocks"),  # found on meta
    ],
)
def test_a_k_above_the_number_of_blocks_is_refused_before_any_work(cfg, expected):
    with pytest.raises(ConfigError) as err:
        preflight(cfg())
    line = str(err.value)
    assert (
        line.startswith("config key 'activation_checkpointing': ") and expected in line and "\n" not in line
    )


def test_bad_values_fail_in_one_line_and_true_reads_as_every_block():
    with pytest.raises(ConfigError, match=r"'activation_checkpointing': .*greater than or equal to 0"):
        make_config({"activation_checkpointing": -1})
    assert make_config({"activation_checkpointing": True}).activation_checkpointing == 1
    assert make_config({"activation_checkpointing": False}).activation_checkpointing == 0
    # the CLI's `main` in this process (tests/test_train.py runs a refusal as a user does, in a subprocess)
    proc = cli_in_process("--config", str(SMOKE), "--set", "activation_checkpointing=9")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "'activation_checkpointing': 9 checkpoints one block in every 9" in proc.stderr
    assert "step " not in proc.stderr  # refused before training started
