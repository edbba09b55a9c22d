"""docs/workloads.md's table of the TrainConfig fields a workload can read: name, type, default, knob
class, who acts on it, what it is (`python -m trainables.workloads.workload` prints it; a test holds the page to it)."""

from __future__ import annotations

import typing
from typing import Any

from trainables.config import TrainConfig

_BY_LOADER = "the loop, for a train_dataset workload; a train_batches workload that declares it in supports"
_BY_WORKLOAD = "your workload, when it declares it in supports (the loop only checks the value)"
# Who acts on a field a workload may read; every other field the loop applies itself.
WORKLOAD_READS = {
    "model": "your factory's second parameter (its settings, validated into its annotation)",
    "data": "a workload that declares reads_corpus: load_char_data(cfg.data, expect_sha256=cfg.data_sha256)",
    "data_sha256": "your workload: pass it to load_char_data so every trial trains on the search's corpus",
    "seq_len": "your workload (an LM's window); where its unit is tokens, the loop counts batch_size x seq_len "
    "tokens a step",
    "units_per_example": "the checks before any work, from your workload's units_per_example (or unit)",
    "batch_size": "the loop, for a train_dataset workload; train_batches makes batches of it",
    "eval_tokens": "the loop, for a train_dataset workload; val_batches holds about this many of its units",
    "eval_batch_size": "the loop, for a train_dataset workload; val_batches makes batches of it",
    "seed": "the loop (init, batch draws); train_batches draws batch k from (seed, k)",
    "loader": _BY_LOADER,
    "num_workers": _BY_LOADER,
    "pin_memory": _BY_LOADER,
    "kernels": _BY_WORKLOAD,
    "compile_scope": "the loop, over the blocks your workload's compile_regions(model) names (without it "
    "only 'model' runs)",
    "activation_checkpointing": "the loop, over the blocks your workload's compile_regions(model) names "
    "(without it, not offered)",
    "mamba_lr_mult": _BY_WORKLOAD + "; lr_multiplier(param_name) returns it",
}


def _type_name(annotation: Any) -> str:
    if typing.get_origin(annotation) is typing.Literal:
        return " \\| ".join(str(v) for v in typing.get_args(annotation))
    name = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    return name.replace("typing.", "").replace("|", "\\|")


def fields_markdown() -> str:
    """The table of TrainConfig fields: name, type, default, class, who acts on it, what it is."""
    classes = TrainConfig.knob_classes()
    lines = ["| field | type | default | class | who acts on it | what it is |", "|---|---|---|---|---|---|"]
    for name, field in TrainConfig.model_fields.items():
        default = "{}" if field.default_factory is dict else repr(field.default)
        what = (field.description or "").replace("|", "\\|")
        who = WORKLOAD_READS.get(name, "the loop")
        kind = knob.kind if (knob := classes[name]) else ""
        lines.append(f"| `{name}` | {_type_name(field.annotation)} | `{default}` | {kind} | {who} | {what} |")
    return "\n".join(lines) + "\n"
