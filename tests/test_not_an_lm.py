"""Workloads that are not token LMs are first class (issue 43 item 5): the digits CNN trains in its own
unit with its accuracy, a float loss() is refused before any work, a workload that reads no corpus never
resolves one, and a classifier's report speaks in images, not in the hybrid LM's terms."""

from __future__ import annotations

import copy
import json
import re
import textwrap
from pathlib import Path

import pytest

from tests.factories import synthetic_summary
from trainables import train as train_cli
from trainables.config import ConfigError, load_config
from trainables.preflight import preflight
from tuner import search
from tuner.report import render_html, render_markdown

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "workloads" / "digits"
OVERRIDES = ["tokens=640", "timing_warmup_steps=2", "log_interval=10"]  # 20 steps of 32 images
SHORT = [arg for item in OVERRIDES for arg in ("--set", item)]

FLOAT_LOSS = """
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset

    class Job:
        unit = "images"
        def __init__(self, cfg):
            self.data = TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))
        def build_model(self):
            return nn.Linear(4, 2)
        def train_dataset(self):
            return self.data
        def loss(self, model, batch):
            x, y = batch
            return nn.functional.cross_entropy(model(x), y).item()  # a Python float: nothing to backward

    def make(cfg):
        return Job(cfg)
"""


def test_the_digits_cnn_trains_in_images_with_its_accuracy(capsys):
    pytest.importorskip("sklearn")
    code = train_cli.main(["--config", str(DIGITS / "cpu.yaml"), *SHORT, "--json"])
    out, err = capsys.readouterr()
    result = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and result["status"] == "ok"
    assert (
        result["unit"] == "images" and result["tokens"] == 640 and result["steps"] == 20
    )  # 32 images a step
    assert 0.0 <= result["val_metrics"]["accuracy"] <= 1.0 and result["val_loss"] > 0
    assert result["flops_source"] == "workload"  # its own count per image: convolutions reuse their weights
    assert "images/s" in err and "tok/s" not in err and "data:" not in err


def test_the_digits_config_counts_one_image_per_example():
    pytest.importorskip("sklearn")
    cfg = preflight(load_config(DIGITS / "cpu.yaml", OVERRIDES)).cfg
    assert cfg.units_per_example == 1 and cfg.tokens_per_step == cfg.batch_size and cfg.total_steps == 20


def _job(tmp_path: Path, source: str) -> Path:
    (tmp_path / "job.py").write_text(textwrap.dedent(source))
    config = tmp_path / "train.yaml"
    config.write_text(
        "workload: job.py:make\nbatch_size: 4\ntokens: 64\neval_tokens: 8\neval_batch_size: 4\n"
    )
    return config


