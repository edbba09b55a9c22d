"""A batch cut into micro-batches (`micro_batch`): pieces of at most N examples on dim 0 of every tensor
in it (a tensor, a tuple or list, or a dict of them), each weighted by its share of the batch, so the
weighted losses and gradients add up to the whole batch's."""

from __future__ import annotations

from typing import Any


def splits(batch: int, micro: int | None) -> bool:
    """Whether `micro` is a micro_batch a batch of `batch` can run with (TrainConfig's rule, which the search's
    space and screen apply to the pairs they make): None or at least the batch is the whole batch in one
    pass; below it, it must divide it."""
    return micro is None or micro >= batch or batch % micro == 0


def forward_batch(batch: int, micro: int | None) -> int:
    """Sequences per forward/backward pass, what must fit in memory: the micro-batch, or the batch."""
    return min(micro or batch, batch)


def forwards_per_step(batch: int, micro: int | None, grad_accum: int = 1) -> int:
    """How many forward passes one optimizer step makes: its batch's pieces, times its accumulated batches."""
    return batch // forward_batch(batch, micro) * grad_accum


def examples_in(batch: Any) -> int:
    """The examples in a batch (its first tensor's dim 0): the weight of its mean loss."""
    while isinstance(batch, list | tuple | dict):
        batch = next(iter(batch.values())) if isinstance(batch, dict) else batch[0]
    return batch.shape[0] if batch.ndim else 1


def micro_batches(batch: Any, size: int | None) -> list[tuple[Any, float]]:
    """`batch` cut on dim 0 into pieces of at most `size` examples (None: whole), each with its share of
    the batch, the weight of its mean loss: the weighted losses and gradients add up to the batch's."""
    n = examples_in(batch)
    pieces = [batch] if size is None or size >= n else _split(batch, size)
    return [(piece, examples_in(piece) / n) for piece in pieces]


def _split(batch: Any, size: int) -> list[Any]:
    if isinstance(batch, dict):
        parts = {key: _split(value, size) for key, value in batch.items()}
        return [dict(zip(parts, values)) for values in zip(*parts.values())]
    if isinstance(batch, list | tuple):
        return [type(batch)(values) for values in zip(*(_split(value, size) for value in batch))]
    return list(batch.split(size))
