"""What the user pays: compile + warm-up seconds, the time to train the planned run, and how long a run must
be before each compile mode (per compile scope) pays for its compile.

time to train = warm-up (compile, autotune, CUDA-graph capture: as the user's run of best.yaml pays it,
with the search's caches, which best.yaml names) + planned tokens / steady tok/s.
break-even = the run length (tokens) at which a compiled config, compile included, catches up with the
fastest eager one: warm-up difference / (1/eager tok/s - 1/compiled tok/s).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from tuner.space.knobs import graph_key
from tuner.state.records import BASELINE_ID, BreakEven, Finalist, TrialRow


def time_to_train(warmup_s: float | None, tokens: int, tokens_per_s: float | None) -> float | None:
    if not tokens_per_s:
        return None
    return round((warmup_s or 0.0) + tokens / tokens_per_s, 1)


@dataclass(frozen=True)
class WarmUp:
    """A warm-up figure and how many other runs on its node were warming up while it was measured."""

    seconds: float
    beside: int | None  # 0: it warmed up alone; None: not known (no timed window recorded)


def warm_warmup(
    rows: list[TrialRow], earlier: list[TrialRow], baseline: dict, everyone: Sequence[TrialRow] = ()
) -> WarmUp | None:
    """Compile + warm-up as the user's run of best.yaml pays it, alone, with the search's caches: the shortest
    among a finalist's re-measure runs (`rows`) and the cache hits of the same graph among `earlier` runs
    (the screen's, and the loss check's, whose rounds warm up fewer runs at once). Runs that warm
    up side by side slow each other, and that only adds time: on one H200 the re-measure's 15 runs, warming
    up at once, took 22 s for a fused graph a screen run had found in the cache in 10.7 s (best.yaml alone:
    10.6 s on an H100), and the median made the torch runner-up's 10 s look the shorter plan. `beside`
    counts the runs of `everyone` that warmed up at the same time on the same node as the shortest."""
    hits = [r for r in earlier if r.compile_cache_use == "hit"]
    if rows:
        key = graph_key(rows[0].config, baseline)
        hits = [r for r in hits if graph_key(r.config, baseline) == key]
    measured = [(r.warmup_s, r) for r in [*rows, *hits] if r.status == "ok" and r.warmup_s is not None]
    if not measured:
        return None
    warmup_s, shortest = min(measured, key=lambda timed: timed[0])
    return WarmUp(round(warmup_s, 1), warmups_beside(shortest, everyone))


def warmups_beside(row: TrialRow, everyone: Sequence[TrialRow]) -> int | None:
    """How many other runs on its node were in their compile and warm-up for over a second of its own."""
    span = _warmup_span(row)
    if span is None:
        return None
    count = 0
    for other in everyone:
        theirs = _warmup_span(other) if other.id != row.id and other.node_id == row.node_id else None
        if theirs and min(span[1], theirs[1]) - max(span[0], theirs[0]) > 1.0:
            count += 1
    return count


def _warmup_span(row: TrialRow) -> tuple[float, float] | None:
    """When its compile and warm-up ran: they end where its wait for the GPU's gate (if any) began."""
    if row.window_t0 is None or row.warmup_s is None:
        return None
    end = row.window_t0 - (row.gate_wait_s or 0.0)
    return end - row.warmup_s, end


def break_even_tokens(
    warmup_s: float | None, tokens_per_s: float, eager_warmup_s: float | None, eager_tokens_per_s: float
) -> float | None:
    """Tokens after which the compiled config has finished sooner; None when it never catches up."""
    if warmup_s is None or tokens_per_s <= eager_tokens_per_s:
        return None
    extra = max(0.0, warmup_s - (eager_warmup_s or 0.0))
    return round(extra / (1 / eager_tokens_per_s - 1 / tokens_per_s))


