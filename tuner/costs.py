"""What the user pays: compile + warm-up seconds, the time to train the planned run, and how long a run must
be before each compile mode pays for its compile.

time to train = warm-up (compile, autotune, CUDA-graph capture: as the user's run of best.yaml pays it,
with the search's caches, which best.yaml names) + planned tokens / steady tok/s.
break-even = the run length (tokens) at which a compiled config, compile included, catches up with the
fastest eager one: warm-up difference / (1/eager tok/s - 1/compiled tok/s).
"""

from __future__ import annotations

import statistics

from tuner.records import BreakEven, Finalist, TrialRow


def time_to_train(warmup_s: float | None, tokens: int, tokens_per_s: float | None) -> float | None:
    if not tokens_per_s:
        return None
    return round((warmup_s or 0.0) + tokens / tokens_per_s, 1)


def warm_warmup(rows: list[TrialRow]) -> float | None:
    """Median compile + warm-up of a finalist's re-measure runs (the search's caches are warm by then)."""
    values = [r.warmup_s for r in rows if r.status == "ok" and r.warmup_s is not None]
    return round(statistics.median(values), 1) if values else None


def break_even_tokens(
    warmup_s: float | None, tokens_per_s: float, eager_warmup_s: float | None, eager_tokens_per_s: float
) -> float | None:
    """Tokens after which the compiled config has finished sooner; None when it never catches up."""
    if warmup_s is None or tokens_per_s <= eager_tokens_per_s:
        return None
    extra = max(0.0, warmup_s - (eager_warmup_s or 0.0))
    return round(extra / (1 / eager_tokens_per_s - 1 / tokens_per_s))


def break_even(screen: list[TrialRow], finalists: list[Finalist]) -> list[BreakEven]:
    """Per compile mode: its fastest feasible screened config against the fastest feasible eager one."""
    feasible = [r for r in screen if r.feasible and r.status == "ok" and r.tokens_per_s]
    fastest: dict[str, TrialRow] = {}
    for row in sorted(feasible, key=lambda r: -r.tokens_per_s):
        fastest.setdefault(row.train.get("compile", "none"), row)
    eager = fastest.pop("none", None)
    if eager is None:
        return []
    warm = {f.id: f.warmup_s for f in finalists}
    out = []
    for mode, row in sorted(fastest.items()):
        warm_s = warm.get(row.id)
        out.append(
            BreakEven(
                compile=mode,
                config_id=row.id,
                versus_id=eager.id,
                tokens_per_s=row.tokens_per_s,
                versus_tokens_per_s=eager.tokens_per_s,
                warmup_cold_s=row.warmup_s,
                warmup_warm_s=warm_s,
                tokens_cold=break_even_tokens(
                    row.warmup_s, row.tokens_per_s, eager.warmup_s, eager.tokens_per_s
                ),
                tokens_warm=break_even_tokens(
                    warm_s, row.tokens_per_s, warm.get(eager.id), eager.tokens_per_s
                ),
            )
        )
    return out
