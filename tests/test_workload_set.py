"""The public workload set (workloads/set.yaml) and its bench (bench/workloads.py): every entry's CPU and GPU
configs exist and load as search configs with the usual recipe on, and the bench's table reads a search's
OUT the way the sitting writes it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from tuner.config import RECIPE, load_search_config

ROOT = Path(__file__).resolve().parents[1]
SET = yaml.safe_load((ROOT / "workloads" / "set.yaml").read_text())
spec = importlib.util.spec_from_file_location("workloads_bench", ROOT / "bench" / "workloads.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_the_set_holds_the_models_the_issue_names_and_one_that_is_no_language_model():
    assert {"hybrid", "hybrid-100m", "nanogpt", "hf_llama", "digits"} <= set(SET)
    assert all(entry.get("data") in ("corpus", "own") for entry in SET.values())


@pytest.mark.parametrize("name", sorted(SET))
@pytest.mark.parametrize("size", ["cpu", "gpu"])
def test_each_entry_has_a_config_that_loads_with_the_recipe_on(name, size):
    path = ROOT / SET[name][size]
    assert path.is_file(), f"{name}: {path} is missing"
    cfg = load_search_config(str(path))
    recipe = cfg.search.recipe
    # the usual recipe; a stack of equal blocks may compile block by block (configs/default.yaml says why)
    assert {k: v for k, v in recipe.items() if k != "compile_scope"} == RECIPE
    assert recipe.get("compile_scope", "model") in ("model", "blocks")


def _out(tmp_path: Path) -> Path:
    out = tmp_path / "nanogpt"
    out.mkdir()
    summary = {
        "baseline": {"tokens_per_s": 500_000.0, "val_loss": 1.74},
        "best": {"id": "screen-3", "val_loss": 1.75},
        "loss_limit": {"limit": 1.79},
        "recipe": {"knobs": RECIPE, "trial": "screen-1", "val_loss": 1.75, "feasible": True},
    }
    (out / "summary.json").write_text(json.dumps(summary))
    return out


def test_a_row_gives_the_medians_of_the_pair_and_their_ratio(tmp_path):
    speeds = {"recipe": [2.0e6, 2.2e6, 2.1e6], "answer": [2.5e6, 2.6e6]}
    got = bench.row("nanogpt", 0, 181.4, _out(tmp_path), speeds)
    assert (got["recipe_alone"], got["answer_alone"]) == (2.1e6, 2.55e6)
    assert got["answer_over_recipe"] == pytest.approx(2.55 / 2.1)
    assert (got["answer"], got["answer_loss"], got["limit"], got["search_s"]) == ("screen-3", 1.75, 1.79, 181)
    line = bench.table([got]).splitlines()[2]
    assert "nanogpt (screen-3)" in line and "2,100,000" in line and "1.21x" in line and "1.7500 ✓" in line


def test_an_answer_that_is_the_recipe_is_said_so_beside_the_ratio(tmp_path):
    """H200, 2026-11-30: nanoGPT's best.yaml was its recipe.yaml, one run each alone at 1.21M and 1.49M tok/s:
    0.81x is the spread of two runs of one config, not an answer slower than the recipe."""
    out = _out(tmp_path)
    config = "batch_size: 64\nprecision: bf16\ncompile: default\n"
    (out / "recipe.yaml").write_text("# the usual hand recipe\n" + config)
    (out / "best.yaml").write_text("# the search's answer\n" + config)
    got = bench.row("nanogpt", 0, 316.0, out, {"recipe": [1.49e6], "answer": [1.21e6]})
    assert got["answer_is_recipe"] is True
    assert "0.81x (the answer is the recipe: the spread of two runs)" in bench.table([got])
    (out / "best.yaml").write_text(config.replace("bf16", "fp16"))
    got = bench.row("nanogpt", 0, 316.0, out, {"recipe": [1.49e6], "answer": [1.21e6]})
    assert got["answer_is_recipe"] is False and "| 0.81x |" in bench.table([got])


def test_the_baseline_kept_and_a_failed_pair_still_make_a_row(tmp_path):
    out = _out(tmp_path)
    summary = json.loads((out / "summary.json").read_text())
    (out / "summary.json").write_text(json.dumps({**summary, "best": None}))
    got = bench.row("nanogpt", 3, 90.0, out, {"recipe": [], "answer": [5.0e5]})
    assert (got["answer"], got["answer_loss"], got["answer_over_recipe"]) == ("baseline", 1.74, None)
    assert "| — |" in bench.table([got])


def test_an_unknown_entry_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        bench.main(["--size", "cpu", "--only", "nope", "--out", "/tmp/never-written"])
    assert stop.value.code == 2
    assert "unknown workload(s) ['nope']" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(n for n in SET if n not in ("hybrid", "hybrid-100m")))
@pytest.mark.parametrize("size", ["cpu", "gpu"])
def test_each_entrys_model_settings_are_ones_its_adapter_takes(name, size):
    """The factory's own schema reads train.model, as the search's pre-check does (a GPU config once named
    a key its adapter lacks, and the sitting's first try was refused)."""
    import inspect

    from trainables.workloads.user_code import load_factory, parse_spec
    from trainables.workloads.workload import settings

    cfg = load_search_config(str(ROOT / SET[name][size]))
    factory = load_factory(parse_spec(cfg.train.workload, "train.workload"), "train.workload")
    params = list(inspect.signature(factory).parameters.values())
    assert len(params) == 2, f"{name}: its factory takes the model's settings"
    settings(params[1].annotation, cfg.train.model)  # ConfigError, one line, on a key it does not take
