"""The typed records that cross module boundaries in the search: a trial row, a finalist, the summary.

summary.json is `Summary.model_dump_json()`; docs/summary.schema.json is `Summary.model_json_schema()`
(tests/test_records.py keeps the two in step). Every phase produces `TrialRow`s, selection reads them,
and the reports read a `Summary` only, so a report can be rebuilt from a saved summary.json.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal, overload

from pydantic import ConfigDict, Field, model_validator

from trainables.training.cache_use import CacheUse
from trainables.training.profile import Profile
from tuner.rules.loss_limit import LossLimit
from tuner.rules.record_base import Record
from tuner.state.gpu_records import GpuPopulation, GpuUsage, TelemetrySummary
from tuner.state.loss_outcome import LossCheckOutcome
from tuner.state.older_summaries import with_loss_limit
from tuner.state.selection_record import SelectionResult

Status = Literal["ok", "oom", "nan", "error", "timeout", "stopped"]
FAILED_STATUSES = frozenset({"oom", "nan", "error", "timeout"})
BASELINE_ID = "baseline"
BESIDE_PHASE = "loss_check_beside"  # the ledger of the baseline's loss run trained beside the screen
AHEAD_PHASE = "loss_check_ahead"  # the ledger of candidates' loss runs trained beside the screen
NODE_ID_SHOWN = 8  # a Ray node id is 56 hex digits; its first 8 tell a cluster's nodes apart


@overload
def short_node_id(node_id: str) -> str: ...
@overload
def short_node_id(node_id: None) -> None: ...
@overload
def short_node_id(node_id: str | None) -> str | None: ...


def short_node_id(node_id: str | None) -> str | None:
    """How logs and reports name a node: the first NODE_ID_SHOWN characters of its Ray node id."""
    return node_id[:NODE_ID_SHOWN] if node_id else node_id


class TrialRun(Record):
    """What a run ran and what its training loop measured: the first fields of a TrialRow (split off to keep
    each class short; a TrialRow holds them first, as before)."""

    # identity
    id: str = Field(description="unique in a search: <phase>-<n>, or 'baseline'")
    phase: str = Field(description="baseline, probe, screen, loss_check_<round>, remeasure")
    config: dict[str, Any] = Field(default_factory=dict, description="the knobs this run set")
    train: dict[str, Any] = Field(default_factory=dict, description="the full training config it ran")
    case: int | None = Field(None, description="index of its config in the phase's list of cases")
    repeat: int | None = Field(None, description="repeat number of that case")
    ray_trial_id: str | None = None
    spec_key: str | None = Field(
        None,
        description="the identity of the run it was asked for (its config, labels and role; "
        "tuner/runs/request.py:spec_key): what --resume finds a finished run by (None: written before it)",
    )
    path: str | None = Field(None, description="the Ray Tune trial folder (TensorBoard events)")

    # outcome, from the training loop
    status: Status = "ok"
    error: str | None = None
    tokens_per_s: float | None = Field(None, description="steady-state units/s (summary.json's unit)")
    val_loss: float | None = None
    val_metrics: dict[str, float] | None = Field(
        None, description="the workload's own val figures at its last eval (its metrics(), e.g. accuracy)"
    )
    train_loss: float | None = None
    peak_mem_mb: float | None = None
    compile_s: float | None = Field(None, description="one-off cost of the warm-up steps over steady ones")
    warmup_s: float | None = None
    compile_cache_use: CacheUse | None = Field(
        None, description="whether its compiled graphs came from the compile cache (Inductor's counters)"
    )
    step_ms_median: float | None = None
    step_ms_p90: float | None = None
    steps: int | None = None
    tokens: int | None = None
    wall_s: float | None = None
    flops_per_token: float | None = Field(None, description="training FLOPs per token (forward + backward)")
    flops_source: str | None = Field(
        None, description="'workload' (its own flops_per_token) or '6 x parameters' (it declares none)"
    )
    peak_flops: float | None = Field(
        None,
        description="its GPU's dense peak FLOP/s at its precision (None: a CPU, or a GPU not in the table)",
    )
    mfu: float | None = Field(
        None, description="model FLOPs utilisation, 0..1: tokens_per_s x flops_per_token / peak_flops"
    )
    profile: Profile | None = Field(
        None,
        description="where a step's time goes: compute / memory / launch bound, the device's busy share, the "
        "top ops (re-measure runs of the finalists; trainables/training/profile.py)",
    )


class TrialRow(TrialRun):
    """One training run the search made: what it ran, what it measured, and the verdicts it earned."""

    # where and when it was timed
    node: str | None = None
    node_id: str | None = None
    gpu: int | None = None
    pid: int | None = None
    window_t0: float | None = None
    window_t1: float | None = None
    window_tokens: int | None = None
    cpu_own_cores: float | None = None
    cpu_others_cores: float | None = None
    cpu_count: int | None = None
    cpu_threads: int | None = None
    compile_threads: int | None = None
    cpu_shared: bool | None = Field(None, description="other processes contended for the CPUs")
    gate_wait_s: float | None = Field(
        None, description="seconds it waited for its GPU while another run was timed there"
    )
    compiling_beside: int | None = Field(
        None, description="other runs on its GPU that were compiling while it was timed"
    )

    # the GPU's view of the timed window (telemetry join)
    gpu_util_mean: float | None = None
    gpu_power_mean_w: float | None = None
    energy_j: float | None = None
    energy_source: str | None = None
    joules_per_token: float | None = None
    gpu_temp_max_c: float | None = None
    throttled_share: float | None = None
    slowdown_share: float | None = None
    shared: bool | None = Field(None, description="another process used the GPU in the window")
    telemetry_samples: int | None = None
    telemetry_trusted: bool | None = None
    telemetry_note: str | None = None
    timeline: dict[str, Any] | None = Field(None, description="downsampled GPU samples (kept for plots)")

    # verdicts
    feasible: bool | None = Field(None, description="val loss within the limit (None = never checked)")
    loss_checked_by: str | None = Field(None, description="id of the run whose val loss stands for this one")
    screen_id: str | None = Field(None, description="loss checks: the screen trial checked")
    finalist: str | None = Field(None, description="re-measure: the finalist this run measured")
    execution: dict[str, Any] | None = Field(
        None, description="loss runs: the speed-only knobs it trained with (its loss key's fastest twin's)"
    )
    twin_of: str | None = Field(None, description="loss runs: the screen trial whose execution it borrowed")

    def with_verdict(self, loss_limit: LossLimit) -> TrialRow:
        """This loss run's row with the loss limit's verdict on it."""
        return self.model_copy(update={"feasible": loss_limit.verdict(self)})

    def speed_only(self) -> TrialRow:
        """This short speed run's row without its val loss, which means nothing after so few steps."""
        return self.model_copy(update={"val_loss": None})

    @property
    def phase_name(self) -> str:
        """The phase without its round (loss_check_0 -> loss_check; loss_check_ahead, the loss runs trained
        ahead of the rounds, beside the screen -> loss_check)."""
        return re.sub(r"_(\d+|ahead)$", "", self.phase)

    @property
    def failed(self) -> bool:
        return self.status in FAILED_STATUSES

    @property
    def contended(self) -> bool:
        """Its timed window was shared with other work (CPUs or its GPU): its speed says more about the
        load than about its config, so the answer is never taken from it (a throttled clock or too few
        telemetry samples make only its energy figure untrusted)."""
        return bool(self.cpu_shared or self.shared)

    @property
    def judged(self) -> bool:
        """Whether its timed window recorded who else used the machine: the CPU shares (a window under
        trainables/cpu_load.MIN_WINDOW_S records none) or the GPU telemetry's verdict (a contended one was
        judged by definition)."""
        return self.contended or self.cpu_others_cores is not None or self.shared is not None