def cold_warmup(row: TrialRow, screen: list[TrialRow], baseline: dict) -> float | None:
    """Compile + warm-up as an empty cache pays it: the longest among the screened runs that compile the same
    graph. The first of them compiled it; the later ones found it in the search's cache (on an H200, 120 s
    then 8 s for batch 32 bf16 under CUDA graphs), so a row's own warm-up may be a warm one."""
    key = graph_key(row.config, baseline)
    same = [r.warmup_s for r in screen if r.warmup_s is not None and graph_key(r.config, baseline) == key]
    return max(same, default=row.warmup_s)


# A cache hit's warm-up against its graph's cold compile, where the screen timed no hit of that graph: on one
# H100 a search warms up from its cache in 8-12 s graphs it compiled in 82-110 s (docs/benchmarks.md).
CACHED_SHARE = 0.1


def cached_warmup(row: TrialRow, screen: list[TrialRow], baseline: dict) -> float | None:
    """Compile + warm-up as a later run pays it, finding the graph the screen compiled in the search's
    cache: the shortest screened cache hit of the same graph, else a tenth of the cold one."""
    key = graph_key(row.config, baseline)
    hits = [
        r.warmup_s
        for r in screen
        if r.warmup_s is not None and r.compile_cache_use == "hit" and graph_key(r.config, baseline) == key
    ]
    if hits:
        return min(hits)
    cold = cold_warmup(row, screen, baseline)
    return None if cold is None else cold * CACHED_SHARE


def break_even(screen: list[TrialRow], finalists: list[Finalist], baseline: dict) -> list[BreakEven]:
    """Per compile mode and scope (the whole model, or its blocks one by one): its fastest feasible screened
    config against the fastest feasible eager one, or against the baseline when it is eager and no eager
    config got through the screen (the early stopper stops slow eager runs before their loss is known)."""
    feasible = [(r, r.tokens_per_s) for r in screen if r.feasible and r.status == "ok" and r.tokens_per_s]
    fastest: dict[tuple[str, str | None], tuple[TrialRow, float]] = {}  # its row and tok/s
    for row, speed in sorted(feasible, key=lambda fed: -fed[1]):
        fastest.setdefault(_compiled_how(row), (row, speed))
    warm = {f.id: f.warmup_s for f in finalists}
    versus = _eager_reference(fastest.pop(("none", None), None), finalists, baseline, warm)
    if versus is None:
        return []
    versus_id, versus_tps, versus_cold, versus_warm = versus
    out = []
    for (mode, scope), (row, speed) in sorted(
        fastest.items(), key=lambda item: (item[0][0], item[0][1] or "")
    ):
        cold, warm_s = cold_warmup(row, screen, baseline), warm.get(row.id)
        out.append(
            BreakEven(
                compile=mode,
                compile_scope=scope,
                config_id=row.id,
                versus_id=versus_id,
                tokens_per_s=speed,
                versus_tokens_per_s=versus_tps,
                warmup_cold_s=cold,
                warmup_warm_s=warm_s,
                tokens_cold=break_even_tokens(cold, speed, versus_cold, versus_tps),
                tokens_warm=break_even_tokens(warm_s, speed, versus_warm, versus_tps),
            )
        )
    return out


def _compiled_how(row: TrialRow) -> tuple[str, str | None]:
    """(compile mode, compile scope); eager runs have no scope."""
    mode = row.train.get("compile", "none")
    return mode, None if mode == "none" else row.train.get("compile_scope", "model")


def _eager_reference(
    eager: tuple[TrialRow, float] | None,
    finalists: list[Finalist],
    baseline: dict,
    warm: dict[str, float | None],
) -> tuple[str, float, float | None, float | None] | None:
    """(id, tok/s, cold warm-up, warm warm-up) of the eager config compiled modes are weighed against
    (`eager`: the fastest feasible screened one, and its tok/s)."""
    if eager is not None:
        row, speed = eager
        return row.id, speed, row.warmup_s, warm.get(row.id)
    base = next((f for f in finalists if f.id == BASELINE_ID and f.runs), None)
    if base is None or baseline.get("compile", "none") != "none":
        return None
    return BASELINE_ID, statistics.median(base.runs), base.warmup_s, base.warmup_s
