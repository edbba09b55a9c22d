"""Micro-batches (`micro_batch`): the loop cuts each batch of batch_size into pieces and adds up their
gradients, so the effective batch, its data and the loss stay batch_size's (a speed and memory knob). The
same loss trajectory as the whole batch, also beside grad_accum; a size that does not divide the batch
refused in one line before any work; and to the search an execution knob, so one loss run stands for all."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from tests.test_compile_scope import BLOCKS, losses
from tests.test_train import SMOKE, cli_in_process, tiny_config, toy_config
from trainables.config import ConfigError, make_config
from trainables.micro_batches import micro_batches
from trainables.training.loop import train
from tuner.space.knobs import GRAPH_FIELDS, SPEED_ONLY_KNOBS, execution, loss_key


def trajectory(cfg) -> tuple[list[float], list[float], int]:
    """The train loss at every step, the val losses and the tokens the run trained."""
    points: list[dict] = []
    result = train(cfg, report=points.append, log=None)
    assert result.status == "ok", result.error
    return (
        [p["train_loss"] for p in points],
        [p["val_loss"] for p in points if "val_loss" in p],
        result.tokens,
    )


def test_half_micro_batches_train_the_same_trajectory_as_the_whole_batch():
    """Same seed, same batches, same tokens per step, same lr rule: only the forward's size differs."""
    whole = tiny_config(log_interval=1)  # batch 4, 8 steps, evals at steps 4 and 8
    assert whole.batch_size == 4 and whole.total_steps == 8
    train_loss, val_loss, tokens = trajectory(whole)
    for size in (2, 1):
        halves = trajectory(tiny_config(log_interval=1, micro_batch=size))
        torch.testing.assert_close(halves[0], train_loss, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(halves[1], val_loss, rtol=1e-5, atol=1e-5)
        assert halves[2] == tokens == 8 * 4 * 32
    assert train_loss[-1] < train_loss[0] - 0.1  # it trained: equal trajectories mean something


def test_micro_batches_inside_grad_accum_and_a_user_workload():
    """grad_accum draws two batches a step, micro_batch cuts each of them: the toy workload's (x, y) tuples."""
    base = {"grad_accum": 2, "tokens": 6 * 2 * 16 * 16, "log_interval": 1}
    whole = trajectory(toy_config(**base))
    pieces = trajectory(toy_config(**base, micro_batch=4))
    torch.testing.assert_close(pieces[0], whole[0], rtol=1e-5, atol=1e-5)
    assert pieces[2] == whole[2] == 6 * 2 * 16 * 16


def test_compiled_blocks_take_the_micro_batch_in_one_graph_checkpointed_or_not():
    """CPU Inductor, the toy's three blocks: every piece has one shape, so one graph serves them all."""
    eager = losses(toy_config(workload=BLOCKS, max_steps=6))
    for every in (0, 1):
        counters.clear()
        knobs = {"compile": "default", "compile_scope": "blocks", "activation_checkpointing": every}
        compiled = losses(toy_config(workload=BLOCKS, max_steps=6, micro_batch=4, **knobs))
        assert compiled == pytest.approx(eager, rel=1e-4, abs=1e-5)
        assert counters["stats"]["unique_graphs"] == 1


def test_a_batch_is_cut_on_dim_0_whatever_its_form_and_weighted_by_its_share():
    x = torch.arange(10).reshape(5, 2)
    pieces = micro_batches({"x": x, "pair": (x, x + 1)}, 2)
    assert [share for _, share in pieces] == [0.4, 0.4, 0.2]  # an uneven tail weighs what it holds
    assert torch.equal(torch.cat([p["x"] for p, _ in pieces]), x)
    assert torch.equal(pieces[2][0]["pair"][1], x[4:] + 1) and isinstance(pieces[0][0]["pair"], tuple)
    assert micro_batches(x, None) == [(x, 1.0)] and micro_batches(x, 8) == [(x, 1.0)]


def test_the_micro_batch_is_what_a_forward_takes():
    assert make_config({"batch_size": 32, "micro_batch": 8}).forward_batch == 8
    assert make_config({"batch_size": 32}).forward_batch == 32
    # at or above the batch: the whole batch in one pass (a search's power-of-two choices all combine)
    assert make_config({"batch_size": 8, "micro_batch": 32}).forward_batch == 8


@pytest.mark.parametrize("size", [3, 12])
def test_a_micro_batch_that_does_not_divide_the_batch_is_refused(size):
    with pytest.raises(ConfigError) as err:
        make_config({"batch_size": 16, "micro_batch": size}, section="train")
    assert str(err.value) == (
        f"config key 'train.micro_batch': must divide batch_size 16 (one of [1, 2, 4, 8]) or be at least it "
        f"(got {size})"
    )


@pytest.mark.parametrize(
    "values, passes",
    [
        ({"batch_size": 32, "micro_batch": 8, "compile": "reduce-overhead"}, 4),
        ({"batch_size": 16, "grad_accum": 2, "compile": "max-autotune"}, 2),
        ({"batch_size": 16, "micro_batch": 8, "grad_accum": 3, "compile": "reduce-overhead"}, 6),
    ],
)
def test_cuda_graph_modes_with_several_forward_passes_per_step_are_refused(values, passes):
    """Run AA: batch 32 in pieces of 8 under reduce-overhead failed on the GPU (pytorch/pytorch#169545), a
    config a user could write, or take from a screen that knew the rule only for its own proposals."""
    with pytest.raises(ConfigError) as err:
        make_config(values, section="train")
    assert str(err.value).startswith(
        f"config key 'train.compile': {values['compile']} captures CUDA graphs, which overwrite a forward "
        f"pass's outputs with the next's when an optimizer step makes {passes} (micro_batch, grad_accum)"
    ), str(err.value)


def test_modes_without_cuda_graphs_or_one_pass_per_step_may_cut_the_batch():
    for values in (
        {"batch_size": 32, "micro_batch": 8, "compile": "max-autotune-no-cudagraphs"},
        {"batch_size": 32, "micro_batch": 8, "compile": "default", "grad_accum": 2},
        {"batch_size": 32, "micro_batch": 32, "compile": "reduce-overhead"},  # the whole batch in one pass
        {"batch_size": 32, "compile": "max-autotune"},
    ):
        assert make_config(values).compile == values["compile"]


def test_the_cli_refuses_it_in_one_line_before_any_work():
    """The CLI's `main` in this process (a subprocess's imports were most of this test; tests/test_train.py
    runs a refusal as a user does)."""
    proc = cli_in_process("--config", str(SMOKE), "--set", "micro_batch=6")  # smoke's batch is 16
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "'micro_batch'" in lines[0] and "batch_size 16" in lines[0], lines
    assert proc.stdout == ""


def test_to_the_search_it_changes_speed_not_the_loss():
    """One loss run stands for every micro-batch of a batch (the screen's twin borrows it), the compile
    cache tells their graphs apart."""
    assert "micro_batch" in SPEED_ONLY_KNOBS and "micro_batch" in GRAPH_FIELDS
    baseline = make_config({"batch_size": 32}).model_dump()
    split = {**baseline, "micro_batch": 8, "activation_checkpointing": 1}
    assert loss_key(split, baseline) == loss_key(baseline, baseline)
    assert loss_key({**baseline, "grad_accum": 2}, baseline) != loss_key(baseline, baseline)
    assert execution(split)["micro_batch"] == 8
