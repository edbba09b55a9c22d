"""Bad input caught before any work: the search runs the checks `python -m trainables.train` makes (one
function, trainables/preflight.py) before Ray starts and before OUT is touched; a config that needs CUDA on
a machine without it is the machine's fault (exit 5), refused as early; durations in plain seconds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.user_env import user_env
from trainables import train
from trainables.common.errors import EnvironmentFault
from trainables.common.exit_codes import Exit
from trainables.config import ConfigError, make_config
from trainables.preflight import check_cuda, preflight
from tuner import search
from tuner.config import SearchSection, load_search_config

ROOT = Path(__file__).resolve().parents[1]
SMOKE = str(ROOT / "configs" / "smoke.yaml")
SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"


@pytest.fixture
def corpus(tmp_path) -> Path:
    if SHAKESPEARE.exists():
        return SHAKESPEARE
    path = tmp_path / "corpus.txt"  # a stand-in of the same shape: enough text for the smoke model
    path.write_text("".join(chr(32 + (i * 7919) % 90) for i in range(400_000)))
    return path


@pytest.fixture
def no_ray(monkeypatch):
    """Ray must not start: a check that came after it would fail this test, not pass it."""

    def refuse(*args, **kwargs):
        raise AssertionError("Ray started before the bad input was caught")

    monkeypatch.setattr("tuner.session.ray_session.connect", refuse)


def refused_by_search(capsys, out: Path, data: Path, *argv: str, code: int = Exit.BAD_INPUT) -> str:
    assert search.main(["--config", SMOKE, "--out", str(out), "--data", str(data), *argv]) == code
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert not out.exists(), list(out.iterdir())  # nothing written, not even an empty OUT
    return lines[0]


def refused_by_train(capsys, data: Path, *argv: str, code: int = Exit.BAD_INPUT) -> str:
    assert train.main(["--config", SMOKE, "--data", str(data), *argv]) == code
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


@pytest.mark.parametrize(
    "key, value, needle",
    [
        ("workload", "no_such_module:make", "workload': no module named 'no_such_module'"),
        (
            "seq_len",
            "5000000",
            "config key 'seq_len': 5,000,000 is too long for the corpus's validation split",
        ),
        ("eval_tokens", "50000000", "config key 'eval_tokens': 50,000,000 is more than the validation split"),
        ("eval_batch_size", "100000", "config key 'eval_batch_size': 100,000 is more than the"),
    ],
)
def test_the_search_refuses_what_the_training_cli_refuses_with_the_same_line(
    capsys, tmp_path, corpus, no_ray, key, value, needle
):
    alone = refused_by_train(capsys, corpus, "--set", f"{key}={value}")
    line = refused_by_search(capsys, tmp_path / "out", corpus, "--set", f"train.{key}={value}")
    assert needle in alone, alone
    assert line == alone.replace(
        "key '", "key 'train."
    )  # one preflight, one wording; the search names the section


def test_a_corpus_too_small_for_seq_len_is_refused_before_ray(capsys, tmp_path, no_ray):
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("abcdefghij" * 30)  # 300 tokens: 30 in the validation split
    line = refused_by_search(capsys, tmp_path / "out", tiny)
    assert line == (
        "error: config key 'train.seq_len': 64 is too long for the corpus's validation split, 30 tokens of "
        f"file {tiny} (300 bytes); use at most 29"
    )
    assert refused_by_train(capsys, tiny) == line.replace("key 'train.", "key '")


def test_a_seq_len_longer_than_the_corpus_is_blamed_not_eval_tokens(capsys, tmp_path, corpus, no_ray):
    # eval_tokens below seq_len is refused as eval_tokens' fault, but a seq_len no split can hold comes first
    line = refused_by_train(capsys, corpus, "--set", "seq_len=5000000", "--set", "eval_tokens=1000")
    assert "config key 'seq_len': 5,000,000 is too long" in line and str(corpus) in line, line
    assert "eval_tokens" not in line


def test_an_earlier_out_is_left_as_it_was_by_bad_input(capsys, tmp_path, corpus, no_ray):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert search.main(["--config", SMOKE, "--out", str(out), "--set", "train.precision=fp8"]) == 2
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


# --- a config that needs CUDA, on a machine without it ---------------------------------------------------

NO_CUDA = pytest.mark.skipif(
    torch.cuda.is_available(), reason="the search in-process sees this machine's GPU"
)
NEEDS_CUDA = [
    ("compile", "reduce-overhead", "'reduce-overhead' needs CUDA (these modes use CUDA graphs) and this "
     "machine has none (use 'default' here, or run it on a GPU machine)"),
    ("compile", "max-autotune", "'max-autotune' needs CUDA (these modes use CUDA graphs) and this machine has "
     "none (use 'max-autotune-no-cudagraphs' here"),
    ("kernels", "fused", "'fused' needs CUDA (fused kernels need CUDA with fla and mamba_ssm importable) and "
     "this machine has none (use 'torch' here"),
    ("device", "cuda", "'cuda' asked for but this machine has no CUDA (use 'cpu' or 'auto' here"),
]  # fmt: skip


@NO_CUDA
@pytest.mark.parametrize("key, value, needle", NEEDS_CUDA)
def test_the_search_refuses_a_baseline_that_needs_cuda_before_ray_with_exit_5(
    capsys, tmp_path, corpus, no_ray, key, value, needle
):
    line = refused_by_search(
        capsys, tmp_path / "out", corpus, "--set", f"train.{key}={value}", code=Exit.ENVIRONMENT
    )
    assert line.startswith(f"error: config key 'train.{key}': ") and needle in line, line
    alone = refused_by_train(capsys, corpus, "--set", f"{key}={value}", code=Exit.ENVIRONMENT)
    assert alone == line.replace("key 'train.", "key '")  # one preflight, one wording


# As a user runs it, CUDA hidden: every case on a GPU machine; without CUDA one (the others' wording and exit
# code are test_the_search_refuses_a_baseline_that_needs_cuda_before_ray_with_exit_5's, in process: the same
# preflight, and a subprocess's imports were most of each case here)
@pytest.mark.parametrize("key, value, needle", NEEDS_CUDA if torch.cuda.is_available() else NEEDS_CUDA[:1])
def test_the_training_cli_refuses_a_config_that_needs_cuda_without_it_with_exit_5(
    tmp_path, corpus, key, value, needle
):
    # CUDA hidden, so a GPU machine checks this too; a run that started would print "training ..." lines
    here = tmp_path / "here"
    here.mkdir()
    argv = ["--config", SMOKE, "--data", str(corpus), "--out", str(here / "run"), "--set", f"{key}={value}"]
    done = subprocess.run(
        [sys.executable, "-m", "trainables.train", *argv],
        cwd=here,
        env={**user_env(), "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == Exit.ENVIRONMENT, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: config key '{key}': ") and needle in lines[0], (
        lines
    )
    assert done.stdout == "" and list(here.iterdir()) == []  # nothing trained, nothing written


@NO_CUDA
def test_a_device_cpu_config_that_needs_cuda_contradicts_itself_exit_2(capsys, tmp_path, corpus, no_ray):
    sets = ("--set", "train.device=cpu", "--set", "train.compile=reduce-overhead")
    line = refused_by_search(capsys, tmp_path / "out", corpus, *sets)
    assert line == (
        "error: config key 'train.compile': 'reduce-overhead' needs a CUDA device but 'train.device' is 'cpu' "
        "(use 'default' with it)"
    )


def test_a_gpu_machine_takes_what_needs_cuda_but_not_with_device_cpu():
    cfg = make_config({"compile": "reduce-overhead", "kernels": "fused"})
    check_cuda(cfg, "train", has_cuda=True)  # nothing to refuse: the device and kernels checks follow
    with pytest.raises(EnvironmentFault, match="'train.compile': 'reduce-overhead' needs CUDA"):
        check_cuda(cfg, "train", has_cuda=False)
    with pytest.raises(ConfigError, match="'kernels': 'fused' needs a CUDA device but 'device' is 'cpu'"):
        check_cuda(make_config({"kernels": "fused", "device": "cpu"}), "", has_cuda=True)


@pytest.mark.parametrize(
    "key, value",
    [
        (
            "precision",
            "bf16",
        ),  # autocast on the CPU (emulated where it has no native bf16: slower, not wrong)
        ("precision", "fp16"),  # with a CPU GradScaler
        ("precision", "tf32"),  # fp32 off NVIDIA tensor cores
        ("kernels", "auto"),  # the torch reference where no fused kernels can run
        ("loader", "device"),
        ("compile", "max-autotune-no-cudagraphs"),
    ],
)
def test_what_runs_on_a_cpu_is_not_refused_for_want_of_cuda(corpus, key, value):
    # each trains on a CPU: tests/test_train.py runs them (test_speed_knobs_run_on_cpu_and_keep_the_loss)
    cfg = make_config({"data": str(corpus), "seq_len": 64, "eval_tokens": 4096, "device": "cpu", key: value})
    assert preflight(cfg).device == torch.device("cpu")


@pytest.mark.parametrize(
    "where, needle",
    [("file/job.yaml", "is not writable"), ("folder", "is a directory")],
)
def test_an_unwritable_emit_rayjob_path_is_refused_before_the_search(
    capsys, tmp_path, corpus, no_ray, where, needle
):
    (tmp_path / "file").write_text("a file, not a folder")
    (tmp_path / "folder").mkdir()
    line = refused_by_search(capsys, tmp_path / "out", corpus, "--emit-rayjob", str(tmp_path / where))
    assert line.startswith("error: --emit-rayjob: ") and needle in line, line


@pytest.mark.parametrize(
    "item, seconds",
    [
        ("search.time_budget=90", 90),
        ("search.time_budget=1.5", 1.5),
        ("search.compile_deadline=120", 120),
        ("search.time_budget=2m30s", 150),
    ],
)
def test_durations_take_plain_seconds(item, seconds):
    from tuner.config import parse_duration

    cfg = load_search_config(SMOKE, [item])
    key = item.split("=")[0].split(".")[1]
    assert parse_duration(getattr(cfg.search, key)) == seconds


def test_time_budget_option_takes_plain_seconds():
    assert SearchSection(time_budget=90).time_budget == "90"


@pytest.mark.parametrize("value", ["0s", "0", "0m"])
def test_a_zero_budget_is_refused(capsys, tmp_path, corpus, no_ray, value):
    line = refused_by_search(capsys, tmp_path / "out", corpus, "--time-budget", value)
    assert "config key 'search.time_budget'" in line and "no time at all" in line, line


def test_a_cluster_driver_leaves_the_device_to_the_trials_hardware_probe(tmp_path, corpus, monkeypatch):
    """A Ray Job's driver (RAY_ADDRESS set) or --address: the head may have no GPU its workers have."""
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    argv = [
        "--config",
        SMOKE,
        "--out",
        str(tmp_path / "out"),
        "--data",
        str(corpus),
        "--set",
        "train.device=cuda",
        "--set",
        "train.compile=reduce-overhead",
        "--set",
        "train.kernels=fused",
    ]
    cfg, *_ = search.read_config(search.build_parser().parse_args(argv), tmp_path / "out")
    assert (cfg.train.device, cfg.train.compile, cfg.train.kernels) == (
        "cuda",
        "reduce-overhead",
        "fused",
    )


