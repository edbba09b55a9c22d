"""bench/oracle.py's typed record (OUT/oracle.json) and its table (OUT/oracle.md).

One record, rewritten after every run, so a sitting killed mid-way keeps what finished and a rerun with the
same OUT finds its runs by key (the sha256 of the whole training config) and trains only the others.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trainables.config import ConfigError
from tuner.rules.loss_limit import LossLimit

Role = Literal["baseline", "point", "sample", "random", "answer"]


class Strict(BaseModel):
    """A typo in a field name is an error; a record read back is the record written."""

    model_config = ConfigDict(extra="forbid")


class OracleRun(Strict):
    """One training run, alone, to the full budget: what `python -m trainables.train --json` said of it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    key: str = Field(description="sha256 of the whole training config (16 hex): a rerun skips a key it holds")
    roles: list[Role] = Field(description="what the oracle trained it as (one run can stand for several)")
    knobs: dict[str, Any] = Field(description="the knobs whose values differ from the baseline's")
    config_file: str = Field(description="the YAML it trained: python -m trainables.train --config FILE")
    status: str = Field(description="ok | oom | nan | error (error also where the CLI wrote no result)")
    exit_code: int
    tokens_per_s: float | None = Field(None, description="steady-state speed, in the workload's unit")
    unit: str = "tokens"
    val_loss: float | None = None
    compile_s: float | None = None
    wall_s: float = Field(description="the whole process, imports and compile included")
    passed: bool | None = Field(None, description="the loss limit's verdict (None: no limit yet)")
    error: str | None = Field(None, description="the run's error, or the last line of its stderr")


class PointRecord(Strict):
    """A value of the knobs that change the step count or the lr, trained once at the point execution."""

    knobs: dict[str, Any]
    batch: int = Field(description="effective batch (batch_size x grad_accum)")
    peak_lr: float
    run: str | None = Field(description="key of its run (None: the config was refused before any run)")
    passed: bool
    why: str = Field(description="the verdict in words: the loss against the limit, or why it did not train")


class Skipped(Strict):
    what: str
    why: str


class SampleStatement(Strict):
    """What the oracle set out to train: the stated sample, so a reader knows what 'fastest' is over."""

    knobs: list[str] = Field(description="--knobs: their product is trained at every passing point")
    values: dict[str, list[Any]] = Field(description="the values each of --knobs takes here")
    point_knobs: dict[str, list[Any]] = Field(description="the point knobs and the values tried here")
    point_execution: dict[str, Any] = Field(description="search.recipe as it runs here: the points' runs")
    random: int = Field(0, description="--sample: random configs of the whole space at the passing points")
    seed: int = 0
    skipped: list[Skipped] = Field(default_factory=list, description="values or configs not run, and why")


class WorkloadRecord(Strict):
    config: str
    workload: str = Field(description="the config's train.workload")
    overrides: list[str] = Field(default_factory=list, description="--set, as given")
    data: str | None = None


class AnswerRecord(Strict):
    path: str = Field(description="the search's best.yaml, trained alone as every other run")
    run: OracleRun
    passed: bool
    answer_over_oracle: float | None = Field(description="the answer's tok/s over the oracle's")


class OracleRecord(Strict):
    workload: WorkloadRecord
    card: str = Field(description="torch.cuda.get_device_name, or cpu")
    date: str
    commit: str | None
    limit: LossLimit | None = Field(
        None, description="the baseline's loss limit, by tuner/rules/loss_limit.py"
    )
    sample: SampleStatement
    points: list[PointRecord] = Field(default_factory=list)
    runs: list[OracleRun] = Field(default_factory=list, description="every config trained, in order")
    oracle: OracleRun | None = Field(None, description="the fastest run with status ok within the limit")
    answer: AnswerRecord | None = None


def read_runs(path: Path) -> dict[str, OracleRun]:
    """The runs an earlier sitting recorded in `path` (none where it does not exist), by key; ConfigError
    where it is not an oracle record, before any run: a rerun would otherwise overwrite it."""
    if not path.exists():
        return {}
    try:
        record = OracleRecord.model_validate(json.loads(path.read_text()))
    except (ValueError, ValidationError) as err:
        first = str(err).splitlines()[0]
        raise ConfigError(
            f"{path} is not an oracle record ({first}): move it away or pick another --out"
        ) from None
    return {run.key: run for run in record.runs}


def write(record: OracleRecord, out: Path) -> None:
    """oracle.json and oracle.md, each replaced whole (a kill mid-write leaves the last whole one)."""
    for name, text in (("oracle.json", record.model_dump_json(indent=1)), ("oracle.md", table(record))):
        partial = out / f".{name}.partial"
        partial.write_text(text + "\n")
        partial.replace(out / name)


def _num(value: float | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def _knobs(knobs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in knobs.items()) or "(the baseline's)"


def table(record: OracleRecord) -> str:
    """The record for a reader: the limit, the oracle and the answer, then every run and every point."""
    lines = [f"# Oracle: {record.workload.config} on {record.card}", ""]
    lines.append(f"{record.date}, commit {record.commit or 'unknown'}.")
    lines.append(
        f"Loss {record.limit.sentence() if record.limit else 'limit: the baseline has not trained'}."
    )
    if record.oracle:
        o = record.oracle
        lines.append(
            f"**Oracle**: {_knobs(o.knobs)}: {_num(o.tokens_per_s, ',.0f')} {o.unit}/s, val loss "
            f"{_num(o.val_loss, '.4f')}."
        )
    if record.answer:
        a = record.answer
        lines.append(
            f"**Answer** ({a.path}): {_num(a.run.tokens_per_s, ',.0f')} {a.run.unit}/s, val loss "
            f"{_num(a.run.val_loss, '.4f')} ({'passes' if a.passed else 'fails'}), "
            f"**{_num(a.answer_over_oracle, '.3f')}x** the oracle."
        )
    lines += ["", "| run | roles | knobs | status | tok/s | val loss | passed | compile s | wall s |"]
    lines.append("|" + "---|" * 9)
    for r in record.runs:
        lines.append(
            f"| {r.key} | {', '.join(r.roles)} | {_knobs(r.knobs)} | {r.status} "
            f"| {_num(r.tokens_per_s, ',.0f')} "
            f"| {_num(r.val_loss, '.4f')} | {'—' if r.passed is None else ('✓' if r.passed else '✗')} "
            f"| {_num(r.compile_s, '.1f')} | {r.wall_s:.0f} |"
        )
    lines += ["", "| point | batch | peak lr | passed | why |", "|---|---|---|---|---|"]
    lines += [
        f"| {_knobs(p.knobs)} | {p.batch} | {p.peak_lr:g} | {'✓' if p.passed else '✗'} | {p.why} |"
        for p in record.points
    ]
    if record.sample.skipped:
        lines += ["", "Not run:", *(f"- {s.what}: {s.why}" for s in record.sample.skipped)]
    return "\n".join(lines)
