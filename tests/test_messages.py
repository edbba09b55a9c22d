"""What the CLIs say: every key named as its user writes it (train.batch_size, search.trials), an unknown key
with the keys allowed there, and --help with the phases, outputs, exit codes and what --resume does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from trainables import train
from trainables.common.exit_codes import Exit
from trainables.config import ConfigError, TrainConfig
from trainables.spec import LABELS, TrialSpec
from tuner import emit, search
from tuner.config import SearchConfig, SearchSection, load_search_config
from tuner.report import __main__ as report
from tuner.runs.phase_progress import planned_tokens
from tuner.session.ray_session import RaySession

ROOT = Path(__file__).resolve().parents[1]
SMOKE = str(ROOT / "configs" / "smoke.yaml")


def refused(capsys, tmp_path: Path, *sets: str) -> str:
    """The one line the search prints for bad input (exit 2, nothing left in OUT)."""
    argv = ["--config", SMOKE, "--out", str(tmp_path / "out")]
    for item in sets:
        argv += ["--set", item]
    assert search.main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert not (tmp_path / "out").exists()
    return lines[0]


def test_an_unknown_search_key_names_the_closest_and_every_allowed_one(capsys, tmp_path):
    line = refused(capsys, tmp_path, "search.trails=8")
    assert "unknown config key 'search.trails'" in line and "did you mean 'search.trials'" in line
    allowed = line.split("allowed in search: ")[1].rstrip(")").split(", ")
    assert allowed == list(SearchSection.model_fields)


def test_an_unknown_section_names_the_sections(capsys, tmp_path):
    line = refused(capsys, tmp_path, "serch.trials=8")
    assert "'serch'" in line and "did you mean 'search'" in line
    assert "allowed: train, search, quality, resources" in line


@pytest.mark.parametrize(
    "item, needle",
    [
        ("train.precision=fp8", "config key 'train.precision': Input should be 'fp32'"),
        ("train.batch_sise=16", "unknown config key 'train.batch_sise'; did you mean 'train.batch_size'?"),
        ("train.model={d_modl: 64}", "config key 'train.model': unknown model key 'd_modl'"),
    ],
)
def test_a_bad_train_key_is_named_with_its_train_prefix(capsys, tmp_path, item, needle):
    line = refused(capsys, tmp_path, item)
    assert needle in line, line


@pytest.mark.parametrize(
    "item, line",
    [
        (
            "train.batch_sise=16",
            "error: unknown config key 'train.batch_sise'; did you mean 'train.batch_size'?",
        ),
        ("train.micro_batch=3", "error: config key 'train.micro_batch': must divide batch_size 16"),
        (  # the screen refuses such a pair it would propose; the user's own train config is refused too
            "train={batch_size: 16, micro_batch: 8, compile: reduce-overhead}",
            "error: config key 'train.compile': reduce-overhead captures CUDA graphs, which overwrite a forward "
            "pass's outputs with the next's when an optimizer step makes 2 (micro_batch, grad_accum)",
        ),
    ],
)
def test_a_bad_train_key_or_value_is_refused_as_the_config_is_read_before_ray_starts(
    capsys, tmp_path, monkeypatch, item, line
):
    started = []
    start = RaySession.start
    monkeypatch.setattr(
        RaySession, "start", lambda self, *a, **kw: started.append(a) or start(self, *a, **kw)
    )
    said = refused(capsys, tmp_path, item)
    assert said.startswith(line), said  # the train section's own line, not wrapped in another
    assert started == [], "Ray was started for a config that cannot run"


def test_a_search_config_files_train_pair_that_cannot_run_is_refused_before_ray_starts(
    capsys, tmp_path, monkeypatch
):
    path = tmp_path / "search.yaml"
    path.write_text("train: {batch_size: 16, micro_batch: 6}\nsearch: {space: {precision: [fp32, bf16]}}\n")
    monkeypatch.setattr(RaySession, "start", lambda *a, **kw: pytest.fail("Ray started"))
    assert search.main(["--config", str(path), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: config key 'train.micro_batch': must divide batch_size 16 (one of [1, 2, 4, 8]) or be at "
        "least it (got 6)"
    ]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "sets, line",
    [
        (  # 6 is below both batches and divides neither: no config of the space could run it
            ["search.space={batch_size: [8, 16], micro_batch: [null, 6]}"],
            "error: config key 'search.space.micro_batch': choice 6 would never run: it is below and divides "
            "none of batch_size [8, 16] (below the batch, a micro_batch must divide it)",
        ),
        (  # smoke's batch is 16: a micro_batch of 8 runs it, never 12
            ["train.micro_batch=8", "search.space={batch_size: [8, 12, 16]}"],
            "error: config key 'search.space.batch_size': choice 12 would never run: none of micro_batch [8] "
            "divides it or is at least it",
        ),
        (
            [
                "search.space={batch_size: [12, 16], micro_batch: [null, 8]}",
                "search.start_points=[{batch_size: 16, micro_batch: 8}, {batch_size: 12, micro_batch: 8}]",
            ],
            "error: config key 'search.start_points[1]': micro_batch 8 must divide batch_size 12 or be at "
            "least it",
        ),
    ],
)
def test_a_batch_pair_of_the_space_that_can_never_run_is_refused_in_one_line(capsys, tmp_path, sets, line):
    assert refused(capsys, tmp_path, *sets) == line


def test_a_micro_batch_choice_is_checked_against_the_configs_batches_not_the_default_batch():
    """8, TrainConfig's default batch, is no batch of this search: 6 divides its 12 and 24."""
    space = {"batch_size": [12, 24], "micro_batch": [None, 6]}
    assert SearchConfig(train={"batch_size": 12}, search={"space": space}).search.space == space
    assert SearchConfig(train={"batch_size": 12}, search={"space": {"micro_batch": [None, 4, 6]}})
    with pytest.raises(ValidationError, match="choice 5 would never run"):
        SearchConfig(train={"batch_size": 12}, search={"space": {"micro_batch": [None, 5]}})