def test_a_built_in_corpus_is_a_name_the_search_accepts_not_a_path(tmp_path):
    argv = [
        "--config",
        "configs/smoke.yaml",
        "--out",
        str(tmp_path / "out"),
        "--data",
        "builtin:python-source",
    ]
    cfg, corpus, _ = search.read_config(search.build_parser().parse_args(argv), tmp_path / "out")
    assert cfg.train.data == "builtin:python-source" and "python-source" in corpus.source
    argv[-1] = "builtin:nope"
    with pytest.raises(ConfigError, match="no built-in corpus of that name"):
        search.read_config(search.build_parser().parse_args(argv), tmp_path / "out")


# The search CLI's bad input, in this process (`python -m tuner.search` is `sys.exit(main())`): one line,
# exit 2, before Ray starts (no_ray) and before OUT is written.
@pytest.mark.parametrize(
    "sets, needle",
    [
        (["search.space={flux: [1, 2]}"], "unknown knob 'flux'"),
        (["search.space={}"], "empty search space"),
        (["quality.tolerance=-1"], "quality.tolerance"),
        (["train.precision=fp8"], "precision"),
        (["search.space={precision: [fp32, fp7]}"], "fp7"),
    ],
)
def test_bad_search_settings_are_one_line_and_exit_2_before_ray_starts(
    capsys, tmp_path, corpus, no_ray, sets, needle
):
    argv = [arg for item in sets for arg in ("--set", item)]
    assert needle in refused_by_search(capsys, tmp_path / "out", corpus, *argv)


