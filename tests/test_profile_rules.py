"""Where a step's time goes (issue 36 item 4): the rules of trainables/training/profile.py on synthetic profiler tables,
plain records as a GPU's kernels or a CPU's ops would give them, so they are tested without a GPU."""

from __future__ import annotations

import pytest

from trainables.training.profile import (
    HOST_WRAPPERS,
    OpTime,
    TopOp,
    classify,
    kernels_hidden,
    op_kind,
    short_name,
    summarize,
    top_ops,
    union_us,
)

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)"  # noqa: E501


def test_a_device_idle_most_of_a_step_is_launch_bound_whatever_its_kernels():
    ops = [OpTime(GEMM, 900.0), OpTime(ELEMENTWISE, 100.0)]
    bound, reason = classify(ops, busy=0.31)
    assert bound == "launch" and "31%" in reason


def test_gemm_like_kernels_dominating_a_busy_device_is_compute_bound():
    ops = [OpTime(GEMM, 700.0), OpTime("triton_tem_fused_mm_0", 100.0), OpTime(ELEMENTWISE, 200.0)]
    bound, reason = classify(ops, busy=0.9)
    assert bound == "compute" and "80%" in reason


def test_elementwise_and_reductions_dominating_a_busy_device_is_memory_bound():
    ops = [
        OpTime(GEMM, 300.0),
        OpTime("triton_red_fused_add_mean_pow_rsqrt_0", 300.0),
        OpTime("triton_poi_fused_mul_sigmoid_1", 250.0),
        OpTime("Memcpy DtoD (Device -> Device)", 150.0),
    ]
    bound, reason = classify(ops, busy=0.95)
    assert bound == "memory" and "70%" in reason


@pytest.mark.parametrize(
    "name, kind",
    [
        ("aten::mm", "compute"),
        ("aten::addmm", "compute"),
        ("aten::bmm", "compute"),
        ("ampere_sgemm_128x64_tn", "compute"),
        ("flash_fwd_kernel", "compute"),
        ("chunk_rwkv6_fwd_kernel_h", "compute"),
        ("aten::mul", "memory"),
        ("aten::_log_softmax", "memory"),
        ("triton_poi_fused_add_0", "memory"),
        ("Memset (Device)", "memory"),
        ("causal_conv1d_fwd_kernel", "memory"),
        ("_chunk_cumsum_fwd_kernel", "memory"),
        ("_chunk_scan_fwd_kernel", "compute"),
    ],
)
def test_an_op_is_classed_by_its_name(name, kind):
    assert op_kind(name) == kind


def test_kernels_hidden_in_cuda_graphs_are_judged_by_the_host():
    replay = [OpTime("cudaGraphLaunch", 5_000.0), OpTime("aten::zeros", 200.0)]
    bound, reason = classify(replay, busy=None, host_busy=0.1)
    assert bound == "device" and "CUDA graphs" in reason and "10%" in reason
    bound, reason = classify(replay, busy=None, host_busy=0.8)
    assert bound == "launch" and "80%" in reason


def test_a_kernel_name_loses_its_cpp_clothes_and_equal_names_merge():
    assert short_name(ELEMENTWISE) == "vectorized_elementwise_kernel"
    assert short_name("aten::mm") == "aten::mm"
    assert short_name("Memcpy HtoD (Pageable -> Device)") == "Memcpy HtoD"
    anonymous = (
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, float>(float*, float const*, int)"
    )
    assert short_name(anonymous) == "cunn_SoftMaxForward"  # not "": the namespace's "(" is not the arguments'
    assert short_name("void at::native::(anonymous)::x") != ""
    other = ELEMENTWISE.replace("<4,", "<8,")
    ranked = top_ops([OpTime(ELEMENTWISE, 100.0), OpTime(GEMM, 600.0), OpTime(other, 300.0)])
    assert ranked == (TopOp(GEMM, 0.6, "compute"), TopOp("vectorized_elementwise_kernel", 0.4, "memory"))
    assert len(top_ops([OpTime(f"k{i}", 1.0) for i in range(9)])) == 5


def test_the_device_is_busy_for_the_union_of_its_intervals():
    assert union_us([(0, 10), (5, 15), (20, 30)]) == 25  # two streams overlapping count once
    assert union_us([]) == 0


def test_the_summary_measures_busy_against_the_step_and_keeps_the_fields():
    ops = [OpTime(GEMM, 6_000.0), OpTime(ELEMENTWISE, 2_000.0)]
    found = summarize(ops, steps=10, step_ms=2.0, busy_us=6_200.0, host_us=19_000.0, measured_on="cuda")
    assert (found.bound, found.busy, found.steps, found.step_ms) == ("launch", 0.31, 10, 2.0)
    assert found.compute_share == 0.75 and found.top_ops[0] == TopOp(GEMM, 0.75, "compute")
    assert found.line().startswith("launch-bound (device busy 31% of a step); top ops: sm90_xmma_gemm")
    hidden = summarize([OpTime("cudaGraphLaunch", 100.0)], steps=10, step_ms=2.0, busy_us=None, host_us=400.0)
    assert hidden.busy is None and hidden.bound == "device" and "CUDA graphs" in hidden.line()


def test_cuda_graphs_hid_their_kernels_when_fewer_kernels_than_replays_were_seen():
    replays = ["cudaGraphLaunch"] * 10
    assert kernels_hidden(replays, ["Memcpy HtoD (Pinned -> Device)"] * 10)  # the batches' copies only
    assert not kernels_hidden(replays, [GEMM, ELEMENTWISE] * 40)  # the graphs' kernels are shown
    assert not kernels_hidden(["cudaLaunchKernel"] * 10, [])  # no graphs: an idle device is just idle


def test_an_inductor_graph_on_a_cpu_is_op_work_under_one_name():
    graph = "## Call CompiledFxGraph fibxymzkl7pftiycukoetzp4ez3qldc6uy4bezjv4xezoljdkjwz ##"
    assert short_name(graph) == "CompiledFxGraph (Inductor's kernels)"
    ranked = top_ops(
        [OpTime(graph, 300.0), OpTime(graph.replace("fib", "fj7"), 300.0), OpTime("aten::mm", 400.0)]
    )
    assert ranked[0] == TopOp("CompiledFxGraph (Inductor's kernels)", 0.6, "memory")


@pytest.mark.parametrize(
    "name",
    ["AddmmBackward0", "torch::autograd::AccumulateGrad", "autograd::engine::evaluate_function: MmBackward0",
     "Optimizer.step#AdamW.step", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "ProfilerStep#3"],
)  # fmt: skip
def test_wrappers_around_ops_are_no_ops(name):
    assert HOST_WRAPPERS.search(name)
    assert not HOST_WRAPPERS.search("aten::mm") and not HOST_WRAPPERS.search(
        "aten::_log_softmax_backward_data"
    )
