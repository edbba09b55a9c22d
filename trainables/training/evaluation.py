"""The val figures of a run: its mean val loss over the fixed val examples and the workload's own metrics,
measured on the weights alone (fp32, eager, no grad). The loop evaluates at each eval point with them."""

from __future__ import annotations

import torch

from trainables.micro_batches import examples_in
from trainables.workloads.workload_job import Job


def evaluate(model: torch.nn.Module, workload: Job, batches) -> float:
    """Mean val loss over the fixed val examples (eval_figures)."""
    return eval_figures(model, workload, batches)[0]


@torch.no_grad()
def eval_figures(model: torch.nn.Module, workload: Job, batches) -> tuple[float, dict[str, float]]:
    """Mean val loss over the fixed val examples, and the workload's own metrics (metrics(model, batch),
    each averaged over them too), in fp32 and eager mode so they reflect the weights only (through the
    workload's `evaluation` scope where it has one: the hybrid LM's reference ops)."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    sums: dict[str, float] = {}
    own = getattr(workload, "metrics", None)
    # force_eager: blocks compiled in place (compile_scope: blocks) run eagerly too, as the whole model does
    with torch.compiler.set_stance("force_eager"), workload.evaluation(model):
        for batch in batches:
            n = examples_in(batch)
            total += workload.loss(model, batch).float().item() * n
            for name, value in (own(model, batch) if own else {}).items():
                sums[name] = sums.get(name, 0.0) + float(value) * n
            count += n
    model.train(was_training)
    return total / max(count, 1), {name: value / max(count, 1) for name, value in sums.items()}
