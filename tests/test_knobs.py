"""Knob classes: every TrainConfig field declares one, and the lists the search tells knobs apart by are
derived from them (the sets here are the ones the search was built on; a new field changes them on purpose)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from trainables.config import ConfigError, TrainConfig, make_config
from trainables.config_fields import ExecutionKnobs, LossKnobs, RunSettings
from tuner.space.domains import applicable, capabilities
from tuner.space.knobs import (
    CLASSES,
    GRAPH_FIELDS,
    HARDWARE_KNOBS,
    RUN_ONLY_FIELDS,
    SPEED_ONLY_KNOBS,
    is_loss_knob,
)


def test_every_train_config_field_declares_its_class():
    assert set(CLASSES) == set(TrainConfig.model_fields)
    assert [name for name, c in CLASSES.items() if c is None] == []


def test_each_group_of_fields_holds_the_knobs_of_its_class_and_train_config_reads_them_in_that_order():
    groups = {"loss": LossKnobs, "execution": ExecutionKnobs, "run": RunSettings}
    for kind, group in groups.items():
        strays = {name: CLASSES[name].kind for name in group.model_fields if CLASSES[name].kind != kind}
        assert strays == {}, f"{group.__name__} holds fields of another class"
    in_order = [name for group in groups.values() for name in group.model_fields]
    assert list(TrainConfig.model_fields) == in_order
    assert list(make_config({"batch_size": 16}).model_dump())[:3] == ["workload", "model", "data"]


def test_a_check_across_groups_still_sees_the_other_groups_field():
    """micro_batch (an execution knob) must divide batch_size (a loss knob), on load and on assignment."""
    assert make_config({"batch_size": 8, "micro_batch": 4}).forward_batch == 4
    for values in ({"batch_size": 8, "micro_batch": 3}, {"micro_batch": 3}):  # 8 is the default batch
        with pytest.raises(ConfigError, match=r"config key 'micro_batch': must divide batch_size 8"):
            make_config(values)
    cfg = make_config({})
    with pytest.raises(ValidationError, match="must divide batch_size 8"):
        cfg.micro_batch = 5


def test_the_derived_lists_are_the_ones_the_search_needs():
    assert {
        "compile", "compile_scope", "kernels", "loader", "num_workers", "pin_memory", "fused_adamw",
        "activation_checkpointing", "micro_batch",
    } == SPEED_ONLY_KNOBS  # fmt: skip
    assert {
        "device", "out_dir", "save_model", "log_interval", "progress_s", "timing_warmup_steps",
        "gpu_memory_fraction", "memory_cap_mb", "max_steps", "compile_cache", "compile_deadline_s",
        "workload_path", "cpu_threads", "compile_threads", "profile_steps",
    } == RUN_ONLY_FIELDS  # fmt: skip
    assert GRAPH_FIELDS == (
        "workload", "model", "seq_len", "batch_size", "precision", "micro_batch", "compile", "compile_scope",
        "kernels", "activation_checkpointing",
    )  # fmt: skip
    assert {name for name in CLASSES if is_loss_knob(name)} == {
        "workload", "model", "data", "data_sha256", "seq_len", "tokens", "eval_interval", "eval_tokens",
        "eval_batch_size", "batch_size", "grad_accum", "lr", "min_lr", "lr_scaling", "lr_base_batch",
        "warmup_frac", "mamba_lr_mult", "weight_decay", "beta1", "beta2", "grad_clip", "precision", "seed",
            "units_per_example",
    }  # fmt: skip
    assert is_loss_knob("a_field_of_tomorrow")  # unclassified names are judged by their loss


def test_the_hardware_table_comes_from_the_fields():
    needs = {name: dict(c.needs) for name, c in HARDWARE_KNOBS.items()}
    assert needs == {
        "precision": {"tf32": "cuda", "bf16": "bf16"},
        "compile": {"reduce-overhead": "cuda", "max-autotune": "cuda"},
        "kernels": {"fused": "fused", "auto": "cuda"},
        "pin_memory": {True: "cuda"},
    }
    assert {need for n in needs.values() for need in n.values()} <= set(capabilities({}))
    assert all(c.why for c in HARDWARE_KNOBS.values())


def test_a_gpu_without_bf16_or_fused_kernels_drops_just_those():
    space = {
        "precision": ["fp32", "tf32", "bf16"],
        "kernels": ["torch", "fused", "auto"],
        "compile": ["none"],
    }
    hw = {"cuda": True, "bf16": False, "backends": {"fla": True, "mamba_ssm": "missing"}}
    out, fixed, notices = applicable(space, hw)
    assert out == {"precision": ["fp32", "tf32"], "kernels": ["torch", "auto"]} and fixed == {
        "compile": "none"
    }
    assert notices == [
        "dropped precision=['bf16']: no CUDA tensor cores / no native bf16 here",
        "dropped kernels=['fused']: fused kernels need CUDA with fla and mamba_ssm importable",
    ]


def test_a_runs_identity_leaves_out_exactly_the_fields_declared_placement():
    """Where a run is placed or its files go is declared on TrainConfig's fields (KnobClass.placement), not
    kept in a list: these eight, and a resume finds a run done on other GPU shares or from another folder."""
    from trainables.spec import TrialSpec
    from tuner.runs.request import Role, spec_key
    from tuner.space.knobs import PLACEMENT_FIELDS

    assert {
        "device", "gpu_memory_fraction", "memory_cap_mb", "cpu_threads", "compile_threads", "compile_cache",
        "out_dir", "workload_path",
    } == PLACEMENT_FIELDS  # fmt: skip
    here = TrialSpec.of({"batch_size": 8, "gpu_memory_fraction": 0.25, "out_dir": "/tmp/a"})
    there = TrialSpec.of({"batch_size": 8, "gpu_memory_fraction": 0.5, "cpu_threads": 3})
    assert spec_key(here, Role.LOSS) == spec_key(there, Role.LOSS)
    assert spec_key(here, Role.LOSS) != spec_key(TrialSpec.of({"batch_size": 16}), Role.LOSS)
