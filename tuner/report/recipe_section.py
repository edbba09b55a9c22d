"""The usual hand recipe beside the answer (tuner/space/recipe.py): one line under the answer in both reports, so a
reader sees at once whether the search beat what an engineer would have tried first by hand."""

from __future__ import annotations

from tuner.state.records import BASELINE_ID, Summary


def recipe_line(summary: Summary) -> str:
    """'The usual recipe (precision=bf16, ...): screen-1, 512,000 tok/s in the screen, val loss 1.50 (within
    the limit); the answer screened 2.10x it. OUT/recipe.yaml trains it alone.'; "" without a recipe."""
    found = summary.recipe
    if found is None:
        return ""
    knobs = ", ".join(f"{k}={v}" for k, v in found.knobs.items())
    head = f"The usual recipe ({knobs}; the baseline's batch, lr and budget)"
    if found.trial is None:
        return f"{head} was not timed: the screen did not finish its run."
    verdict = {True: "within the limit", False: "over the limit", None: "loss never checked"}[found.feasible]
    loss = f"val loss {found.val_loss:.4f} ({verdict})" if found.val_loss is not None else verdict
    line = f"{head}: {found.trial}, {found.tokens_per_s:,.0f} tok/s in the screen, {loss}"
    answer = _answer_screened(summary)
    if answer is not None and found.tokens_per_s:
        line += f"; the answer screened {answer / found.tokens_per_s:.2f}x it"
    return line + (f". {found.yaml} trains it alone." if found.yaml else ".")


def _answer_screened(summary: Summary) -> float | None:
    """The answer's screen figure (the recipe's is a screen figure too); None for the baseline."""
    answer = summary.best.id if summary.best else BASELINE_ID
    row = next((t for t in summary.trials if t.id == answer and t.phase == "screen"), None)
    return row.tokens_per_s if row is not None else None


def recipe_lines(summary: Summary) -> list[str]:
    """The line and a blank one after it, for report.md ([] without a recipe)."""
    line = recipe_line(summary)
    return [line, ""] if line else []
