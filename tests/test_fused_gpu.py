"""The fused kernels as custom ops, on a GPU: the same numbers as the torch reference, eager and compiled,
and the whole model traced as ONE graph (no breaks) so CUDA graphs capture the kernels too.

GPU only (marker `gpu`, deselected by default): `python -m pytest -m gpu tests/test_fused_gpu.py`.
"""

import pytest
import torch

from model import HybridConfig, HybridLM, ops
from model.ops import tuning

pytestmark = pytest.mark.gpu

SEED_SIZE = dict(vocab_size=65, d_model=128, n_layers=2, seq_len=256)
TOL = {torch.float32: dict(rtol=5e-3, atol=5e-3), torch.bfloat16: dict(rtol=3e-2, atol=3e-2)}


@pytest.fixture(scope="module", autouse=True)
def shipped_autotune_results():
    """What a fused run does first (trainables/training/loop.py): this GPU's shipped autotune results into Triton's
    cache. Without them every test autotuned its kernels cold; the file had not finished after 11 minutes
    beside other work on an H200. The shapes below are the default model's (heads of 32, SSD state
    64, chunks of 64), which the shipped results were tuned for."""
    tuning.install_for_this_gpu()


def model_pair(dtype):
    """The same weights with the torch reference ops and with the fused kernels."""
    torch.manual_seed(0)
    ref = HybridLM(HybridConfig(**SEED_SIZE, kernels="torch")).cuda()
    fused = HybridLM(HybridConfig(**SEED_SIZE, kernels="fused")).cuda()
    fused.load_state_dict(ref.state_dict())
    return ref, fused


def batch(b=4):
    g = torch.Generator(device="cuda").manual_seed(1)
    idx = torch.randint(0, SEED_SIZE["vocab_size"], (b, SEED_SIZE["seq_len"] + 1), device="cuda", generator=g)
    return idx[:, :-1], idx[:, 1:]


def loss_and_grads(model, x, y, dtype):
    model.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
        loss = model(x, y)[1]
    loss.backward()
    # a compiled module names its parameters "_orig_mod.<name>"
    grads = {
        n.removeprefix("_orig_mod."): p.grad.clone()
        for n, p in model.named_parameters()
        if p.grad is not None
    }
    return loss.detach(), grads


def assert_close_grads(a, b, dtype):
    assert a.keys() == b.keys()
    for name in a:
        scale = a[name].abs().max().clamp_min(1e-6)
        torch.testing.assert_close(b[name] / scale, a[name] / scale, **TOL[dtype], msg=name)


def test_custom_ops_pass_opcheck():
    from model.ops.conv_fused import causal_conv1d_fwd
    from model.ops.rwkv6_fused import rwkv6_fwd
    from model.ops.ssd_fused import ssd_fwd

    B, T, H, K = 2, 128, 4, 32  # the default model's RWKV heads
    r, k, v = (torch.randn(B, T, H, K, device="cuda", requires_grad=True) for _ in range(3))
    w = (-torch.rand(B, T, H, K, device="cuda") - 0.01).requires_grad_()
    u = torch.randn(H, K, device="cuda", requires_grad=True)
    torch.library.opcheck(rwkv6_fwd, (r, k, v, w, u))
    x = torch.randn(B, T, 4, 32, device="cuda", requires_grad=True)
    dt = torch.rand(B, T, 4, device="cuda").add(0.01).requires_grad_()
    A = (-torch.rand(4, device="cuda") - 0.5).requires_grad_()
    Bm, Cm = (torch.randn(B, T, 1, 64, device="cuda", requires_grad=True) for _ in range(2))
    D = torch.ones(4, device="cuda", requires_grad=True)
    torch.library.opcheck(ssd_fwd, (x, dt, A, Bm, Cm, D, 64))
    # conv: channel-last (a slice of a wider projection, as the model's xBC) and [B, D, T] (D = 12)
    wide = torch.randn(B, T, 72, device="cuda", requires_grad=True)
    for x in (wide[..., 8:40], torch.randn(B, T, 12, device="cuda", requires_grad=True)):
        weight = torch.randn(x.shape[-1], 4, device="cuda", requires_grad=True)
        for bias in (torch.randn(x.shape[-1], device="cuda", requires_grad=True), None):
            for silu in (True, False):
                torch.library.opcheck(causal_conv1d_fwd, (x, weight, bias, silu))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("width", [72, 12])  # x = a channel-last slice [..., 8:40]; D = 12: [B, D, T] copies