def test_a_loss_that_returns_a_float_is_refused_in_one_line_naming_loss(tmp_path, capsys):
    config = _job(tmp_path, FLOAT_LOSS)
    with pytest.raises(
        ConfigError, match=r"loss\(model, batch\) returned a Python number.*not loss\.item\(\)"
    ):
        preflight(load_config(config))
    assert train_cli.main(["--config", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "loss(model, batch)" in err[0] and "float(loss)" in err[0]


def test_a_non_scalar_loss_is_refused_with_the_fix(tmp_path):
    source = FLOAT_LOSS.replace(
        "nn.functional.cross_entropy(model(x), y).item()",
        "nn.functional.cross_entropy(model(x), y, reduction='none')",
    )
    with pytest.raises(
        ConfigError, match=r"loss\(model, batch\) returned a tensor of shape \(2,\).*loss\.mean\(\)"
    ):
        preflight(load_config(_job(tmp_path, source)))


def test_a_workload_that_reads_no_corpus_never_resolves_one(tmp_path, monkeypatch):
    pytest.importorskip("sklearn")

    def resolver(*_args, **_kwargs):
        raise AssertionError("the corpus resolver was called for a workload that reads no corpus")

    monkeypatch.setattr(search, "resolve_corpus", resolver)
    monkeypatch.setattr("trainables.data.resolve_corpus", resolver)
    argv = ["--config", str(DIGITS / "cpu.yaml"), "--out", str(tmp_path / "out")]
    cfg, corpus, info = search.read_config(search.build_parser().parse_args(argv), tmp_path / "out")
    assert corpus is None and not info.reads_corpus and info.unit == "images"
    assert cfg.train.units_per_example == 1 and cfg.train.data_sha256 is None


def test_data_for_a_workload_that_reads_no_corpus_is_refused(tmp_path):
    pytest.importorskip("sklearn")
    with pytest.raises(ConfigError, match=r"'data'.*reads none.*reads_corpus = True"):
        preflight(load_config(DIGITS / "cpu.yaml", ["data=corpus.txt"]))


def _classifier_summary() -> dict:
    """The synthetic GPU search as a classifier's: images, no fused kernels, an accuracy for each answer."""
    summary = copy.deepcopy(synthetic_summary())
    summary["unit"] = "images"
    summary["knobs_left_out"] = ["kernels", "mamba_lr_mult"]
    summary["hardware"]["backends"] = {"torch": True, "fla": True, "mamba_ssm": True}
    summary["versions"] = {k: v for k, v in summary["versions"].items() if k in ("torch", "ray", "optuna")}
    summary["baseline"]["val_metrics"] = {"accuracy": 0.9861}
    summary["best"]["val_metrics"] = {"accuracy": 0.9889}
    return summary


def test_a_classifiers_report_speaks_in_images_and_gives_its_accuracy():
    summary = _classifier_summary()
    md = render_markdown(summary)
    page = re.sub(r"<style.*?</style>|<script.*?</script>", "", render_html(summary), flags=re.S)
    for text in (md, page):
        assert not re.search(r"tok/s|tokens/s|\bfla\b|mamba_ssm|smoke config|attention-like", text, re.I)
        assert "images/s" in text and "accuracy" in text
    assert "Its accuracy is 0.9889 against the baseline's 0.9861." in md
    assert "Images/s" in md  # the table's heading


MLP = ROOT / "tests" / "mlp_without_unit.py"


def _mlp_config(tmp_path: Path, factory: str) -> Path:
    """The issue's budget: 1,792 steps of 32 examples; counted as 256 tokens an example, 7."""
    config = tmp_path / f"{factory}.yaml"
    config.write_text(
        f"workload: {MLP}:{factory}\nbatch_size: 32\ntokens: 57344\neval_tokens: 64\neval_batch_size: 32\n"
    )
    return config


def test_a_workload_whose_examples_are_not_token_windows_and_declares_no_unit_is_refused(tmp_path, capsys):
    """Issue 56 item 3: a workload that declares no unit is counted as an LM, seq_len tokens an example; one
    whose examples hold no window of seq_len token ids is refused before any work, in one line naming `unit`,
    by both entry points (exit 2, no Ray started, nothing written)."""
    config = _mlp_config(tmp_path, "make_workload")
    assert train_cli.main(["--config", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "declares no unit" in err[0] and 'unit = "examples"' in err[0], err
    assert "count as 256 tokens ('seq_len')" in err[0] and "one example: float32 (8,), int64 ()" in err[0]

    search_config = tmp_path / "search.yaml"
    search_config.write_text(
        f"train:\n  workload: {MLP}:make_workload\n  batch_size: 32\n  tokens: 57344\n"
        "search:\n  space:\n    batch_size: [16, 32]\n"
    )
    out = tmp_path / "out"
    assert search.main(["--config", str(search_config), "--out", str(out)]) == 2
    last = capsys.readouterr().err.strip().splitlines()
    assert "declares no unit" in last[-1] and "'train.seq_len'" in last[-1] and not out.exists()

    counted = preflight(load_config(_mlp_config(tmp_path, "make_counted_workload"))).cfg
    assert counted.units_per_example == 1 and counted.total_steps == 1792
