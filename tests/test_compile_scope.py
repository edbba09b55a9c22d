"""Regional compilation (`compile_scope: blocks`): each of the workload's repeated blocks compiled on its own
(Inductor on the CPU here; on a GPU in tests/test_fused_gpu.py; the hybrid's blocks compiled against eager:
tests/test_checkpointing.py). Equal blocks share one compiled graph, the
run trains to the eager run's losses, evals run eagerly, and a workload that names no blocks is not offered
the knob."""

from __future__ import annotations

import pytest
from torch._dynamo.utils import counters

from tests.test_train import quiet_train, toy_config
from trainables.config import ConfigError, TrainConfig
from trainables.preflight import preflight
from trainables.workloads.workload import check_workload

BLOCKS = "toy_workload:make_blocks_workload"


def losses(cfg: TrainConfig) -> tuple[float, float]:
    result = quiet_train(cfg)
    assert result.status == "ok", result.error
    return result.train_loss, result.val_loss


def test_blocks_train_to_the_eager_losses_through_one_shared_graph():
    eager = losses(toy_config(workload=BLOCKS, max_steps=8))
    counters.clear()
    compiled = losses(toy_config(workload=BLOCKS, max_steps=8, compile="default", compile_scope="blocks"))
    assert compiled == pytest.approx(eager, rel=1e-4, abs=1e-5)
    assert counters["stats"]["unique_graphs"] == 1  # three blocks, one graph: the whole point of the scope


def test_whole_model_scope_compiles_every_block_into_its_graph():
    counters.clear()
    losses(toy_config(workload=BLOCKS, max_steps=4, compile="default", compile_scope="model"))
    assert counters["stats"]["unique_graphs"] == 1  # one graph holding all three blocks
    assert counters["stats"]["calls_captured"] > 3 * 4  # ops of every block traced into it


def test_a_workload_without_compile_regions_is_refused_blocks_in_one_line():
    assert "compile_scope" not in check_workload(toy_config()).supports
    assert "compile_scope" in check_workload(toy_config(workload=BLOCKS)).supports
    assert "compile_scope" in check_workload(TrainConfig()).supports  # the hybrid names its blocks
    with pytest.raises(ConfigError, match="compile_scope"):
        preflight(toy_config(compile="default", compile_scope="blocks"))
