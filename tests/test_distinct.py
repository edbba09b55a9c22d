"""The screen's proposal filter (tuner/space/distinct.py) with the batch rules (tuner/space/batch_fit.py), around a real
TPE searcher: no config measured twice, in either spelling of "the whole batch in one pass", and no config
run whose forward batch the batch probe found cannot fit at its precision and checkpointing setting."""

from __future__ import annotations

import optuna
from ray import tune
from ray.tune.search.optuna import OptunaSearch
from toy_workload import TOY

from tests.test_batch_fit import BASE, PROBED
from trainables.config import make_config
from trainables.spec import TrialSpec
from tuner.runs.ledger import Ledger
from tuner.runs.request import Placement
from tuner.runs.tune import run_proposals
from tuner.space.batch_fit import BatchFit
from tuner.space.distinct import DistinctConfigs
from tuner.space.knobs import freeze
from tuner.state.hardware import ProbedBatch


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


def test_the_screen_skips_the_pairs_of_a_space_whose_micro_batch_does_not_divide_the_batch(capsys):
    """batch_size [12, 16, 24] x micro_batch [None, 8, 16]: 12 in 8s, 24 in 16s would be refused by the
    trial itself (TrainConfig), a failed run; the screen skips them, at no cost, and runs the rest."""
    space = {"batch_size": tune.choice([12, 16, 24]), "micro_batch": tune.choice([None, 8, 16])}
    inner = OptunaSearch(
        points_to_evaluate=[{"batch_size": 12, "micro_batch": 8}],
        metric="tokens_per_s",
        mode="max",
        sampler=optuna.samplers.TPESampler(seed=0),
    )
    inner.set_search_properties("tokens_per_s", "max", space)
    searcher = DistinctConfigs(inner, fit=BatchFit(BASE))
    handed = []
    for n in range(12):
        config = searcher.suggest(f"t{n}")
        if config is None or config == DistinctConfigs.FINISHED:
            break
        TrialSpec.of_tune(
            {**TrialSpec.of(BASE.model_dump()).as_tune(), **config}
        )  # what the trial reads: no ConfigError
        handed.append(config)
        searcher.on_trial_complete(f"t{n}", result={"tokens_per_s": 10.0 + n})
    assert handed and {"batch_size": 12, "micro_batch": 8} not in handed
    assert searcher.refused[freeze({"batch_size": 12, "micro_batch": 8})] == (
        "refused batch_size=12 micro_batch=8: a micro_batch below the batch must divide it"
    )
    assert "[screen] refused batch_size=12 micro_batch=8" in capsys.readouterr().err


def test_a_ledger_written_in_both_spellings_counts_as_one_config():
    measured = {
        freeze({"batch_size": 16, "micro_batch": 32}): 90.0,
        freeze({"batch_size": 16, "micro_batch": None}): 110.0,
    }
    searcher = DistinctConfigs(optuna_searcher([]), measured, fit=BatchFit(BASE, PROBED))
    assert searcher.measured == {freeze({"batch_size": 16, "micro_batch": None}): 110.0}


def test_a_screen_through_tune_runs_each_config_once_and_none_that_cannot_fit(tmp_path, shared_cpu_ray):
    """run_proposals with real Tune on the toy workload: the probe found a forward of 4 fits, so batch 8 runs
    only in micro-batches of 4; batch 4 with micro_batch 8 is batch 4 in one pass, run once."""
    base = make_config(TOY)
    points = [
        {"batch_size": 4, "micro_batch": 8},  # runs, as micro_batch None
        {"batch_size": 4, "micro_batch": None},  # the same config
        {"batch_size": 8, "micro_batch": None},  # a forward of 8: refused
        {"batch_size": 8, "micro_batch": 4},  # runs
    ]
    rows = run_proposals(
        "screen",
        tmp_path,
        {
            **TrialSpec.of(TOY).as_tune(),
            "batch_size": tune.choice([4, 8]),
            "micro_batch": tune.choice([None, 4, 8]),
        },
        Placement({"cpu": 1}, 1, reuse_actors=True),
        trials=4,
        make_searcher=lambda: OptunaSearch(
            points_to_evaluate=points,
            metric="tokens_per_s",
            mode="max",
            sampler=optuna.samplers.RandomSampler(seed=0),
        ),
        stopper_ratio=0.0,
        clock=None,
        fit=BatchFit(base, {"fp32": ProbedBatch(batch=4)}),
    )
    ran = sorted((r.config["batch_size"], r.config["micro_batch"]) for r in Ledger(tmp_path, "screen").rows())
    assert ran == [(4, None), (8, 4)]  # the space holds no third config that fits: it ended exhausted
    assert all(r.status == "ok" for r in rows) and len(rows) == 2
    assert [r.train["micro_batch"] for r in rows if r.config["batch_size"] == 4] == [None]
