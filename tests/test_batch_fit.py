"""What fits, per the batch probe's findings (issue 36 item 2): the space bounded by the forward batch (the
micro-batch, or the whole batch), configs that cannot fit at their precision and checkpointing setting
refused before they run, and one spelling of "the whole batch in one pass" (micro_batch >= batch_size is
micro_batch None). The screen's filter that applies them: tests/test_distinct.py."""

from __future__ import annotations

from trainables.config import TrainConfig
from tuner.space.batch_fit import BatchFit, largest_anywhere, largest_forward, normalized
from tuner.space.domains import bound_batch, start_point
from tuner.state.hardware import ProbedBatch

# As the probe leaves them for configs/hybrid-100m.yaml's space (activation_checkpointing [0, 1, 2]):
# each memory class without checkpointing and with every block checkpointed (1, the most aggressive).
FP32 = ProbedBatch(batch=8, peak_mb=13_000.0, checkpointed={1: ProbedBatch(batch=24, checkpointing=1)})
BF16 = ProbedBatch(batch=16, peak_mb=9_800.0, checkpointed={1: ProbedBatch(batch=48, checkpointing=1)})
PROBED = {"fp32": FP32, "tf32": FP32, "bf16": BF16}
BASE = TrainConfig(batch_size=8, micro_batch=None, precision="fp32", activation_checkpointing=0)


# --- reading a setting from the two probed -----------------------------------------------------------------


def test_a_probed_setting_is_its_own_bound_and_one_between_is_bounded_by_the_one_that_keeps_less():
    assert largest_forward(FP32, 0) == 8 and largest_forward(FP32, 1) == 24
    # every 2nd block checkpointed keeps more than every block: 24 bounds it from above, nothing is guessed
    assert largest_forward(FP32, 2) == 24
    assert largest_anywhere(PROBED) == 48


def test_without_checkpointing_searched_the_one_setting_probed_bounds_every_config():
    probed = ProbedBatch(batch=12, checkpointing=2)  # the baseline's own setting, not searched
    assert largest_forward(probed, 0) == largest_forward(probed, 2) == 12


def test_a_setting_that_keeps_less_than_any_probed_is_not_bounded():
    probed = ProbedBatch(batch=8, checkpointed={2: ProbedBatch(batch=16, checkpointing=2)})
    assert largest_forward(probed, 1) is None  # every block: more recomputed than any setting probed


# --- the space, bounded by the forward batch -----------------------------------------------------------------


def test_micro_batches_above_the_largest_fit_are_dropped_and_batches_kept_only_where_one_splits_them():
    space = {"batch_size": [8, 16, 32, 64, 96], "micro_batch": [None, 8, 16, 32]}
    bounded, notices = bound_batch(space, 16)
    assert bounded["micro_batch"] == [None, 8, 16]
    # 32 and 64 run as micro-batches of 8 or 16; 96 too (16 divides it): all fit one forward at a time
    assert bounded["batch_size"] == [8, 16, 32, 64, 96]
    bounded, notices = bound_batch({"batch_size": [8, 16, 24, 40], "micro_batch": [None, 16, 32]}, 16)
    assert bounded == {"batch_size": [8, 16], "micro_batch": [None, 16]}  # no fitting micro splits 24 or 40
    assert notices == [
        "micro_batch bounded by the memory probe (largest forward batch 16): [None, 16]",
        "batch_size bounded by the memory probe (largest forward batch 16): [8, 16]",
    ]


def test_the_baselines_micro_batch_splits_batches_when_micro_batch_is_not_searched():
    assert bound_batch({"batch_size": [8, 32, 64]}, 8, base_micro=8)[0]["batch_size"] == [8, 32, 64]
    assert bound_batch({"batch_size": [8, 32, 64]}, 8, base_micro=None)[0]["batch_size"] == [8]
    assert bound_batch({"batch_size": [8, 32, 64]}, 4, base_micro=8)[0]["batch_size"] == [8]  # 8 fits not


def test_a_knob_left_without_a_fitting_value_keeps_its_smallest():
    bounded, _ = bound_batch({"batch_size": [32, 64], "micro_batch": [16, 32]}, 4)
    assert bounded == {"batch_size": [32], "micro_batch": [16]}


# --- the proposal filter: refusal and one spelling -------------------------------------------------------