class Finalist(Record):
    """A re-measured config: the speed of each of its timed runs and the loss verdict it carries."""

    id: str
    config: dict[str, Any] = Field(default_factory=dict)
    runs: list[float] = Field(
        default_factory=list,
        description="tok/s of each successful re-measure run whose window was not contended; only when "
        "every window was contended, those (and speed_trusted is false)",
    )
    contended_runs: list[float] = Field(
        default_factory=list, description="tok/s of the runs left out of `runs`: their window was contended"
    )
    not_timed: int | None = Field(
        None,
        description="runs the re-measure asked of it that never ran (None: a summary from before this was "
        "recorded, whose report counts its rows)",
    )
    settled: str | None = Field(
        None,
        description="the baseline: why its runs in not_timed were left out, its figure no longer able to "
        "change the answer (tuner/phases/remeasure.py: baseline_settled)",
    )
    speed_trusted: bool = Field(
        True,
        description="false: every timed window of it was contended, so `runs` are those figures, or none "
        "of its uncontended ones recorded the CPU load (too short to judge) while other windows of the "
        "re-measure were contended",
    )
    val_loss: float | None = None
    feasible: bool | None = None
    joules_per_token: float | None = None
    telemetry_trusted: bool | None = None
    warmup_s: float | None = Field(
        None,
        description="compile + warm-up seconds with the search's caches warm: the shortest of its re-measure "
        "runs and the screen's and loss check's cache hits of its graph",
    )
    warmup_beside: int | None = Field(
        None,
        description="runs on its node warming up while the run behind warmup_s warmed up (0: alone, as "
        "best.yaml's run warms up; more: warmup_s may overstate it; None: not known)",
    )
    warmup_cold_s: float | None = Field(
        None, description="compile + warm-up with an empty cache: the longest screen run of the same graph"
    )
    time_to_train_s: float | None = Field(
        None,
        description="the planned run (train.tokens): warm-up as best.yaml's run pays it + tokens / tok/s",
    )


