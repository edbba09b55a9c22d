"""The finalists' records, from the re-measure's rows (tuner/phases/remeasure.py times them, finish.py picks
among them): each config's figures, which runs they rest on and whether they are trusted; and when the
baseline's further runs can no longer change which config is the answer (`baseline_settled`), so the
re-measure leaves them out."""

from __future__ import annotations

import math
from collections.abc import Sequence

from tuner.decide import costs
from tuner.decide.select import spread
from tuner.state.records import BASELINE_ID, Finalist, TrialRow

# A further uncontended run of a config times within this factor of its uncontended runs so far, either way
# (`baseline_settled` rests on it): a launch-bound run varies ~8% from one process to the next
# (search.baseline_repeats), so 1.5x is six times that; load beyond it is what the contention flag catches,
# and a contended window is not one of a config's figures while it has an uncontended one.
REACH = 1.5


def finalists_of(
    base_config: dict,
    baseline: TrialRow,
    screen: list[TrialRow],
    remeasure: list[TrialRow],
    tokens: int,
    loss_runs: Sequence[TrialRow] = (),
) -> list[Finalist]:
    """Each re-measured config's record: its figures (uncontended windows', or contended ones' where it has no
    other), their trust, its loss verdict (its screen run's, the baseline's own) and its warm-ups."""
    by_finalist: dict[str, list[TrialRow]] = {}
    for row in remeasure:
        assert row.finalist is not None  # a re-measure run names the finalist it timed
        by_finalist.setdefault(row.finalist, []).append(row)
    screened = {t.id: t for t in screen}
    loaded = any(r.contended for r in remeasure)  # the re-measure saw load: an unjudged window says nothing
    out = []
    for fid, rows in by_finalist.items():
        src = screened.get(fid, baseline)
        speeds = [(r, r.tokens_per_s) for r in rows if r.status == "ok" and r.tokens_per_s]
        timed = [r for r, _ in speeds]
        clean = [tps for r, tps in speeds if not r.contended]
        contended = [tps for r, tps in speeds if r.contended]
        runs = clean or contended  # contended figures only where no others were had
        rows = [r for r in rows if not r.contended] if clean else rows  # the runs its figures come from
        joules = [r.joules_per_token for r in rows if r.joules_per_token]
        trusted = [r.telemetry_trusted for r in rows if r.telemetry_trusted is not None]
        earlier = [*screen, *loss_runs] if fid in screened else []
        warm = costs.warm_warmup(rows, earlier, base_config, [*screen, *loss_runs, *remeasure])
        warm_s = warm.seconds if warm else None
        out.append(
            Finalist(
                id=fid,
                config=src.config if fid in screened else {},
                runs=runs,
                contended_runs=contended if clean else [],
                speed_trusted=_speed_trusted(timed, loaded),
                val_loss=src.val_loss,
                feasible=src.feasible,
                # a J/token figure for every run, or none: a partial median would favour the lucky
                joules_per_token=spread(joules)[0] if joules and len(joules) == len(rows) else None,
                telemetry_trusted=all(trusted) if trusted else None,
                warmup_s=warm_s,
                warmup_beside=warm.beside if warm else None,
                warmup_cold_s=costs.cold_warmup(src, screen, base_config) if fid in screened else None,
                time_to_train_s=costs.time_to_train(warm_s, tokens, spread(runs)[0] if runs else None),
            )
        )
    return out


def _speed_trusted(timed: list[TrialRow], loaded: bool) -> bool:
    """Whether the figure of these timed runs stands: from an uncontended window judged so, or one too short
    to judge (no CPU shares recorded) on a machine the re-measure never saw contended; or no figure at all."""
    clean = [r for r in timed if not r.contended]
    if not clean:
        return not timed
    return any(r.judged for r in clean) or not loaded


def left_out(
    finalists: Sequence[Finalist], rows: Sequence[TrialRow], tokens: int, asked: tuple[int, int]
) -> list[Finalist]:
    """`finalists` with the runs asked of each (`asked`: the baseline's, each other's) that never ran, and
    for the baseline why (`baseline_settled` on the rows the re-measure ended with): the record that the
    notice (`settled_notices`) and the report's measured section both read, so they count its runs alike."""
    why = baseline_settled(rows, tokens)
    out = []
    for finalist in finalists:
        wanted = asked[0] if finalist.id == BASELINE_ID else asked[1]
        missing = max(0, wanted - sum(1 for r in rows if r.finalist == finalist.id))
        settled = why if finalist.id == BASELINE_ID and missing else None
        out.append(finalist.model_copy(update={"not_timed": missing, "settled": settled}))
    return out