def test_a_config_refused_is_one_whose_forward_batch_its_setting_cannot_fit():
    fit = BatchFit(BASE, PROBED)
    assert fit.refusal({"batch_size": 8}) is None
    assert fit.refusal({"batch_size": 32, "micro_batch": 8}) is None  # forward 8 at fp32: fits
    why = fit.refusal({"batch_size": 16})  # fp32 fits 8 without checkpointing
    assert why == (
        "refused batch_size=16 micro_batch=None (fp32, activation_checkpointing=0): a forward of 16 is over 8, "
        "the largest the batch probe fit at that setting"
    )
    assert fit.refusal({"batch_size": 16, "activation_checkpointing": 1}) is None
    assert fit.refusal({"batch_size": 16, "activation_checkpointing": 2}) is None  # below 24: may fit
    assert "keeps no more activations" in fit.refusal({"batch_size": 32, "activation_checkpointing": 2})
    # tf32 holds fp32's tensors: the same bound; bf16 its own
    assert fit.refusal({"batch_size": 16, "precision": "tf32"}) is not None
    assert fit.refusal({"batch_size": 16, "precision": "bf16"}) is None
    assert BatchFit(BASE).refusal({"batch_size": 4096}) is None  # nothing probed: nothing refused


def test_a_micro_batch_below_its_batch_that_does_not_divide_it_is_refused_probed_or_not():
    """A space's product pairs every batch with every micro-batch; TrainConfig refuses 12 in pieces of 8."""
    for fit in (BatchFit(BASE, PROBED), BatchFit(BASE)):
        assert fit.refusal({"batch_size": 12, "micro_batch": 8}) == (
            "refused batch_size=12 micro_batch=8: a micro_batch below the batch must divide it"
        )
        assert fit.refusal({"batch_size": 16, "micro_batch": 8}) is None
        assert fit.refusal({"micro_batch": 3}) is not None  # the baseline's batch 8
    assert BatchFit(TrainConfig(micro_batch=8)).refusal({"batch_size": 12}) is not None


def test_cuda_graphs_with_several_forward_passes_per_step_are_refused():
    """Run AA: batch 32 in pieces of 8 under reduce-overhead failed on the GPU (pytorch/pytorch#169545)."""
    fit = BatchFit(BASE)
    graphs = {"batch_size": 32, "micro_batch": 8, "compile": "reduce-overhead"}
    assert fit.refusal(graphs) == (
        "refused compile=reduce-overhead: reduce-overhead captures CUDA graphs, which overwrite a forward "
        "pass's outputs with the next's when an optimizer step makes 4 (micro_batch, grad_accum): use default "
        "or max-autotune-no-cudagraphs, or one pass per step (pytorch/pytorch#169545)"
    )
    assert fit.refusal({**graphs, "compile": "max-autotune-no-cudagraphs"}) is None
    assert fit.refusal({**graphs, "micro_batch": None}) is None  # one pass: CUDA graphs are fine
    assert fit.refusal({"batch_size": 16, "compile": "max-autotune", "grad_accum": 2}) is not None


def test_a_micro_batch_of_at_least_the_batch_is_spelled_none():
    assert normalized({"batch_size": 16, "micro_batch": 32}, BASE) == {"batch_size": 16, "micro_batch": None}
    assert normalized({"batch_size": 16, "micro_batch": 16}, BASE)["micro_batch"] is None
    assert normalized({"batch_size": 32, "micro_batch": 16}, BASE)["micro_batch"] == 16  # accumulates
    assert normalized({"micro_batch": 8}, BASE)["micro_batch"] is None  # the baseline's batch 8
    assert normalized({"precision": "bf16"}, BASE) == {"precision": "bf16"}


def test_a_start_point_takes_the_one_spelling_where_the_space_offers_it():
    space = {"batch_size": [8, 16], "micro_batch": [None, 8, 16]}
    assert start_point({"micro_batch": 16}, space, BASE, print) == {"batch_size": 8, "micro_batch": None}
    # without None among the choices the searcher could not be handed it: the point stays as written
    no_none = {"batch_size": [8, 16], "micro_batch": [8, 16]}
    assert start_point({"micro_batch": 16}, no_none, BASE, print) == {"batch_size": 8, "micro_batch": 16}