@pytest.mark.parametrize("with_bias", [True, False])  # with bias and silu; neither
def test_fused_conv_matches_torch_in_both_layouts(dtype, width, with_bias):
    g = torch.Generator(device="cuda").manual_seed(0)
    proj = torch.randn(2, 100, width, device="cuda", generator=g).to(dtype)
    weight = torch.randn(min(width, 32), 4, device="cuda", generator=g)
    bias = torch.randn(weight.shape[0], device="cuda", generator=g) if with_bias else None
    results = []
    for backend in ("torch", "mamba_ssm"):
        leaves = [t.detach().requires_grad_() for t in (proj, weight, bias) if t is not None]
        x = leaves[0][..., 8:40] if width == 72 else leaves[0]
        y = ops.causal_conv1d(x, *leaves[1:], activation="silu" if with_bias else None, backend=backend)
        y.float().square().sum().backward()
        results.append([y] + [t.grad for t in leaves])
    for want, got in zip(*results):
        assert got.dtype == want.dtype
        scale = want.abs().max()
        torch.testing.assert_close(got / scale, want / scale, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_model_matches_the_reference_eager_and_compiled_as_one_graph(dtype):
    ref, fused = model_pair(dtype)
    x, y = batch()
    want_loss, want = loss_and_grads(ref, x, y, dtype)
    got_loss, got = loss_and_grads(fused, x, y, dtype)
    torch.testing.assert_close(got_loss, want_loss, **TOL[dtype])
    assert_close_grads(want, got, dtype)
    torch._dynamo.reset()
    compiled = torch.compile(fused, fullgraph=True, dynamic=False)  # a graph break would raise here
    c_loss, c_grads = loss_and_grads(compiled, x, y, dtype)
    torch.testing.assert_close(c_loss, want_loss, **TOL[dtype])
    assert_close_grads(want, c_grads, dtype)


def test_cuda_graphs_replay_the_fused_kernels_with_the_eager_numbers():
    dtype = torch.bfloat16
    ref, fused = model_pair(dtype)
    x, y = batch()
    torch._dynamo.reset()
    graphed = torch.compile(fused, mode="reduce-overhead", fullgraph=True, dynamic=False)
    for _ in range(3):  # warm-up, record, replay
        loss, grads = loss_and_grads(graphed, x, y, dtype)
    want_loss, want = loss_and_grads(ref, x, y, dtype)
    torch.testing.assert_close(loss, want_loss, **TOL[dtype])
    assert_close_grads(want, grads, dtype)
    assert ops.available_backends()["fla"] is True and ops.available_backends()["mamba_ssm"] is True


@pytest.mark.parametrize("kernels", ["torch", "fused"])
def test_blocks_compiled_one_by_one_under_cuda_graphs_match_eager(kernels):
    """compile_scope: blocks on the GPU (the loop's _compiled): each HybridBlock compiled in place under
    reduce-overhead, ONE graph shared by the blocks, the eager loss and gradients after replays."""
    from torch._dynamo.utils import counters

    dtype = torch.bfloat16
    ref, fused = model_pair(dtype)
    model = ref if kernels == "torch" else fused
    x, y = batch()
    want_loss, want = loss_and_grads(model, x, y, dtype)
    torch._dynamo.reset()
    counters.clear()
    for block in model.blocks:
        block.compile(mode="reduce-overhead", dynamic=False)
    for _ in range(3):  # warm-up, record, replay
        loss, grads = loss_and_grads(model, x, y, dtype)
    assert counters["stats"]["unique_graphs"] == 1
    torch.testing.assert_close(loss, want_loss, **TOL[dtype])
    assert_close_grads(want, grads, dtype)
