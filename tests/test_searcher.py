"""The screen's searcher (tuner/space/searcher.py) over the loss-aware TPE (tuner/space/sampler.py) with the
batch rules (tuner/space/batch_fit.py), on a real Optuna study: no config measured twice, in either spelling
of "the whole batch in one pass", none run whose forward batch the probe found cannot fit, none run whose
loss the loss runs so far rule out; and every proposal replays from what it was drawn from."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import TrialState
from toy_workload import TOY

from tests.test_batch_fit import BASE, PROBED
from trainables.config import make_config
from trainables.spec import TrialSpec
from tuner.runs.ledger import Ledger
from tuner.runs.request import Placement
from tuner.runs.tune import run_proposals
from tuner.space.batch_fit import BatchFit
from tuner.space.knobs import freeze
from tuner.space.sampler import CONSTRAINT, REFUSED, LossAwareTpe, distributions, replayed
from tuner.space.searcher import ScreenSearcher
from tuner.state.hardware import ProbedBatch

SPACE = {"batch_size": [8, 16, 32], "micro_batch": [None, 8, 16, 32], "precision": ["fp32", "bf16"]}


def tpe(space: dict, points: list[dict], verdicts=None, seed: int = 0, startup: int = 10) -> LossAwareTpe:
    """The loss-aware TPE over `space` on a fresh in-memory study, proposing `points` first."""
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=seed))
    return LossAwareTpe(
        study=study,
        space=distributions(space),
        seed=seed,
        startup_trials=startup,
        points=tuple(points),
        verdicts=verdicts,
    )


def handed(searcher: ScreenSearcher, n: int, speed=lambda config: 50.0) -> list[dict[str, Any]]:
    """Up to `n` configs the searcher hands Tune, each finished at once with its `speed`."""
    out = []
    for i in range(n):
        config = searcher.suggest(f"t{i}")
        if config is None or config == ScreenSearcher.FINISHED:
            break
        out.append(config)
        searcher.on_trial_complete(f"t{i}", result={"tokens_per_s": speed(config)})
    return out


def test_the_screen_never_runs_a_config_that_cannot_fit_nor_one_config_twice_in_two_spellings(capsys):
    points = [
        {"batch_size": 16, "micro_batch": 32, "precision": "bf16"},  # runs, spelled micro_batch None
        {"batch_size": 16, "micro_batch": None, "precision": "bf16"},  # the same config: not run again
        {"batch_size": 32, "micro_batch": None, "precision": "fp32"},  # a forward of 32 at fp32: refused
        {"batch_size": 32, "micro_batch": 8, "precision": "fp32"},  # the same batch in pieces of 8: runs
    ]
    sampler = tpe(SPACE, points)
    searcher = ScreenSearcher(sampler, fit=BatchFit(BASE, PROBED))
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
    # the study holds what ran and what was refused (measuring nothing), never the repeat
    kept = [(t.params, t.state, t.value, REFUSED in t.user_attrs) for t in sampler.study.trials]
    assert kept == [
        (first, TrialState.COMPLETE, 100.0, False),
        ({"batch_size": 32, "micro_batch": None, "precision": "fp32"}, TrialState.COMPLETE, 0.0, True),
        (second, TrialState.RUNNING, None, False),
    ]
    searcher.on_trial_complete("t2", result={"tokens_per_s": 60.0})
    for config in handed(searcher, 10):  # whatever TPE proposes next, nothing that cannot fit is run
        assert BatchFit(BASE, PROBED).refusal(config) is None, config
        assert config["micro_batch"] is None or config["micro_batch"] < config["batch_size"], config
    assert all(replayed(sampler, BatchFit(BASE, PROBED).normalized))


def test_the_screen_skips_the_pairs_of_a_space_whose_micro_batch_does_not_divide_the_batch(capsys):
    """batch_size [12, 16, 24] x micro_batch [None, 8, 16]: 12 in 8s, 24 in 16s would be refused by the
    trial itself (TrainConfig), a failed run; the screen skips them, at no cost, and runs the rest."""
    space = {"batch_size": [12, 16, 24], "micro_batch": [None, 8, 16]}
    searcher = ScreenSearcher(tpe(space, [{"batch_size": 12, "micro_batch": 8}]), fit=BatchFit(BASE))
    configs = handed(searcher, 12)
    for config in configs:
        TrialSpec.of_tune({**TrialSpec.of(BASE.model_dump()).as_tune(), **config})  # no ConfigError
    assert configs and {"batch_size": 12, "micro_batch": 8} not in configs
    assert searcher.refused[freeze({"batch_size": 12, "micro_batch": 8})] == (
        "refused batch_size=12 micro_batch=8: a micro_batch below the batch must divide it"
    )
    assert "[screen] refused batch_size=12 micro_batch=8" in capsys.readouterr().err


def test_a_ledger_written_in_both_spellings_counts_as_one_config():
    measured = {
        freeze({"batch_size": 16, "micro_batch": 32}): 90.0,
        freeze({"batch_size": 16, "micro_batch": None}): 110.0,
    }
    searcher = ScreenSearcher(tpe(SPACE, []), measured, fit=BatchFit(BASE, PROBED))
    assert searcher.measured == {freeze({"batch_size": 16, "micro_batch": None}): 110.0}


class FailsFrom:
    """Verdicts: every config at `batch` or larger is `over` the limit; the rest unknown (None)."""

    def __init__(self, batch: int, over: float = 0.3):
        self.batch, self.over = batch, over

    def violation(self, config: dict[str, Any]) -> float | None:
        return self.over if config["batch_size"] >= self.batch else None


BIG_SPACE = {
    "batch_size": [32, 64, 128, 256],
    "precision": ["fp32", "tf32", "bf16", "fp16"],
    "compile": ["none", "default", "reduce-overhead", "max-autotune-no-cudagraphs"],
    "fused_adamw": [False, True],
}


def speed(config: dict[str, Any]) -> float:
    """Larger batches and half precision under CUDA graphs run fastest (as on nanoGPT)."""
    graphs = {"none": 1.0, "default": 1.5, "reduce-overhead": 2.0, "max-autotune-no-cudagraphs": 1.6}
    return (
        config["batch_size"] ** 0.5
        * (2.0 if config["precision"] in ("bf16", "fp16") else 1.0)
        * graphs[config["compile"]]
    )


def test_a_failed_loss_group_stops_the_sampler_proposing_its_configs(capsys):
    """Once the loss runs say batch 64 and up fail the limit, the searcher runs none of them again: a
    proposal of one is refused before it runs, kept in the study as measuring nothing with its constraint,
    and TPE, told the constraints of every finished trial, spends the screen at the batch that can pass.
    Without the verdicts, the same seeded search keeps running the large batches it finds fastest."""
    said: dict[str, Any] = {"verdicts": None}
    sampler = tpe(BIG_SPACE, [], verdicts=lambda: said["verdicts"], startup=4)
    searcher = ScreenSearcher(sampler)
    before = handed(searcher, 6, speed)
    said["verdicts"] = FailsFrom(64)  # the loss runs beside the screen report: batch 64 fails
    after = handed(searcher, 18, speed)
    assert len(after) == 18 and all(c["batch_size"] == 32 for c in after), after
    refused = [t for t in sampler.study.trials if REFUSED in t.user_attrs and t.constraints]
    assert refused and all(t.params["batch_size"] >= 64 for t in refused)
    assert all(t.constraints == {CONSTRAINT: 0.3} for t in refused)
    assert "its loss cannot pass (+0.3000 over the limit" in capsys.readouterr().err
    # each proposal drew with the constraints known then: the finished large batches' after the verdict
    drawn = [
        t.user_attrs["drawn_from"]["constraints"]
        for t in sampler.study.trials
        if "drawn_from" in t.user_attrs
    ]
    assert drawn[len(before)] == {
        str(t.number): 0.3 for t in sampler.study.trials[: len(before)] if t.params["batch_size"] >= 64
    }
    assert all(replayed(sampler))

    blind = ScreenSearcher(tpe(BIG_SPACE, [], startup=4))
    ran_blind = handed(blind, 24, speed)
    assert sum(c["batch_size"] >= 64 for c in ran_blind[6:]) >= 9, "the speed-only TPE keeps them"


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
        TrialSpec.of(TOY).as_tune(),
        Placement({"cpu": 1}, 1, reuse_actors=True),
        trials=4,
        make_searcher=lambda: tpe({"batch_size": [4, 8], "micro_batch": [None, 4, 8]}, points),
        stopper_ratio=0.0,
        clock=None,
        fit=BatchFit(base, {"fp32": ProbedBatch(batch=4)}),
    )
    ran = sorted((r.config["batch_size"], r.config["micro_batch"]) for r in Ledger(tmp_path, "screen").rows())
    assert ran == [(4, None), (8, 4)]  # the space holds no third config that fits: it ended exhausted
    assert all(r.status == "ok" for r in rows) and len(rows) == 2
    assert [r.train["micro_batch"] for r in rows if r.config["batch_size"] == 4] == [None]


def test_a_compile_mode_no_run_has_finished_gets_one_run_at_a_time():
    """On an H100 five of the screen's six places held max-autotune proposals still autotuning when its
    150 s ended (nanoGPT, 2026-12-07): now a compile mode (or kernel set) that no run has finished gets one
    run, its scout, until that one ends; the searcher answers None (not FINISHED) while only such
    proposals come, and draws nothing again until a run starts or ends. Start points never wait."""
    space = {"batch_size": [32, 64, 128, 256], "compile": ["max-autotune-no-cudagraphs", "reduce-overhead"]}
    point = {"batch_size": 64, "compile": "max-autotune-no-cudagraphs"}
    sampler = tpe(space, [point, {**point, "batch_size": 32}], startup=20)
    searcher = ScreenSearcher(sampler)
    assert searcher.suggest("t0") == point and searcher.suggest("t1")["batch_size"] == 32, "start points run"
    scout = searcher.suggest("t2")
    assert scout["compile"] == "reduce-overhead", "its own scout"
    assert searcher.suggest("t3") is None and searcher.waited, "both modes have a scout in flight"
    draws = len(sampler.study.trials)
    assert searcher.suggest("t4") is None and len(sampler.study.trials) == draws
    searcher.on_trial_complete("t2", result={"tokens_per_s": 10.0})
    again = [searcher.suggest(f"t{n}") for n in range(5, 8)]
    assert all(c["compile"] == "reduce-overhead" for c in again if c), again
    assert any(c for c in again), "its mode measured: more of it may run"
    searcher.on_trial_complete("t0", result={"tokens_per_s": 20.0})
    assert searcher.suggest("t8") is not None
    assert all(replayed(sampler))