def settled_notices(finalists: Sequence[Finalist]) -> list[str]:
    """One line, where the baseline's runs were left out: how many, why, and how many its figure rests on
    (the finish logs it as the phases' notices are logged: context.Notices)."""
    out = []
    for f in (f for f in finalists if f.settled and f.not_timed):
        used = len(f.runs)
        out.append(
            f"remeasure: the baseline's figure can no longer change the answer: {f.not_timed} of its runs not "
            f"timed ({f.settled}); its figure rests on {used} run{'s' if used != 1 else ''}"
        )
    return out


def has_figure(row: TrialRow) -> bool:
    """The run timed a window (finalists_of takes its figure)."""
    tps = row.tokens_per_s
    return row.status == "ok" and tps is not None and bool(tps) and math.isfinite(tps)


def _clean(rows: Sequence[TrialRow]) -> list[TrialRow]:
    """The runs whose figures a config's figure is: those of uncontended windows (finalists_of)."""
    return [r for r in rows if has_figure(r) and not r.contended]


def baseline_settled(rows: Sequence[TrialRow], tokens: int) -> str | None:
    """Why no further run of the baseline (a repeat, or a contended window's re-run) can change which config
    is the answer, from the re-measure's `rows` so far (labelled by finalist); None where one might, or
    where the baseline has no uncontended figure yet: then it is timed.

    1. No finalist but the baseline is feasible (each re-measured finalist is, unless all its rows say
       feasible False): the baseline stays the answer whatever it times.
    2. The baseline and every other finalist F have an uncontended figure from a judged window (so a
       contended run, the baseline's or any, leaves every figure's trust as it is: select.refuse_untrusted),
       min(F) > max(baseline) x REACH² over their uncontended figures, and some F with a measured warm-up w
       trains the planned `tokens` sooner however the runs vary: w + tokens·REACH/min(F) <
       tokens/(max(baseline)·REACH). With each further uncontended figure within REACH of its config's so
       far (a contended one is no figure while an uncontended one is had), every final range of the
       baseline then lies below every F's: it is neither the fastest nor overlaps the fastest
       (select.pick_winner), and some F's median time to train stays under its, so it is never the one
       that finishes the planned run first (select.finish_first; warm-ups only get shorter with runs)."""
    clean = _clean([r for r in rows if r.finalist == BASELINE_ID])
    if not clean:
        return None
    groups: dict[str | None, list[TrialRow]] = {}
    for row in rows:
        if row.finalist != BASELINE_ID:
            groups.setdefault(row.finalist, []).append(row)
    feasible = [g for g in groups.values() if any(r.feasible is not False for r in g)]
    if not feasible:
        return "no finalist but the baseline is feasible: the baseline stays the answer whatever it times"
    fastest = max(r.tokens_per_s or 0.0 for r in clean)
    ceiling, sooner, slowest = fastest * REACH, False, math.inf
    if not any(r.judged for r in clean) or tokens <= 0:
        return None
    for group in feasible:
        mine = _clean(group)
        if not any(r.judged for r in mine):
            return None  # no figure yet, or one whose trust a contended run elsewhere could still take
        floor = min(r.tokens_per_s or 0.0 for r in mine) / REACH
        if floor <= ceiling:
            return None  # near enough that a run of either could bring their ranges together
        slowest = min(slowest, floor * REACH)
        warm = min((r.warmup_s for r in mine if r.warmup_s is not None), default=None)
        sooner = sooner or (warm is not None and warm + tokens / floor < tokens / ceiling)
    if not sooner:
        return None  # the baseline, compiling nothing, might still train the planned run first
    return (
        f"every other finalist's slowest run is over {REACH**2:.2f}x the baseline's fastest ({slowest:,.0f} "
        f"against {fastest:,.0f}): no run within {REACH}x of its config's brings them together"
    )
