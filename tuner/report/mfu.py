"""MFU as both reports show it, beside tok/s: a config's tok/s x the FLOPs per token its runs counted ÷ the
dense peak of the GPU they ran on, at their precision (trainables/workloads/flops.py: the one formula and peak table).

Each run records its flops_per_token, flops_source and peak_flops; a figure shown here is the shown tok/s
(a re-measured median, the answer's, a finalist's) at those, so MFU and tok/s always agree. Summaries from
before runs recorded them, and searches on CPUs, show no MFU column.
"""

from __future__ import annotations

from collections.abc import Iterable

from trainables.workloads import flops
from tuner.report.fmt import DASH, is_num
from tuner.state.records import Summary, TrialRow

SOURCE_WORDS = {
    flops.FROM_WORKLOAD: "the workload's own count (its flops_per_token(model))",
    flops.FROM_PARAMETERS: "6 x parameters (the workload declares no count of its own: the usual estimate "
    "for a model whose work is its matmuls, so work beyond its parameters, such as attention's or a "
    "scan's, is left out and MFU reads low)",
}


def fmt_mfu(value: float | None) -> str:
    return f"{value:.1%}" if is_num(value) else DASH


def counted(runs: Iterable[TrialRow]) -> TrialRow | None:
    """The first run that recorded both what MFU divides: its FLOPs per token and its GPU's peak."""
    return next((t for t in runs if is_num(t.flops_per_token) and is_num(t.peak_flops)), None)


def mfu_at(tokens_per_s: float | None, runs: Iterable[TrialRow]) -> float | None:
    """MFU at `tokens_per_s` with the FLOPs per token and peak its runs recorded (None where none did)."""
    run = counted(runs)
    return flops.mfu(tokens_per_s, run.flops_per_token, run.peak_flops) if run else None


def finalist_runs(summary: Summary, finalist_id: str) -> list[TrialRow]:
    """A finalist's re-measure runs, else the runs of that id (its screen run, the baseline's)."""
    mine = [t for t in summary.trials if t.finalist == finalist_id]
    return mine or [t for t in summary.trials if t.id == finalist_id]


def shown(summary: Summary, gpu_columns: bool) -> bool:
    """Whether the reports show MFU: a search on GPUs whose runs counted FLOPs (summaries from before MFU
    did not)."""
    return gpu_columns and any(is_num(t.flops_per_token) for t in summary.trials)


def _gpu_name(summary: Summary) -> str | None:
    hardware = summary.hardware  # free-form: the GPU's name is under either key
    return hardware.get("gpu_name") or hardware.get("gpu")


def how(runs: list[TrialRow], tps_how: str) -> str:
    """How one config's MFU was found (the table cell's explanation)."""
    run = counted(runs)
    if run is None or not is_num(run.peak_flops):  # counted's has a peak
        return "no MFU: its runs recorded no GPU peak (a CPU, or a GPU not in trainables/workloads/flops.py's table)"
    precision = (run.train or {}).get("precision", "its precision")
    return (
        f"Tok/s ({tps_how}) x {run.flops_per_token:.3g} training FLOPs per token ({run.flops_source}) ÷ "
        f"{run.peak_flops / 1e12:g} TFLOP/s, the GPU's dense {precision} peak"
    )


def note(summary: Summary, gpu_columns: bool) -> str:
    """The "How each number was measured" line for the MFU column ("" where the column is not shown)."""
    if not shown(summary, gpu_columns):
        return ""
    sources = sorted({t.flops_source for t in summary.trials if t.flops_source})
    words = "; ".join(SOURCE_WORDS.get(s, s) for s in sources) or "not recorded"
    text = (
        "MFU (model FLOPs utilisation): Tok/s x training FLOPs per token (forward + backward; recomputation "
        "by activation checkpointing not counted) ÷ the GPU's dense peak FLOP/s at the config's precision "
        "(fp32: the CUDA cores'; tf32, bf16, fp16: the tensor cores'; trainables/workloads/flops.py), so an fp32 "
        f"config is measured against a far lower peak than a bf16 one. FLOPs per token: {words}."
    )
    if not any(is_num(t.peak_flops) for t in summary.trials):
        name = _gpu_name(summary)
        why = (
            flops.no_peak_reason(name) if name else "its GPU is not in trainables/workloads/flops.py's table"
        )
        text += f" No MFU is given here: {why}."
    return text
