"""bench/oracle.py's sitting: the baseline, the answer, the points, the sample, in that order, one run at a
time, the record rewritten after each (a cut sitting keeps what finished; a rerun trains only the rest)."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.oracle_plan import FittedSpace, points, product, random_configs
from bench.oracle_record import AnswerRecord, OracleRecord, OracleRun, PointRecord, Role, Skipped, write
from bench.oracle_runs import RunOutput, recorded, say
from trainables.config import ConfigError, TrainConfig, dump_config, make_config
from tuner.config import QualitySection
from tuner.rules.loss_limit import LossLimit
from tuner.space.knobs import train_point


def config_key(cfg: TrainConfig) -> str:
    """The run's identity: the whole training config, defaults included (two spellings, one key)."""
    return hashlib.sha256(json.dumps(cfg.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()[:16]


def fastest_passing(runs: list[OracleRun]) -> OracleRun | None:
    """The oracle: the fastest run that trained (status ok) to a loss within the limit; the answer's own
    run is not a candidate (answer_over_oracle above 1 then says the search beat the sample)."""
    fair = [r for r in runs if r.roles != ["answer"] and r.status == "ok" and r.passed and r.tokens_per_s]
    return max(fair, key=lambda r: r.tokens_per_s, default=None)


def verdict_words(run: OracleRun, limit: LossLimit) -> str:
    """A point's verdict as its row says it: its loss against the limit, or why it has none."""
    if run.status != "ok" or run.val_loss is None:
        return f"status {run.status}: {run.error}"
    return f"val loss {run.val_loss:.4f} {'<=' if run.passed else '>'} limit {limit.limit:.4f}"


def label(knobs: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in knobs.items()) or "the baseline's knobs"


def changes(cfg: TrainConfig, base: TrainConfig) -> dict[str, Any]:
    """The values of `cfg` that differ from the baseline's: what a run is, for a reader."""
    baseline = base.model_dump(mode="json")
    return {k: v for k, v in cfg.model_dump(mode="json").items() if v != baseline.get(k)}


def held_against(runs: list[OracleRun], oracle: OracleRun | None, path: str | None) -> AnswerRecord | None:
    """The answer's run held against the oracle: its verdict and its speed over the oracle's."""
    mine = next((r for r in runs if "answer" in r.roles), None)
    if mine is None:
        return None
    ratio = mine.tokens_per_s / oracle.tokens_per_s if mine.tokens_per_s and oracle else None
    return AnswerRecord(path=str(path), run=mine, passed=bool(mine.passed), answer_over_oracle=ratio)


@dataclass
class Sitting:
    """One oracle sitting over OUT: `prior` holds the runs an earlier sitting recorded there, `runs` this
    one's (by key, in the order first needed), `train` trains one config file alone."""

    out: Path
    base_values: dict[str, Any]
    quality: QualitySection
    leave_out: list[str]
    record: OracleRecord
    prior: dict[str, OracleRun]
    train: Callable[[Path, str], RunOutput]
    space: FittedSpace
    answer: TrainConfig | None = None
    answer_path: str | None = None
    runs: dict[str, OracleRun] = field(default_factory=dict)
    limit: LossLimit | None = None

    @functools.cached_property
    def base(self) -> TrainConfig:
        """The baseline: the config's train: section as the search reads it."""
        return make_config(self.base_values, section="train")

    def sit(self) -> int:
        baseline = self.trained(self.base, "baseline")
        if baseline.status != "ok" or baseline.val_loss is None:
            say(f"the baseline did not train ({baseline.status}: {baseline.error}): no loss limit, no oracle")
            return 1
        self.limit = self.record.limit = self.quality.loss_limit(baseline.val_loss)
        say(self.limit.sentence())
        self.runs = {k: self._judged(r) for k, r in self.runs.items()}
        if self.answer is not None:
            self.trained(self.answer, "answer")
        self.sample(self.try_points())
        self.save()
        oracle, answer = self.record.oracle, self.record.answer
        ratio = f"; the answer is {answer.answer_over_oracle or 0:.3f}x it" if answer else ""
        say(f"oracle: {label(oracle.knobs) if oracle else 'none'}{ratio}")
        return 0

    def try_points(self) -> list[dict[str, Any]]:
        """Each point once at the point execution; the passing ones (a failing point's configs never run)."""
        passing, planned = [], points(self.record.sample.point_knobs, self.base)
        baseline = self.base.model_dump()
        for i, knobs in enumerate(planned, 1):
            batch, peak_lr = train_point(knobs, baseline)
            at = {"knobs": knobs, "batch": batch, "peak_lr": peak_lr}
            try:
                cfg = make_config({**self.base_values, **self.space.execution, **knobs}, section="train")
            except ConfigError as err:
                self.record.points.append(PointRecord(**at, run=None, passed=False, why=str(err)))
                self.save()
                continue
            say(f"point {i}/{len(planned)}: {label(knobs)} at {label(self.space.execution)}")
            run = self.trained(cfg, "point")
            self.record.points.append(
                PointRecord(**at, run=run.key, passed=bool(run.passed), why=verdict_words(run, self.limit))
            )
            self.save()
            if run.passed:
                passing.append(knobs)
        return passing

    def sample(self, passing: list[dict[str, Any]]) -> None:
        """The stated sample at the passing points: --knobs' product, then --sample's random configs."""
        stated = self.record.sample
        planned: list[tuple[dict[str, Any], Role]] = [
            (knobs, "sample") for point in passing for knobs in product(stated.values, point)
        ]
        planned += [(k, "random") for k in random_configs(self.space, stated.random, stated.seed, passing)]
        for i, (knobs, role) in enumerate(planned, 1):
            try:
                cfg = make_config({**self.base_values, **knobs}, section="train")
            except ConfigError as err:
                stated.skipped.append(Skipped(what=label(knobs), why=str(err)))
                continue
            say(f"{role} {i}/{len(planned)}: {label(knobs)}")
            self.trained(cfg, role)

    def trained(self, cfg: TrainConfig, role: Role) -> OracleRun:
        """The run of `cfg`: one recorded in this sitting or the last (a rerun), else trained now."""
        key = config_key(cfg)
        if key in self.runs:
            run = self.runs[key]
            say(f"{role}: the config of {', '.join(run.roles)} run {key}: trained already")
            run = run.model_copy(update={"roles": [*run.roles, role] if role not in run.roles else run.roles})
        elif key in self.prior and self.prior[key].exit_code >= 0:  # a killed run is no result: again
            say(f"{role}: {key} recorded already ({self.prior[key].status}): not trained again")
            run = self.prior[key].model_copy(update={"roles": [role]})
        else:
            run = self._train(cfg, key, role)
        self.runs[key] = self._judged(run)
        self.save()
        return self.runs[key]

    def _train(self, cfg: TrainConfig, key: str, role: Role) -> OracleRun:
        config_file = self.out / "configs" / f"{key}.yaml"
        dump_config(cfg, config_file, self.leave_out)
        knobs = changes(cfg, self.base)
        say(f"{role} {key}: training {label(knobs)} ({cfg.tokens:,} tokens) alone: {config_file}")
        done = self.train(config_file, f"{role} {key}")
        run = recorded(done, key=key, role=role, knobs=knobs, config_file=config_file)
        say(
            f"{role} {key}: {run.status}, {run.tokens_per_s or 0:,.0f} {run.unit}/s, val loss {run.val_loss} "
            f"in {run.wall_s:.0f} s"
        )
        return run

    def _judged(self, run: OracleRun) -> OracleRun:
        return run.model_copy(update={"passed": self.limit.verdict(run) if self.limit else None})

    def save(self) -> None:
        """The record as it stands, the oracle and the answer's ratio against it recomputed, to OUT."""
        runs = list(self.runs.values())
        self.record.runs = runs
        self.record.oracle = fastest_passing(runs)
        if self.limit is not None:
            self.record.answer = held_against(runs, self.record.oracle, self.answer_path)
        write(self.record, self.out)