class BreakEven(Record):
    """How long a run must be before a compile mode's one-off cost pays for itself against eager."""

    compile: str
    compile_scope: str | None = Field(None, description="model or blocks (compiled one by one); None: eager")
    config_id: str = Field(description="the fastest feasible screened config of this compile mode")
    versus_id: str = Field(
        description="the fastest feasible screened config without compile, else the baseline when it is eager"
    )
    tokens_per_s: float
    versus_tokens_per_s: float
    warmup_cold_s: float | None = None
    warmup_warm_s: float | None = None
    tokens_cold: float | None = Field(None, description="run length (tokens) where cold compile pays off")
    tokens_warm: float | None = Field(None, description="the same with the search's caches warm")


class BaselineResult(Record):
    config: dict[str, Any] = Field(default_factory=dict, description="the full baseline training config")
    tokens_per_s: float | None = Field(None, description="median of its re-measure runs (its own config)")
    tokens_per_s_full_run: float | None = Field(None, description="speed of its loss run (its twin's)")
    val_loss: float | None = None
    val_metrics: dict[str, float] | None = Field(
        None, description="the workload's own val figures of its loss run (its metrics(): accuracy, ...)"
    )
    loss_execution: dict[str, Any] | None = Field(
        None, description="the speed-only knobs its loss run trained with (None: its own)"
    )


class Best(Record):
    id: str
    config: dict[str, Any] = Field(default_factory=dict)
    tokens_per_s: float | None = None
    tokens_per_s_spread: list[float] = Field(default_factory=list, description="[min, max] of its runs")
    val_loss: float | None = None
    val_metrics: dict[str, float] | None = Field(
        None, description="the workload's own val figures of the loss run that judged it (accuracy, ...)"
    )
    speedup: float | None = None
    speedup_one_run: list[float] = Field(
        default_factory=list,
        description="[low, high]: where one run of it and one of the baseline, outside the search, should "
        "put their tok/s ratio (95% prediction interval from the re-measure runs' spread; tuner/decide/ratio.py)",
    )
    speedup_one_run_note: str | None = Field(
        None, description="why there is no such range: too few re-measure runs for a meaningful one"
    )
    warmup_s: float | None = Field(None, description="compile + warm-up with the search's caches")
    time_to_train_s: float | None = Field(None, description="the planned run, compile + warm-up included")


class RecipeResult(Record):
    """The usual hand recipe (tuner/space/recipe.py) as this search timed and judged it."""

    knobs: dict[str, Any] = Field(
        description="the recipe as it ran here (knobs the hardware cannot run left out)"
    )
    trial: str | None = Field(None, description="its screen run (None: the screen did not finish it)")
    tokens_per_s: float | None = Field(None, description="its screen figure")
    val_loss: float | None = None
    feasible: bool | None = Field(None, description="its loss verdict (None: never checked)")
    yaml: str | None = Field(None, description="OUT/recipe.yaml: it as a train config, to run alone")