def errors(capsys) -> list[str]:
    """The error lines the search printed; the last line printed is the first of them."""
    said = capsys.readouterr().err.strip().splitlines()
    found = [line for line in said if line.startswith("error: ")]
    assert found and said[-1] == found[0], said
    return found


def test_a_missing_config_or_an_unwritable_out_is_one_line_and_exit_2(capsys, tmp_path, corpus, no_ray):
    out = tmp_path / "out"
    assert search.main(["--config", str(tmp_path / "nope.yaml"), "--out", str(out)]) == Exit.BAD_INPUT
    (line,) = errors(capsys)
    assert "config file not found" in line and not out.exists()
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert (
        search.main(["--config", SMOKE, "--out", str(blocker / "out"), "--data", str(corpus)])
        == Exit.BAD_INPUT
    )
    (line,) = errors(capsys)  # after the lines that say where Ray will run and what it trains on
    assert "not writable" in line


def test_an_existing_out_needs_resume_and_loses_nothing(capsys, tmp_path, corpus, no_ray):
    out = tmp_path / "out"
    out.mkdir()
    (out / "state.json").write_text('{"phases": {}}')
    assert search.main(["--config", SMOKE, "--out", str(out), "--data", str(corpus)]) == Exit.BAD_INPUT
    (line,) = errors(capsys)
    assert "--resume" in line
    assert (out / "state.json").read_text() == '{"phases": {}}' and [p.name for p in out.iterdir()] == [
        "state.json"
    ]
