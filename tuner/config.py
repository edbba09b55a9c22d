"""The search config: the training job to tune (`train:`), the space, the quality rule and the resources.

Validated with pydantic before Ray starts; every mistake is one line naming the key (`ConfigError`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    ValidationError,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import ErrorDetails

from trainables.config import (
    ConfigError,
    TrainConfig,
    apply_overrides,
    make_config,
    read_yaml,
    unknown_key,
    with_workload_paths,
)
from tuner.rules.batch_pairs import batch_pairs
from tuner.rules.horizon import LossHorizon, parse_tokens
from tuner.rules.loss_limit import LossLimit, ToleranceFrom


class Range(BaseModel):
    """A numeric range; `log` samples log-uniformly; `integer` draws whole numbers."""

    model_config = ConfigDict(extra="forbid")
    low: float
    high: float
    log: bool = False
    integer: bool = False

    @model_validator(mode="after")
    def _ordered(self):
        if not self.low < self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        if self.log and self.low <= 0:
            raise ValueError("a log range needs low > 0")
        return self


Knob = list[Any] | Range
# The usual hand recipe (SearchSection.recipe's default): what an engineer tries first on any training
# script: bf16 autocast, torch.compile, fused AdamW, the batch, lr and token budget left as they are.
RECIPE: dict[str, Any] = {"precision": "bf16", "compile": "default", "fused_adamw": True}
# TrainConfig fields that say what is trained or where, never searched.
NOT_KNOBS = ("model", "workload", "workload_path", "data", "out_dir", "device")
# What a choice is checked beside to check it alone: a micro_batch against a batch of 1 (it is at least that),
# not the default batch 8; its pairs with the config's batches are checked on the whole config (batch_pairs).
ALONE: dict[str, dict[str, Any]] = {"micro_batch": {"batch_size": 1}}


class SearchSpace(BaseModel):
    """The keys of `search:` that say what the screen searches and tries first, and their checks: a base of
    SearchSection, which holds its keys first, as they were before it was split off."""

    model_config = ConfigDict(extra="forbid")
    space: dict[str, Knob] = Field(default_factory=dict, description="knob -> list of choices or a range")
    start_points: list[dict[str, Any]] = Field(
        default_factory=list, description="configs the screen tries first (e.g. ones tuned by hand)"
    )
    recipe: dict[str, Any] | None = Field(
        default_factory=lambda: dict(RECIPE),
        description="the usual hand recipe, knob -> value, at the baseline's batch, lr and token budget: "
        "always a start point of the screen (its knobs join the space), and OUT/recipe.yaml, so the answer "
        "can be held against it (tuner/space/recipe.py); null = none",
    )
    left_out: dict[str, str] = Field(
        default_factory=dict,
        description="choices left out of the space on purpose (e.g. 'kernels=fused') -> the one-line reason, "
        "which the report shows",
    )

    @field_validator("space")
    @classmethod
    def _knobs(cls, space: dict[str, Knob]) -> dict[str, Knob]:
        fields = TrainConfig.model_fields
        for name, knob in space.items():
            if name not in fields or name in NOT_KNOBS:
                raise ValueError(f"unknown knob {name!r} (a knob is a train key, e.g. batch_size, precision)")
            if isinstance(knob, list):
                if not knob:
                    raise ValueError(f"knob {name!r} has no choices")
                for choice in knob:  # each choice must be a valid value of the field
                    try:
                        TrainConfig(**{**ALONE.get(name, {}), name: choice})
                    except ValidationError as err:
                        msg = err.errors()[0]["msg"]
                        raise ValueError(f"knob {name!r}: choice {choice!r}: {msg}") from None
        return space

    @field_validator("recipe")
    @classmethod
    def _recipe_knobs(cls, recipe: dict[str, Any] | None) -> dict[str, Any] | None:
        for name, value in (recipe or {}).items():
            if name not in TrainConfig.model_fields or name in NOT_KNOBS:
                raise ValueError(f"unknown knob {name!r} (a knob is a train key, e.g. precision, compile)")
            try:
                TrainConfig(**{**ALONE.get(name, {}), name: value})
            except ValidationError as err:
                raise ValueError(f"knob {name!r}: {value!r}: {err.errors()[0]['msg']}") from None
        return recipe

    @model_validator(mode="after")
    def _points_in_space(self):
        for point in self.start_points:
            for name in point:
                if name not in self.space:
                    raise ValueError(f"start point knob {name!r} is not in the search space")
        return self


class SearchSection(SearchSpace):
    trials: int = Field(16, gt=0, description="speed-screen trials")
    screen_steps: int = Field(20, gt=0, description="steady-state steps per screen trial")
    loss_check_top: int = Field(4, ge=0, description="fastest distinct-loss configs to loss-check")
    max_loss_checks: int | None = Field(
        None,
        ge=0,
        description="cap on loss runs (default 2 x loss_check_top) once a config faster than the baseline "
        "passed; until one has, loss_check_time bounds them",
    )
    loss_check_time: str | None = Field(
        None,
        description="e.g. 5m: while no config faster than the baseline has passed, the loss check goes on "
        "past max_loss_checks as long as its runs' estimated time (tokens / screened speed + warm-up) fits "
        "this; default: as long as the baseline's own loss run took, at least 2 minutes (one more training "
        "run of the baseline, the wait a user accepts to learn whether a faster config trains as well)",
    )
    remeasure_top: int = Field(2, gt=0, description="feasible configs re-measured exclusively")
    repeats: int = Field(3, gt=0, description="exclusive re-measurements per finalist")
    baseline_repeats: int | None = Field(
        None,
        gt=0,
        description="exclusive re-measurements of the baseline (default: repeats); it is the denominator of "
        "every speed-up, and a launch-bound run varies ~8% from one process to the next",
    )
    seed: int = 0
    time_budget: str | None = Field(
        None,
        description="e.g. 20m, 1h30m, 90s: GPU time of the screen, which stops proposing after it; N GPUs "
        "spend it in 1/N of the wall time (held open while a start point is still running)",
    )
    compile_deadline: str | None = Field(
        None,
        description="e.g. 3m: a screen trial whose first step (compile, autotuning) takes longer gives up "
        "(status timeout), so a cold max-autotune does not hold a slot for the whole screen",
    )
    early_stop_ratio: float = Field(
        0.5, ge=0, lt=1, description="stop a screen trial slower than this x best"
    )
    probe_batch: bool = Field(True, description="bound batch_size by an OOM probe per precision")
    max_batch: int = Field(4096, gt=0)
    storage: str | None = Field(None, description="Optuna RDB URL; default: a journal file in OUT")
    telemetry_hz: float = Field(5.0, ge=0, le=100, description="NVML samples per second per GPU; 0 = off")
    cache_dir: str | None = Field(
        None,
        description="root of the compile caches (Inductor, Triton, autotune results), kept across searches, "
        "one subdir per GPU and software version; default: the user's cache dir (hybrid-tuner/compile, "
        "or $TUNER_CACHE_DIR/compile); e.g. shared storage on a cluster. --cache-dir wins",
    )

    @property
    def time_budget_s(self) -> float | None:
        """`time_budget` in seconds (it is kept as written, for the report and --resume's check)."""
        return parse_duration(self.time_budget) if self.time_budget else None

    @property
    def compile_deadline_s(self) -> float | None:
        return parse_duration(self.compile_deadline) if self.compile_deadline else None

    @property
    def loss_check_time_s(self) -> float | None:
        return parse_duration(self.loss_check_time) if self.loss_check_time else None

    @model_serializer(mode="wrap")
    def _added_later_left_out(self, handler: Any) -> dict[str, Any]:
        """Fields added after searches were remembered are not written while unset (None): a config that does
        not set them dumps, and fingerprints (tuner/state/answers.py), as it did before they existed."""
        return {k: v for k, v in handler(self).items() if not (k in ADDED_LATER and v is None)}

    @field_validator("time_budget", "compile_deadline", "loss_check_time", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> str | None:
        if isinstance(v, int | float) and not isinstance(v, bool):
            v = str(v)  # plain seconds: `--time-budget 90` and YAML's `compile_deadline: 120` are numbers
        if isinstance(v, str) and parse_duration(v) <= 0:
            raise ValueError(f"{v!r} is no time at all (give a duration above zero, e.g. 90s, 20m)")
        return v

    @property
    def baseline_runs(self) -> int:
        """How many times the re-measure times the baseline."""
        return self.baseline_repeats or self.repeats

    def remeasure_runs(self, confirming: bool) -> tuple[int, int]:
        """(the baseline's runs, each finalist's) in the re-measure. A confirmation of a remembered answer
        times at most 3 and 2: it checks an answer whose spreads the remembered search measured already, and
        its 15 runs of a fresh search (the default's) were 102-116 s of a 121-132 s confirmation on one H200,
        their warm-ups contending and the baseline's six ~8 s windows last, one at a time."""
        if confirming:
            return min(self.baseline_runs, CONFIRM_RUNS[0]), min(self.repeats, CONFIRM_RUNS[1])
        return self.baseline_runs, self.repeats


ADDED_LATER = frozenset({"loss_check_time"})  # SearchSection fields written only where set
CONFIRM_RUNS = (3, 2)  # a confirmation's re-measure: at most 3 runs of the baseline, 2 of each finalist


class QualitySection(BaseModel):
    """The loss rule's settings (the rule itself: tuner/rules/loss_limit.py). When the config sets neither
    `tolerance` nor `mode`, the workload's `loss_tolerance` ('relative', 0.05) stands in for them where it
    declares one (`with_workload_default`), else 0.05 absolute; a config that sets either owns both."""

    model_config = ConfigDict(extra="forbid")
    tolerance: float = Field(
        0.05,
        ge=0,
        description="allowed val-loss increase over the baseline: in the loss's units (nats for a "
        "cross-entropy) when mode is absolute, a fraction of the baseline's loss when relative",
    )
    mode: Literal["absolute", "relative"] = Field(
        "absolute",
        description="absolute: limit = baseline + tolerance; relative: limit = baseline x (1 + tolerance)",
    )
    tolerance_from: ToleranceFrom = Field(
        "default",
        description="where tolerance and mode came from: config (it sets either), workload (its "
        "loss_tolerance, the config setting neither), default; the search sets it, state.json keeps it",
    )
    loss_horizon: int | None = Field(
        None,
        description="the loss budget, in tokens (20000000, '20M'): when train.tokens is longer, the baseline "
        "(two seeds) and every contender train this prefix of the planned run and are compared there "
        "(tuner/rules/horizon.py); None = the whole planned run",
    )

    @field_validator("loss_horizon", mode="before")
    @classmethod
    def _tokens(cls, value: Any) -> int | None:
        return None if value is None else parse_tokens(value)

    @model_validator(mode="after")
    def _set_by_the_config(self):
        if {"tolerance", "mode"} & self.model_fields_set and "tolerance_from" not in self.model_fields_set:
            self.tolerance_from = "config"
        return self

    def with_workload_default(self, declared: tuple[str, float] | None) -> QualitySection:
        """These settings with the workload's declared (mode, tolerance) in place of the defaults, where
        the config set neither (trainables/workloads/workload.py:WorkloadInfo.loss_tolerance); as they are else."""
        if declared is None or self.tolerance_from != "default":
            return self
        mode, tolerance = declared
        return self.model_copy(update={"mode": mode, "tolerance": tolerance, "tolerance_from": "workload"})

    def loss_limit(
        self, baseline_loss: float, horizon: LossHorizon | None = None, more_seeds: list[float] | None = None
    ) -> LossLimit:
        """The loss limit the baseline's val loss sets (at `horizon`, with its other seeds' losses there):
        every loss verdict of the search is its verdict."""
        return LossLimit.of(
            baseline_loss, self.tolerance, self.mode, horizon, more_seeds, self.tolerance_from
        )


class ResourcesSection(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cpus_per_trial: float = Field(1, gt=0)
    speed_runs_per_gpu: int = Field(
        4,
        ge=1,
        description="screen and re-measure runs sharing a GPU: their compile and warm-up overlap, their "
        "timed windows take turns (one at a time per GPU); memory-hungry batches get a larger share",
    )
    loss_check_gpu_fraction: float = Field(0.5, gt=0, le=1, description="GPU share for loss-check runs")
    max_concurrent: int | None = Field(None, gt=0, description="cap on concurrent loss-check trials")


class SearchConfig(BaseModel):
    """`train` is a TrainConfig, made once, when a SearchConfig is (loaded or rebuilt from state.json), so none
    holds a training job that cannot run. It serializes as the keys the user set (`exclude_unset`): the
    search's fingerprint, --resume's check and state.json read which keys were set, not every default."""

    model_config = ConfigDict(extra="forbid")
    train: TrainConfig = Field(default_factory=TrainConfig, description="the baseline training config")
    search: SearchSection = Field(default_factory=SearchSection)
    quality: QualitySection = Field(default_factory=QualitySection)
    resources: ResourcesSection = Field(default_factory=ResourcesSection)

    @field_validator("train", mode="before")
    @classmethod
    def _a_training_job(cls, train: Any) -> Any:
        if isinstance(train, dict):  # ConfigError: its one line, reported as it is (_one_line)
            return make_config(train, section="train")
        if not isinstance(train, TrainConfig):
            raise ValueError("must be a mapping of training keys")
        return train

    @model_validator(mode="after")
    def _batches_pair(self):
        if (said := batch_pairs(self.search.space, self.search.start_points, self.train)) is not None:
            raise ConfigError(said)
        return self

    @field_serializer("train")
    def _as_written(self, train: TrainConfig, info: SerializationInfo) -> dict[str, Any]:
        return train.model_dump(mode=info.mode, exclude_unset=True)

    def with_train(self, **values: Any) -> SearchConfig:
        """This config with `values` set on its train section, checked, and kept as set (as the user's are)."""
        train = make_config({**self.train.model_dump(exclude_unset=True), **values}, section="train")
        return self.model_copy(update={"train": train})


# Where a search config's keys live, by the section the user writes them under ('' is the top level).
SECTIONS: dict[str, type[BaseModel]] = {
    "": SearchConfig,
    "search": SearchSection,
    "quality": QualitySection,
    "resources": ResourcesSection,
}


def parse_duration(text: str) -> float:
    """'90s', '20m', '1h30m', '45' or '1.5' (seconds), '2.5s' -> seconds."""
    text = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?", text)
    if not parts or not any(parts.groups()):
        raise ValueError(f"bad duration {text!r} (use e.g. 90s, 20m, 1h30m, or plain seconds: 90)")
    h, m, s = (float(g or 0) for g in parts.groups())
    return h * 3600 + m * 60 + s


def _one_line(err: ValidationError) -> str:
    first = _reported(err.errors())
    if isinstance(said := first.get("ctx", {}).get("error"), ConfigError):
        return str(said)  # the train section's own line, which names its key (train.batch_size)
    tags = [str(p) for p in first["loc"] if "[" in str(p)]  # pydantic's names for a knob's two forms
    loc = [str(p) for p in first["loc"] if "[" not in str(p)]
    key = ".".join(loc) or "config"
    if first["type"] == "extra_forbidden":
        section = ".".join(loc[:-1])
        model = Range if any("Range" in t for t in tags) else SECTIONS.get(section)
        return unknown_key(key, model.model_fields if model else (), section)
    if first["type"] == "list_type" and tags:
        return f"config key {key!r}: expected a list of choices or a range {{low, high, log, integer}}"
    return f"config key {key!r}: {first['msg'].removeprefix('Value error, ')}"


def _reported(errors: list[ErrorDetails]) -> ErrorDetails:
    """The error to report: for a knob written as a mapping, what its range found wrong, not 'not a list'."""
    for error in errors:
        if any("Range" in str(p) for p in error["loc"]) and error["type"] != "model_type":
            return error
    return errors[0]


def load_search_config(path: str, overrides: Sequence[str] = (), data: str | None = None) -> SearchConfig:
    """Read and validate; `--set` keys address sections: search.trials=8, train.batch_size=16."""
    values = read_yaml(path)
    if isinstance(values.get("train"), dict):
        values["train"] = with_workload_paths(values["train"], Path(path).parent)
    values = apply_overrides(values, list(overrides))
    if isinstance(values.get("train"), dict):
        values["train"] = with_workload_paths(values["train"], Path.cwd())
    if data is not None:
        values.setdefault("train", {})["data"] = data
    try:
        cfg = SearchConfig(**values)  # the train section too: a bad key or value is refused here
    except ValidationError as err:
        raise ConfigError(_one_line(err)) from None
    if not cfg.search.space:
        raise ConfigError("config key 'search.space': empty search space (name at least one knob)")
    for name, knob in cfg.search.space.items():
        if isinstance(knob, Range) and not isinstance(TrainConfig.model_fields[name].default, int | float):
            raise ConfigError(f"config key 'search.space.{name}': a range needs a numeric knob")
    return cfg
