"""The hybrid RWKV6 + Mamba2 LM: shapes, gradients, causality, backends, checkpointing, learning, config."""

import dataclasses
import math

import pytest
import torch

from model import HybridConfig, HybridLM

TINY = dict(
    vocab_size=17,
    d_model=32,
    n_layers=2,
    seq_len=16,
    rwkv_n_heads=2,
    rwkv_mix_lora_rank=8,
    rwkv_decay_lora_rank=8,
    mamba_d_state=8,
    mamba_headdim=16,
    mamba_chunk_size=8,
)
T = 16


def tiny_model(seed: int = 0, dtype=torch.float32, **overrides) -> HybridLM:
    torch.manual_seed(seed)
    return HybridLM(HybridConfig(**{**TINY, **overrides})).to(dtype)


def tokens(batch: int = 2, length: int = T, vocab: int = TINY["vocab_size"], seed: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("ngroups", [1, 2])
def test_forward_shapes_and_initial_loss_near_uniform(ngroups):
    model = tiny_model(mamba_ngroups=ngroups)
    idx = tokens()
    logits, loss = model(idx, idx)
    assert logits.shape == (2, T, TINY["vocab_size"])
    assert loss.dtype == torch.float32
    assert abs(loss.item() - math.log(TINY["vocab_size"])) < 0.2
    assert model(idx)[1] is None


def test_backward_gives_finite_grads_for_every_parameter():
    model = tiny_model()
    idx = tokens()
    model(idx, idx)[1].backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
    silent = {n for n, p in model.named_parameters() if p.grad.abs().sum() == 0}
    # RWKV zero-initialises the LoRA W1 matrices: on the first step tanh(x W1) = 0 leaves W2 and the
    # mix feeding W1 without gradient (they move once W1 has); everything else must learn.
    assert silent == {
        f"blocks.{i}.rwkv.{n}" for i in range(2) for n in ("time_maa_x", "time_maa_w2", "time_decay_w2")
    }


def test_model_is_causal():
    model = tiny_model(dtype=torch.float64)
    idx = tokens()
    changed = idx.clone()
    t = 9
    changed[:, t] = (changed[:, t] + 1) % TINY["vocab_size"]
    before, after = model(idx)[0], model(changed)[0]
    torch.testing.assert_close(before[:, :t], after[:, :t], rtol=0, atol=1e-12)
    assert (before[:, t] - after[:, t]).abs().max() > 1e-4


def test_naive_and_torch_kernels_agree_and_share_checkpoints():
    torch_model = tiny_model(seed=3, dtype=torch.float64, kernels="torch")
    naive_model = tiny_model(seed=4, dtype=torch.float64, kernels="naive")
    naive_model.load_state_dict(torch_model.state_dict(), strict=True)
    idx = tokens(length=2 * TINY["mamba_chunk_size"] + 3)  # several chunks plus a ragged tail
    torch.testing.assert_close(naive_model(idx)[0], torch_model(idx)[0], rtol=1e-9, atol=1e-9)


def test_activation_checkpointing_gives_identical_loss_and_grads():
    plain, checkpointed = tiny_model(seed=5), tiny_model(seed=5, activation_checkpointing=True)
    idx = tokens()
    results = []
    for model in (plain, checkpointed):
        model.train()
        loss = model(idx, idx)[1]
        loss.backward()
        results.append((loss.detach(), {n: p.grad for n, p in model.named_parameters()}))
    (loss_a, grads_a), (loss_b, grads_b) = results
    torch.testing.assert_close(loss_a, loss_b, rtol=0, atol=0)
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], rtol=1e-6, atol=1e-7, msg=name)


def test_training_on_repeated_text_lowers_loss_clearly():
    text = "to be, or not to be, that is the question. " * 20
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text])
    model = tiny_model(seed=6, vocab_size=len(chars))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(7)
    losses = []
    for _ in range(60):
        starts = torch.randint(0, len(data) - T - 1, (8,), generator=gen)
        x = torch.stack([data[s : s + T] for s in starts])
        y = torch.stack([data[s + 1 : s + T + 1] for s in starts])
        loss = model(x, y)[1]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert abs(losses[0] - math.log(len(chars))) < 0.2
    last = sum(losses[-5:]) / 5
    assert last < 0.3 * losses[0], (losses[0], last)


def test_autocast_bf16_matches_float32_loss():
    model = tiny_model(seed=8)
    idx = tokens()
    loss_fp32 = model(idx, idx)[1]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, loss_bf16 = model(idx, idx)
    assert logits.dtype == torch.bfloat16 and loss_bf16.dtype == torch.float32
    assert abs(loss_bf16.item() - loss_fp32.item()) < 0.05


def test_compiles_without_graph_breaks():
    model = tiny_model(seed=9, mamba_chunk_size=T)
    idx = tokens()
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(idx, idx)[1], model(idx, idx)[1])


def test_parameter_names_carry_the_training_loop_rules():
    model = tiny_model()
    for i, block in enumerate(model.blocks):
        for name, _ in block.mamba.named_parameters():
            assert f"blocks.{i}.mamba.{name}" in dict(model.named_parameters())
    no_decay = model.no_weight_decay()
    assert no_decay == {f"blocks.{i}.rwkv.{n}" for i in range(2) for n in ("time_maa", "time_faaaa")}
    # What the loop decays: matrices only; never norms, gains, decays, A_log, D, dt_bias.
    decayed = {n for n, p in model.named_parameters() if p.ndim >= 2 and n not in no_decay}
    assert all(n.endswith("weight") or "_w1" in n or "_w2" in n for n in decayed), decayed
    assert "blocks.0.mamba.A_log" not in decayed and "blocks.0.gain_rwkv" not in decayed


def test_default_config_is_the_seed_size():
    model = HybridLM(HybridConfig())
    assert 2_500_000 <= model.num_params() <= 3_500_000
    summary = model.summary()
    assert f"{model.num_params():,}" in summary and "mamba2" in summary and "rwkv6" in summary


@pytest.mark.parametrize(
    "field, value",
    [
        ("d_model", 0),
        ("n_layers", -1),
        ("vocab_size", 2.5),
        ("mamba_d_state", True),
        ("rwkv_n_heads", 3),  # does not divide d_model 32
        ("mamba_headdim", 24),  # does not divide expand * d_model = 64
        ("mamba_ngroups", 3),  # does not divide the 4 Mamba2 heads
        ("kernels", "cuda"),
        ("activation_checkpointing", "yes"),
        ("rwkv_gain_init", float("nan")),
    ],
)
def test_bad_config_raises_value_error_naming_the_field(field, value):
    assert field in {f.name for f in dataclasses.fields(HybridConfig)}
    with pytest.raises(ValueError, match=field):
        HybridConfig(**{**TINY, field: value})
