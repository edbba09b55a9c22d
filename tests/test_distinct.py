"""The screen's proposal filter (tuner/distinct.py) with the batch rules (tuner/batch_fit.py), around a real
TPE searcher: no config measured twice, in either spelling of "the whole batch in one pass", and no config
run whose forward batch the batch probe found cannot fit at its precision and checkpointing setting."""

from __future__ import annotations

import optuna
from ray import tune
from ray.tune.search.optuna import OptunaSearch

from tests.test_batch_fit import BASE, PROBED
from tuner.batch_fit import BatchFit
from tuner.distinct import DistinctConfigs
from tuner.knobs import freeze


def optuna_searcher(points: list[dict]) -> OptunaSearch:
    """A real TPE searcher over a space of batches, proposing `points` first."""
    searcher = OptunaSearch(
        points_to_evaluate=points,
        metric="tokens_per_s",
        mode="max",
        sampler=optuna.samplers.TPESampler(seed=0),
    )
    space = {
        "batch_size": tune.choice([8, 16, 32]),
        "micro_batch": tune.choice([None, 8, 16, 32]),
        "precision": tune.choice(["fp32", "bf16"]),
    }
    searcher.set_search_properties("tokens_per_s", "max", space)
    return searcher


def test_the_screen_never_runs_a_config_that_cannot_fit_nor_one_config_twice_in_two_spellings(capsys):
    points = [
        {"batch_size": 16, "micro_batch": 32, "precision": "bf16"},  # runs, spelled micro_batch None
        {"batch_size": 16, "micro_batch": None, "precision": "bf16"},  # the same config: not run again
        {"batch_size": 32, "micro_batch": None, "precision": "fp32"},  # a forward of 32 at fp32: refused
        {"batch_size": 32, "micro_batch": 8, "precision": "fp32"},  # the same batch in pieces of 8: runs
    ]
    inner = optuna_searcher(points)
    searcher = DistinctConfigs(inner, fit=BatchFit(BASE, PROBED))
    first = searcher.suggest("t1")
    assert first == {"batch_size": 16, "micro_batch": None, "precision": "bf16"}
    searcher.on_trial_complete("t1", result={"tokens_per_s": 100.0})
    second = searcher.suggest("t2")
    assert second == {"batch_size": 32, "micro_batch": 8, "precision": "fp32"}
    assert searcher.answered == 1  # the second spelling, answered from the first's measurement
    refused = freeze({"batch_size": 32, "micro_batch": None, "precision": "fp32"})
    assert searcher.refused[refused].startswith("refused batch_size=32 micro_batch=None (fp32")
    assert searcher.measured[refused] == 0.0  # counted as seen: the screen's clock never waits for it
    assert "[screen] refused batch_size=32" in capsys.readouterr().err
    # TPE was told the refused config measured nothing, and nothing about the spelling it ran as another
    told = [t for t in inner._ot_study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert sorted(t.value for t in told) == [0.0, 100.0, 100.0]
    for n in range(3, 12):  # whatever TPE proposes next, nothing that cannot fit is handed to Tune
        config = searcher.suggest(f"t{n}")
        if config is None or config == DistinctConfigs.FINISHED:
            break
        assert BatchFit(BASE, PROBED).refusal(config) is None, config
        assert config["micro_batch"] is None or config["micro_batch"] < config["batch_size"], config
        searcher.on_trial_complete(f"t{n}", result={"tokens_per_s": 50.0})


def test_a_ledger_written_in_both_spellings_counts_as_one_config():
    measured = {
        freeze({"batch_size": 16, "micro_batch": 32}): 90.0,
        freeze({"batch_size": 16, "micro_batch": None}): 110.0,
    }
    searcher = DistinctConfigs(optuna_searcher([]), measured, fit=BatchFit(BASE, PROBED))
    assert searcher.measured == {freeze({"batch_size": 16, "micro_batch": None}): 110.0}