def test_a_search_config_holds_only_a_train_section_that_can_run(tmp_path):
    """Checked wherever one is made (a state.json read back too), not only when the baseline is asked for."""
    with pytest.raises(
        ValidationError, match=r"config key 'train\.batch_size': Input should be greater than 0"
    ):
        SearchConfig(train={"batch_size": 0})
    with pytest.raises(ValidationError, match=r"unknown config key 'train\.precison'"):
        SearchConfig(train={"precison": "bf16"})
    cfg = SearchConfig(train={"batch_size": 4})
    assert cfg.train.batch_size == 4 and cfg.model_dump()["train"] == {"batch_size": 4}, "the keys set"
    (tmp_path / "empty.yaml").write_text("train:\nsearch: {space: {batch_size: [4, 8]}}\n")
    with pytest.raises(ConfigError, match=r"^config key 'train': must be a mapping of training keys$"):
        load_search_config(str(tmp_path / "empty.yaml"))


def test_a_range_knob_says_what_it_must_look_like(capsys, tmp_path):
    assert "'search.space.lr': expected a list of choices or a range" in refused(
        capsys, tmp_path, "search.space={lr: 0.1}"
    )
    line = refused(capsys, tmp_path, "search.space={lr: {low: 0.1, high: 1, step: 2}}")
    assert "unknown config key 'search.space.lr.step'" in line and "low, high, log, integer" in line


