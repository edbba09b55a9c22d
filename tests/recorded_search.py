"""A CPU search whose phases are already in OUT/state.json, run through the search's own pipeline
(`tuner.pipeline.run_search`, as `--resume` of a search whose re-measure finished runs it): the loss limit's
verdicts (`with_feasibility`), the selection, the refusal of untrusted figures, summary.json, the reports,
best.yaml and the exit code all come from the code a search runs, from rows a test writes
(tests/answer_checks.py says what every exit must hold of its answer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.factories import make_row
from tuner import pipeline
from tuner.config import load_search_config
from tuner.context import Notices, SearchContext
from tuner.decide.loss_plan import LossCheck
from tuner.state.hardware import Hardware
from tuner.state.records import BASELINE_ID, Summary, TrialRow
from tuner.state.search_state import State

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs" / "smoke.yaml"
BASE_LOSS = 2.0  # the baseline's loss run; the smoke config's tolerance makes the limit 2.05
# Two busy loops on a 2-core host: a timed window as trainables/training/cpu_load.py and observe.annotate record it.
BUSY = {"cpu_own_cores": 0.1, "cpu_others_cores": 1.8, "cpu_count": 2, "cpu_shared": True}
QUIET = {"cpu_own_cores": 0.95, "cpu_others_cores": 0.05, "cpu_count": 2, "cpu_shared": False}


def screened(tid: str, tps: float, status: str = "ok", **config: Any) -> TrialRow:
    return make_row(tid, "screen", config, status=status, tokens_per_s=tps, **QUIET)


def loss_run(tid: str, of: TrialRow, val_loss: float, rnd: int = 0) -> TrialRow:
    """The loss check's run of screen row `of` (round `rnd`), to `val_loss`."""
    return make_row(tid, f"loss_check_{rnd}", of.config, val_loss=val_loss, screen_id=of.id, execution={})


def timed(finalist: str, speeds: list[float], config: dict[str, Any] | None = None, **window: Any):
    """The re-measure's runs of `finalist`, one per figure, with the CPU load `window` (quiet by default)."""
    load = window or QUIET
    return [
        make_row(f"remeasure-{finalist}-{i}", "remeasure", config or {}, tokens_per_s=tps, finalist=finalist,
                 case=0, repeat=i, **load)
        for i, tps in enumerate(speeds)
    ]  # fmt: skip


def run_recorded(
    out: Path,
    screen: list[TrialRow],
    checked: list[TrialRow],
    remeasure: list[TrialRow],
) -> tuple[int, Summary]:
    """The exit code and summary.json of the smoke search whose phases recorded these rows."""
    cfg = load_search_config(str(SMOKE), [])
    hw = Hardware(cpus=2, cuda=False)
    said = Notices()
    space, base = pipeline.fit_to_hardware(cfg, hw, said)
    # the loss check stores its row with the verdict on it (measure/baseline.py: checked)
    base_row = make_row(
        BASELINE_ID, "baseline", {}, val_loss=BASE_LOSS, tokens_per_s=9000.0, execution={}, feasible=True
    )
    state = State(out)
    state.data.update({"config": cfg.model_dump(mode="json"), "fingerprint": "recorded"})
    for name, value in (
        ("hardware", hw.model_dump(mode="json")),
        ("probe", {}),
        ("screen", [r.model_dump(mode="json") for r in screen]),
        (
            "loss_check",
            LossCheck(baseline=base_row, candidates=checked).model_dump(mode="json"),
        ),
        ("remeasure", [r.model_dump(mode="json") for r in remeasure]),
    ):
        state.finish(name, value, 1.0)
    command = "python -m tuner.search --config configs/smoke.yaml"
    ctx = SearchContext(
        cfg=cfg,
        out=out,
        base=base,
        hw=hw,
        cluster_cpus=2,
        state=state,
        command=command,
        resume=True,
        notices=said,
        space=space,
    )
    code = pipeline.run_search(ctx, kept=out / "answers")
    return code, Summary.model_validate_json((out / "summary.json").read_text())
