"""The two examples a user copies, as the README runs them, from a working directory that is neither the
repository nor the example's folder: each trains with `--set model.<own key>=...` changing the built
model, trains to the same loss with `loader=device` as with the DataLoader (the HF one with activation
checkpointing too), and (slow, nanoGPT's) runs a small CPU search to exit 0 or 3 whose best.yaml trains from anywhere."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.answer_checks import check_answer
from tests.user_env import user_env

REPO = Path(__file__).resolve().parents[1]
SHAKESPEARE = REPO.parent / "shared" / "data" / "tinyshakespeare.txt"
# (config, a key of its own model, a smaller value, a larger one)
EXAMPLES = {
    "nanogpt": ("examples/nanogpt/search.yaml", "n_layer", 1, 2),
    "hf_llama": ("examples/hf_llama/search.yaml", "num_hidden_layers", 1, 2),
}
ENV = {**user_env(), "PYTHONPATH": str(REPO), "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.fixture
def corpus(tmp_path) -> str:
    if SHAKESPEARE.is_file():
        return str(SHAKESPEARE)
    path = tmp_path / "corpus.txt"
    path.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n" * 2000)
    return str(path)


def run(module: str, *args: str, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# (the example's own settings for every run, the knobs of each run): runs of one example give one loss
SAME_LOSS = {
    # dropout on: neither loader may draw from the generator that dropout draws from
    "nanogpt": (["model.dropout=0.1"], [["loader=dataloader"], ["loader=device"]]),
    "hf_llama": (
        [],
        [["loader=dataloader"], ["loader=device"], ["loader=device", "activation_checkpointing=true"]],
    ),
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_each_example_trains_to_the_same_loss_with_the_device_loader(
    name, tmp_path, corpus, capfd, monkeypatch
):
    """Each run trains once from another cwd; a last one with `--set model.<own key>=` the smaller value
    builds a smaller model than the others (the example's own value, the larger one) and trains too. The runs
    call the CLI's main in this process (a new process each cost 4 imports of torch and transformers); the
    slow search test runs the CLI as a process from another cwd."""
    pytest.importorskip("transformers") if name == "hf_llama" else None
    from trainables.train import main

    config, key, small, large = EXAMPLES[name]
    assert yaml.safe_load((REPO / config).read_text())["train"]["model"][key] == large
    settings, runs = SAME_LOSS[name]
    losses, params = {}, {}
    monkeypatch.chdir(tmp_path)
    for knobs in [*runs, [f"model.{key}={small}"]]:
        sets = [f"--set={item}" for item in [*settings, *knobs, "tokens=4096"]]
        code = main(["--config", str(REPO / config), "--data", corpus, "--json", *sets])
        out, err = capfd.readouterr()
        assert code == 0, err[-2000:]
        result = json.loads(out.strip().splitlines()[-1])
        assert result["status"] == "ok" and result["steps"] == 4
        params[knobs[0]] = result["params"]
        if knobs[0].startswith("model."):  # the smaller model's run: its loss is its own
            continue
        assert f"{knobs[0]})" in err  # the run's own line says which loader it trained with
        losses[" ".join(knobs)] = (result["train_loss"], result["val_loss"])
    assert len(set(losses.values())) == 1, losses
    assert params[f"model.{key}={small}"] < params["loader=dataloader"]


def test_the_hf_example_leaves_activation_checkpointing_to_the_loop(corpus):
    pytest.importorskip("transformers")
    from trainables.config import load_config
    from trainables.workloads.workload import check_workload, load_workload

    config = REPO / EXAMPLES["hf_llama"][0]
    built = {}
    for on in (False, True):
        cfg = load_config(config, [f"activation_checkpointing={str(on).lower()}"], data=corpus)
        assert "activation_checkpointing" in check_workload(cfg).supports
        model = load_workload(cfg).build_model()
        # transformers 5.24 renamed the flag; the GPU machines' 5.17 may have only the old name
        renamed = hasattr(type(model), "is_activation_checkpointing")
        built[on] = model.is_activation_checkpointing if renamed else model.is_gradient_checkpointing
    assert built == {False: False, True: False}  # the loop checkpoints its decoder layers, never HF too


# One example searches: the search path is the same for both (a file workload from another folder); the
# HF model's own training, device loader and checkpointing are the fast tests above.
@pytest.mark.slow
@pytest.mark.parametrize("name", ["nanogpt"])
def test_each_example_searches_on_cpu_and_its_best_yaml_trains_from_anywhere(name, tmp_path, corpus):
    config, key, small, _ = EXAMPLES[name]
    (tmp_path / "here").mkdir()
    proc = run(
        "tuner.search", "--config", str(REPO / config), "--data", corpus, "--out", "out",
        "--set", f"train.model.{key}={small}", "--set", "search.trials=3", cwd=tmp_path / "here",
    )  # fmt: skip
    assert proc.returncode in (0, 3, 4), proc.stderr[-3000:]  # 4: the machine was busy; best.yaml is written
    check_answer(tmp_path / "here" / "out", proc.returncode)  # on every exit: it holds, best.yaml trains it
    best = yaml.safe_load((tmp_path / "here" / "out" / "best.yaml").read_text())
    assert best["model"][key] == small and "kernels" not in best
    assert Path(best["workload"].rpartition(":")[0]).is_absolute()
    run_it = [line for line in proc.stderr.splitlines() if "run it:" in line or "best.yaml" in line]
    assert run_it, proc.stderr[-2000:]
    trained = run(
        "trainables.train", "--config", str(tmp_path / "here" / "out" / "best.yaml"), "--set", "tokens=2048",
        cwd=tmp_path,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-2000:]


@pytest.mark.slow
def test_a_second_search_on_the_nanogpt_example_finds_its_compiles_in_the_keyed_cache(tmp_path, corpus):
    """Issue 56: a file-loaded workload's compile cache is the search's own, kept, keyed and named in
    best.yaml as the built-in model's is, so a second search on it compiles nothing anew. (The checks before
    work built the model on meta, torch set TORCHINDUCTOR_CACHE_DIR as it imported Dynamo, and the search
    took that for the user's own export: unkeyed, best.yaml `compile_cache: null`.) On a CPU the search
    leaves `compile` out of the recipe, so the space offers it."""
    cfg = yaml.safe_load((REPO / EXAMPLES["nanogpt"][0]).read_text())
    cfg["train"].update(
        workload=f"{REPO / 'examples' / 'nanogpt' / 'job.py'}:make_workload",
        model={"n_layer": 1, "n_head": 2, "n_embd": 32}, seq_len=32, tokens=16384, eval_tokens=2048,
        eval_batch_size=16, timing_warmup_steps=2,
    )  # fmt: skip
    cfg["search"] = {
        "space": {"compile": ["none", "default"]}, "start_points": [{"compile": "default"}], "trials": 2,
        "screen_steps": 4, "early_stop_ratio": 0, "loss_check_top": 1, "remeasure_top": 1, "repeats": 2,
        "recipe": None,
    }  # fmt: skip
    (tmp_path / "search.yaml").write_text(yaml.safe_dump(cfg))
    cache = tmp_path / "cache"
    runs = []
    for out in ("first", "second"):
        proc = run(
            "tuner.search", "--config", "search.yaml", "--data", corpus, "--out", out, "--fresh",
            "--cache-dir", str(cache), cwd=tmp_path,
        )  # fmt: skip
        assert proc.returncode in (0, 3, 4), proc.stderr[-3000:]  # 4: the machine was busy
        assert f"compile cache: {cache}" in proc.stderr and "the dirs you exported" not in proc.stderr
        assert yaml.safe_load((tmp_path / out / "best.yaml").read_text())["compile_cache"] == str(cache)
        runs.append(json.loads((tmp_path / out / "summary.json").read_text()))
    assert runs[0]["compile_cache"] == runs[1]["compile_cache"] == str(cache)
    (key,) = [d for d in cache.iterdir() if (d / "key.json").is_file()]  # one key: this CPU and software
    assert any((key / "inductor" / "fxgraph").rglob("*")), "the graphs went to the keyed cache"
    # the graphs a run compiles are its phase's (a loss run's are not a screen run's) at its compile mode
    compiled: list[dict[tuple, set]] = [{}, {}]
    for found, summary in zip(compiled, runs):
        for r in summary["trials"]:
            if r["compile_cache_use"]:
                found.setdefault((r["phase"], r["train"]["compile"]), set()).add(r["compile_cache_use"])
    screened = ("screen", "default")  # the start point: never stopped early
    assert (compiled[0].get(screened), compiled[1].get(screened)) == ({"miss"}, {"hit"}), compiled
    # all that the first compiled, the second found
    assert all(compiled[1][run] == {"hit"} for run in compiled[1].keys() & compiled[0].keys()), compiled