def test_the_training_cli_names_keys_as_its_set_takes_them(capsys):
    assert train.main(["--set", "precision=fp8"]) == 2
    assert "config key 'precision'" in capsys.readouterr().err
    assert train.main(["--set", "batch_sise=8"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'batch_size'?" in err and ", ".join(TrainConfig.model_fields) in err


def test_a_trials_config_error_names_the_key_as_a_search_config_writes_it():
    with pytest.raises(ConfigError, match=r"config key 'train.precision': Input should be 'fp32'"):
        TrialSpec.of_tune({"train": {"batch_size": 8}, "precision": "fp8"})


def test_search_help_gives_phases_outputs_exit_codes_and_what_resume_does():
    text = " ".join(search.build_parser().format_help().split())  # as one line: wrapping aside
    for phase in ("batch probe", "speed screen", "loss check", "re-measure"):
        assert phase in text
    for output in (
        "summary.json",
        "report.md",
        "report.html",
        "best.yaml",
        "state.json",
        "trials/<phase>.jsonl",
    ):
        assert output in text
    assert "exit codes:" in text
    for code in (
        "0 a config was chosen",
        "1 the search failed",
        "2 bad input",
        "3 the baseline is the answer",
        "130",
    ):
        assert code in text, code
    resume = text[text.index("--resume: ") :]
    assert "OUT/state.json" in resume and "--config, --set, --data" in resume
    assert "not applied but checked" in resume and "--address may differ" in resume


def test_train_help_explains_set_and_gives_exit_codes(capsys):
    with pytest.raises(SystemExit):
        train.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--set KEY=VALUE override a training key" in text and "model.d_model" in text
    assert "exit codes:" in text and "2 bad input" in text


def test_a_labelled_run_shows_its_tokens_and_eta_not_warming_up_forever():
    # The search labels each case in its training config; the progress line must still read the plan.
    train = {"tokens": 4096, "batch_size": 2, "seq_len": 16, LABELS: {"case": 0, "repeat": 1}}
    assert planned_tokens({"train": train, "batch_size": 4}) == 4096


@pytest.fixture
def no_ray(monkeypatch):
    """Ray must not start: a check that came after it would fail this test, not pass it."""

    def refuse(*args, **kwargs):
        raise AssertionError("Ray started before the bad input was caught")

    monkeypatch.setattr("tuner.session.ray_session.connect", refuse)


def one_error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


@pytest.mark.parametrize(
    "kind, needle",
    [
        ("a program", "is not UTF-8 text"),  # `--config /bin/ls`
        ("invalid UTF-8", "is not UTF-8 text (byte 8: invalid start byte); name a YAML file"),
        ("a folder", "is a directory (name a YAML file)"),
        ("unreadable", "cannot read config file /proc/self/mem: "),  # unreadable even as root
    ],
)
def test_a_config_file_that_is_not_yaml_text_is_one_line_and_exit_2_for_both_clis(
    capsys, tmp_path, no_ray, kind, needle
):
    text = tmp_path / "config.yaml"
    text.write_bytes(b"train: {\xff\xfe}\n")
    path = {
        "a program": sys.executable,
        "invalid UTF-8": text,
        "a folder": tmp_path,
        "unreadable": "/proc/self/mem",
    }
    config = str(path[kind])
    assert train.main(["--config", config]) == Exit.BAD_INPUT
    alone = one_error_line(capsys)
    out = tmp_path / "out"
    assert search.main(["--config", config, "--out", str(out)]) == Exit.BAD_INPUT
    assert one_error_line(capsys) == alone and needle in alone and config in alone, alone
    assert not out.exists()  # nothing written


@pytest.mark.parametrize(
    "main, argv",
    [
        (train.main, ["--config"]),
        (train.main, ["--config", SMOKE, "--bogus"]),
        (report.main, []),
        (emit.main, ["--best", "best.yaml"]),
        (emit.main, ["--best", "best.yaml", "--out", "job.yaml", "--gpus", "two"]),
        (search.main, ["--out", "x"]),
        (search.main, ["--config", SMOKE, "--trials", "many"]),
    ],
)
def test_a_usage_mistake_is_one_line_and_exit_2_not_a_usage_block(capsys, main, argv):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == Exit.BAD_INPUT
    line = one_error_line(capsys)
    assert line.endswith(" (see --help)"), line
