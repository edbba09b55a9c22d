"""What the training loop trains: a model, its data and its loss.

The hybrid LM is the built-in default workload, not a special case of the loop. A user's own PyTorch job
plugs in by naming a factory, `train.workload: "path/to/job.py:make_workload"` (or "package.module:fn"),
that returns an object with the methods below. The least it writes is three:

    build_model()                  -> nn.Module
    loss(model, batch)             -> scalar tensor, the batch's MEAN loss
    train_dataset()                -> a map-style torch Dataset of examples; the loop batches it (batch_size
                                      examples a step, seeded) and applies loader / num_workers / pin_memory
                                      (loader=device where the dataset allows: trainables/data/datasets.py)
      or train_batches(device, start_step) -> endless iterator of batches (then also val_batches)

Everything else has a default:

    val_dataset()                  the fixed val examples (default: the last tenth of train_dataset, held out)
    val_batches(device)            the val batches of a train_batches workload (no default there)
    describe()                     one line for the log (default: the class and where it came from)
    lr_multiplier(param_name)      per-parameter lr factor (default 1.0)
    save(out_dir)                  what a run needs besides the weights, e.g. a tokenizer (default: nothing)
    evaluation(model)              a context manager entered around each eval (default: none)
    compile_regions(model)         its repeated blocks (default: none): the loop compiles them one by one
                                   (compile_scope: blocks) and checkpoints every k-th (activation_checkpointing)
    flops_per_token(model)         training FLOPs per token, forward + backward, for the report's MFU
                                   (default: 6 x trainable parameters, said as such: trainables/workloads/flops.py)
    loss_tolerance                 ("relative", 0.05) or ("absolute", 0.02): the loss rule's tolerance for
                                   its loss's scale, where the search config sets none (default: 0.05
                                   absolute; trainables/workloads/loss_tolerance.py)
    supports                       the workload knobs it implements, of WORKLOAD_KNOBS (default: none; a
                                   Dataset workload gets the loader knobs from the loop); it reads their
                                   values from the TrainConfig its factory was given (cfg.kernels, ...)
    unit                           what it counts, plural: "images", "examples" (default "tokens"); every
                                   speed line and report says images/s, and tokens / eval_tokens count it
    units_per_example              units in one example (default: seq_len for "tokens", else 1); with
                                   neither declared, an example must be a window of seq_len token ids
    reads_corpus                   True where it trains on the char corpus the search resolves, pins and
                                   ships (load_char_data(cfg.data, expect_sha256=cfg.data_sha256)); default
                                   False: nothing is resolved, and train.data is refused
    metrics(model, batch)          more val figures, {"accuracy": ...}, each the batch's mean (a float or a
                                   scalar tensor), averaged over the val examples (default: none)

The factory takes the TrainConfig, and, when it has a second parameter, the model's settings
(`train.model`): as the mapping given, or validated into that parameter's annotation when it is a
dataclass or a pydantic model (`def make_workload(cfg, model: GPTConfig)`), so
`--set train.model.n_layer=2` reaches the model and a typo is one line. Contracts of the loop: evals run
the uncompiled model in fp32 under torch.no_grad(); a speed counts batch_size x units_per_example units
per batch (the internal names say tokens: tokens_per_s, tokens, eval_tokens, whatever the unit); a batch
is a tensor or a tuple/list/dict of tensors with the batch on dim 0.
`check_workload` (trainables/workloads/workload.py) checks all this before any expensive work (ConfigError: one
line, exit 2). docs/workloads.md is the user's guide; its table of TrainConfig fields is
`python -m trainables.workloads.workload`. The built-in hybrid LM is trainables/workloads/hybrid_workload.py; the loop calls a
workload through trainables/workloads/workload_job.py:Job, which fills in the defaults above.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import nn

Batch = Any  # a tensor, or a tuple / list / dict of tensors, batch on dim 0
TOKENS = "tokens"  # a workload's unit unless it declares its own

# Knobs that work only when the workload implements them; the loop applies every other knob itself.
WORKLOAD_KNOBS = {
    "kernels": "fused kernels",
    "compile_scope": "regional compilation (compile_regions)",
    "activation_checkpointing": "activation checkpointing (compile_regions)",
    "mamba_lr_mult": "per-group lr",
    "loader": "device-resident batches",
    "num_workers": "DataLoader workers",
    "pin_memory": "pinned host memory",
}
LOADER_KNOBS = frozenset({"num_workers", "pin_memory"})  # what the loop applies to any Dataset
# What the loop applies to the blocks a workload names (compile_regions), so a workload offers these by
# naming its blocks, never by declaring them in supports.
REGION_KNOBS = frozenset({"compile_scope", "activation_checkpointing"})
OPTIONAL_METHODS = (
    "val_dataset",
    "describe",
    "lr_multiplier",
    "save",
    "evaluation",
    "flops_per_token",
    "metrics",
)


class Workload(Protocol):
    """The three methods every workload has (the data: `train_dataset` or `train_batches`, see above)."""

    def build_model(self) -> nn.Module: ...

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor: ...
