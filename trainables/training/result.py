"""What one training run measured: `RunResult`, each figure declared once, as a field that says what it is.

`trainables.training.loop.train` returns a RunResult; `python -m trainables.train --json` prints its `metrics()`,
and the run's result.json is `as_json()`. A Ray trial reports a `TrialResult` (the same figures, plus the
few only its trainable measures) as its metrics dict, and the search's ledger row keeps every field of it
that `tuner/state/trial_rows.py:NOT_IN_ROW` does not name (tests/test_records.py fails on a field with no home).
Adding a measured figure is one field here (and one in tuner/state/records.py:TrialRow, or a line in NOT_IN_ROW)
plus the code that measures it: a figure the loop sets without a field here is a TypeError, not a loss.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any, Literal

from trainables.common.progress import one_of, per_second
from trainables.training.cache_use import CacheUse
from trainables.training.profile import Profile

RunStatus = Literal["ok", "oom", "nan", "error", "timeout"]


def figure(doc: str, default: Any = None, *, interim: bool = False) -> Any:
    """A measured figure: `doc` says what it is; `interim` ones also travel with each interim report
    (where and when the run is being timed, and its speed so far), so a trial the search stops early
    still has a telemetry window."""
    return field(default=default, metadata={"doc": doc, "interim": interim})


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """One run of the training loop: how it ended, what it measured, and where and when it was timed.
    None is 'not measured' (the run ended before it could be)."""

    status: RunStatus = figure("ok, or how it failed: oom, nan (non-finite loss), error, timeout", "ok")
    error: str | None = figure("the failure in one line (None when ok)")
    device: str | None = figure("the torch device it trained on ('cuda:0', 'cpu')")
    gpu: int | None = figure("its CUDA device index (a Ray trial reports Ray's GPU id instead)")
    node: str | None = figure("the host name it ran on", interim=True)
    pid: int | None = figure("its process id (telemetry tells its GPU use from others' by it)", interim=True)
    unit: str = figure(
        "what its speeds and counts count, the workload's unit: tokens (an LM), images, examples ...; every "
        "field named for tokens (tokens_per_s, tokens, window_tokens, flops_per_token) counts it",
        "tokens",
        interim=True,
    )
    tokens_per_s: float | None = figure(
        "steady-state units (tokens for an LM)/s over the timed window (the whole run's rate when too short "
        "to have one)",
        interim=True,
    )
    val_loss: float | None = figure("mean loss over the fixed validation examples at the last eval")
    val_metrics: dict[str, float] | None = figure(
        "the workload's own figures at the last eval (its metrics(model, batch), e.g. accuracy), each "
        "averaged over the validation examples (None: it declares none)"
    )
    train_loss: float | None = figure("mean training loss since the previous log point")
    peak_mem_mb: float | None = figure("this run's peak memory, MB (CUDA: allocated; CPU: peak RSS)")
    steps: int = figure("optimizer steps taken", 0)
    tokens: int = figure("tokens trained on", 0)
    compile_s: float | None = figure("one-off cost of the warm-up steps over steady ones (compile, autotune)")
    warmup_s: float | None = figure("seconds of the warm-up steps (timing_warmup_steps), waits excluded")
    compile_cache_use: CacheUse | None = figure("whether its compiled graphs came from Inductor's cache")
    step_ms_median: float | None = figure("median steady step time, ms")
    step_ms_p90: float | None = figure("90th percentile steady step time, ms")
    window_t0: float | None = figure("wall-clock (time.time) start of the timed window", interim=True)
    window_t1: float | None = figure("wall-clock end of the timed window so far", interim=True)
    window_tokens: int = figure("tokens trained inside the timed window", 0, interim=True)
    cpu_own_cores: float | None = figure(
        "CPU cores this run (with its workers) kept busy over the window", interim=True
    )
    cpu_others_cores: float | None = figure(
        "CPU cores other processes kept busy over the window", interim=True
    )
    cpu_count: int | None = figure("the host's CPU count", interim=True)
    cpu_threads: int | None = figure("torch's CPU (intra-op) threads it ran with")
    compile_threads: int | None = figure("Inductor's compile workers it ran with (None: Inductor not loaded)")
    params: int | None = figure("the model's parameter count")
    flops_per_token: float | None = figure(
        "training FLOPs per token, forward + backward (trainables/workloads/flops.py)"
    )
    flops_source: str | None = figure(
        "where flops_per_token comes from: 'workload' (its own flops_per_token(model)) or '6 x parameters'"
    )
    peak_flops: float | None = figure(
        "the device's dense peak FLOP/s at the run's precision (None: a CPU, or a GPU not in the table)"
    )
    mfu: float | None = figure("model FLOPs utilisation: tokens_per_s x flops_per_token / peak_flops (0..1)")
    profile: Profile | None = figure(
        "where a step's time goes, from profile_steps steps after the timed window (trainables/training/profile.py)"
    )
    history: tuple[dict[str, Any], ...] = figure(
        "each eval point: step, tokens, train_loss, val_loss (and the workload's metrics)", ()
    )
    wall_s: float | None = figure("seconds from the call of train() to its return")

    def mfu_line(self, precision: str) -> str:
        """The run's closing log line on its MFU ("" where it has none)."""
        if self.mfu is None or self.peak_flops is None:  # an MFU has its peak
            return ""
        return (
            f"MFU {self.mfu:.1%}: {self.flops_per_token:.3g} training FLOPs per {one_of(self.unit)} "
            f"({self.flops_source}) x {self.tokens_per_s:,.0f} {per_second(self.unit)} against a dense "
            f"{precision} peak of {self.peak_flops / 1e12:g} TFLOP/s"
        )

    def as_json(self) -> dict[str, Any]:
        """Every field, JSON-ready (the run's result.json)."""
        return {**asdict(self), "history": [dict(point) for point in self.history]}

    def metrics(self) -> dict[str, Any]:
        """The figures, all but the eval history: what `--json` prints and a trial reports to Ray (a record
        among them, the profile, as plain values)."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self) if f.name != "history"}

    def interim(self) -> dict[str, Any]:
        """The figures that travel with every interim report (`figure(..., interim=True)`)."""
        return {name: getattr(self, name) for name in INTERIM_FIELDS}


def _plain(value: Any) -> Any:
    return asdict(value) if is_dataclass(value) and not isinstance(value, type) else value


INTERIM_FIELDS = tuple(f.name for f in fields(RunResult) if f.metadata["interim"])


@dataclass(frozen=True)
class TrialResult(RunResult):
    """A run as a Ray trial reports it (trainables/trainable.py): the loop's figures (`gpu` being Ray's
    GPU id, `tokens_per_s` 0 for a failed run so the searcher avoids its region) and what only the
    trainable measures: where Ray placed it, its wait at the GPU's timing gate and the cache sync."""

    node_id: str | None = figure("the Ray node id it ran on (what telemetry and node loss are keyed by)")
    gate_wait_s: float | None = figure("seconds it waited for its GPU while another run was timed there")
    compiling_beside: int | None = figure("other runs on its GPU that were compiling while it was timed")
    cache_sync: str | None = figure("what syncing this node's compile caches with the driver's did")

    @classmethod
    def of(cls, run: RunResult, **trial: Any) -> TrialResult:
        """`run` with the trainable's own figures (and any of the loop's it overrides, such as `gpu`)."""
        return cls(**{**{f.name: getattr(run, f.name) for f in fields(RunResult)}, **trial})