class Summary(Record):
    """summary.json: the answer (`best`, None when the baseline stays), the evidence, how it was measured."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, title="hybrid-tuner summary.json")

    baseline: BaselineResult = Field(default_factory=BaselineResult)
    best: Best | None = None
    unit: str = Field(
        "tokens",
        description="what the workload counts (tokens for an LM; images, examples, ...): every figure named "
        "for tokens (tokens_per_s, tokens, planned_tokens, joules_per_token, flops_per_token) counts it",
    )
    untrusted: bool = Field(
        False,
        description="a speed figure the answer gives (the winner's, the baseline's) rests on untrusted "
        "windows only (Finalist.speed_trusted false); where a feasible finalist besides the baseline was "
        "timed, no winner was crowned on them and the baseline stays the answer (exit 4)",
    )
    nothing_screened: str | None = Field(
        None,
        description="why the screen finished no config (exit 6): only the baseline was loss-checked and "
        "re-measured, and it stays the answer",
    )
    remembered: dict[str, str] | None = Field(
        None,
        description="a confirmation: the earlier search on this machine whose probe, screen and loss check "
        "this one took (out, when, fingerprint); only the re-measure is its own",
    )
    trials: list[TrialRow] = Field(default_factory=list)
    loss_limit: LossLimit | None = Field(None, description="the limit every loss verdict was given against")
    hardware: dict[str, Any] = Field(default_factory=dict)
    versions: dict[str, str] = Field(default_factory=dict)
    timings: dict[str, float] = Field(default_factory=dict, description="seconds per phase")
    selection: SelectionResult = Field(default_factory=SelectionResult)
    notices: list[str] = Field(default_factory=list)
    telemetry: TelemetrySummary = Field(default_factory=TelemetrySummary)
    command: str | None = None
    best_yaml: str | None = None
    measurement: dict[str, Any] = Field(default_factory=dict)
    early_stop_ratio: float | None = Field(
        None,
        description="search.early_stop_ratio as the screen applied it: a trial timed under this x the fastest "
        "finished so far was stopped (0: none was; None: a summary from before it was recorded)",
    )
    planned_tokens: int | None = Field(None, description="train.tokens: the run the answer is for")
    compile_cache: str | None = Field(
        None, description="the search's Inductor/Triton caches (best.yaml uses them)"
    )
    finalists: list[Finalist] = Field(default_factory=list)
    recipe: RecipeResult | None = Field(None, description="the usual hand recipe, timed in the screen")
    loss_check: LossCheckOutcome | None = Field(
        None, description="how the loss check ended, and the faster configs a cap left unchecked"
    )
    break_even: list[BreakEven] = Field(default_factory=list)
    gpu_usage: list[GpuUsage] = Field(default_factory=list, description="each GPU's use, per phase")
    gpu_population: list[GpuPopulation] = Field(
        default_factory=list, description="hosts whose GPUs re-measured the same configs: do they agree"
    )
    knobs_left_out: list[str] = Field(
        default_factory=list,
        description="knobs the workload does not implement (e.g. kernels): out of the space, best.yaml and "
        "the report",
    )

    @property
    def refused(self) -> bool:
        """No winner crowned on untrusted figures (exit 4): untrusted while a feasible finalist besides the
        baseline was timed. Without one the baseline stays for its loss check (exit 3) or because the screen
        finished nothing (exit 6), its untrusted figure said so all the same."""
        return self.untrusted and bool(could_win(self.finalists))

    @model_validator(mode="before")
    @classmethod
    def _older_loss_limit(cls, data: Any) -> Any:
        return with_loss_limit(data)


def could_win(finalists: list[Finalist]) -> list[Finalist]:
    """The finalists a winner is crowned among besides the baseline: feasible, with a timed run."""
    return [f for f in finalists if f.feasible is True and f.id != BASELINE_ID and f.runs]


def summary_schema() -> dict[str, Any]:
    """The JSON Schema of summary.json (docs/summary.schema.json: `python -m tuner.state.records`)."""
    return Summary.model_json_schema()


if __name__ == "__main__":
    print(json.dumps(summary_schema(), indent=1))
