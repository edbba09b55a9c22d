"""The reports in the workload's unit (summary.json's `unit`): tok/s for a language model's tokens,
images/s, examples/s for a workload that counts those. The reports' own sentences are written for tokens;
`in_unit` says one of them in another unit, so a classifier's report never says tok/s."""

from __future__ import annotations

from trainables.common.progress import one_of, per_second

TOKENS = "tokens"


def in_unit(text: str, unit: str = TOKENS) -> str:
    """`text`, one of the reports' own titles, captions, headings or notes (never a config key, a value or
    a user's string), in `unit`: tok/s -> images/s, per token -> per image, tokens -> images."""
    if unit == TOKENS:
        return text
    big = unit[:1].upper() + unit[1:]
    for old, new in (
        ("Tokens/s", f"{big}/s"),
        ("Tok/s", f"{big}/s"),
        ("tokens/s", per_second(unit)),
        ("tok/s", per_second(unit)),
        ("J/token", f"J/{one_of(unit)}"),
        ("per token", f"per {one_of(unit)}"),
        ("token budget", f"budget of {unit}"),
        (" tokens", f" {unit}"),
    ):
        text = text.replace(old, new)
    return text
