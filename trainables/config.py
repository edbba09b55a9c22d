"""The training job's configuration: every knob the tuner can search is one field here.

A knob is added in one place (a field of trainables/config_fields.py, in the group of its class, the class
declared on the field: `KnobClass`) and becomes searchable by naming it in a search-space YAML.
Validation happens before any expensive work and fails with one line that names the key and what is
allowed (`ConfigError`); the CLIs turn that into exit code 2.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ConfigDict, ValidationError

from model import HybridConfig
from trainables.config_fields import ExecutionKnobs, KnobClass, LossKnobs, RunSettings
from trainables.micro_batches import forward_batch

# Sections of a search config (tuner YAML) that the training CLI leaves to the tuner.
TUNER_SECTIONS = ("search", "quality", "resources", "budget")


class ConfigError(ValueError):
    """A bad configuration value; its message is one line that names the key."""


# The fields live in three groups by knob class (trainables/config_fields.py); pydantic puts the last base's
# fields first, so a config (best.yaml, the docs' table) reads: loss knobs, execution knobs, run settings.
class TrainConfig(RunSettings, ExecutionKnobs, LossKnobs):
    """Defaults reproduce the seed ("RwMBA" V4): batch 8, fp32, eager, AdamW, 5000 steps of 8x256 tokens."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # --- derived ---
    @classmethod
    def knob_classes(cls) -> dict[str, KnobClass | None]:
        """Each field's declared class, in field order (None: not declared; a test keeps there being none)."""
        return {
            name: next((m for m in field.metadata if isinstance(m, KnobClass)), None)
            for name, field in cls.model_fields.items()
        }

    @property
    def forward_batch(self) -> int:
        """Sequences per forward/backward pass, what must fit in memory: the micro-batch, or the batch."""
        return forward_batch(self.batch_size, self.micro_batch)

    @property
    def example_units(self) -> int:
        """Units of the workload's (tokens, images, ...) in one example: what `tokens` and speeds count."""
        return self.units_per_example or self.seq_len

    @property
    def tokens_per_step(self) -> int:
        """Units (tokens for an LM) trained per optimizer step."""
        return self.batch_size * self.grad_accum * self.example_units

    @property
    def total_steps(self) -> int:
        # max_steps wins over the budget both ways: a speed screen must reach its steady phase even
        # when the budget is only a few large-batch steps.
        return self.max_steps or -(-self.tokens // self.tokens_per_step)

    @property
    def schedule_steps(self) -> int:
        """Steps the lr schedule spans: the whole token budget, even when max_steps cuts the run short."""
        return -(-self.tokens // self.tokens_per_step)

    def peak_lr(self) -> float:
        ratio = self.batch_size * self.grad_accum / self.lr_base_batch
        return self.lr * {"none": 1.0, "sqrt": ratio**0.5, "linear": ratio}[self.lr_scaling]

    def hybrid_config(self, vocab_size: int) -> HybridConfig:
        return HybridConfig(
            **self.model,
            vocab_size=vocab_size,
            seq_len=self.seq_len,
            kernels=self.kernels,  # activation_checkpointing is the loop's, over the workload's blocks
        )


def unknown_key(key: str, allowed: Iterable[str], section: str = "") -> str:
    """The one line for an unknown key: the closest allowed one and all of them, named as the user writes
    them (`section` is where they live: '' for the top level, 'train', 'search', ...)."""
    allowed = list(allowed)
    close = difflib.get_close_matches(key.rpartition(".")[2], allowed, n=1)
    hint = f"; did you mean {'.'.join(filter(None, (section, close[0])))!r}?" if close else ""
    where = f" in {section}" if section else ""
    listed = f" (allowed{where}: {', '.join(allowed)})" if allowed else ""
    return f"unknown config key {key!r}{hint}{listed}"


def _one_line(err: ValidationError, section: str = "") -> str:
    first = err.errors()[0]
    loc = [str(p) for p in first["loc"]]
    key = ".".join([section, *loc] if section else loc) or "config"
    if first["type"] == "extra_forbidden":
        return unknown_key(key, TrainConfig.model_fields, section)
    msg = first["msg"].removeprefix("Value error, ")
    return f"config key {key!r}: {msg} (got {first.get('input')!r})"


def make_config(values: dict[str, Any], section: str = "") -> TrainConfig:
    """The validated training config; a bad key's message names it under `section` (a search config's
    'train'), as its user writes it."""
    try:
        return TrainConfig(**values)
    except ValidationError as err:
        raise ConfigError(_one_line(err, section)) from None
    except TypeError as err:  # HybridConfig(**model) with a bad key type
        key = ".".join(filter(None, (section, "model")))
        raise ConfigError(f"config key {key!r}: {err}") from None


def apply_overrides(values: dict[str, Any], items: list[str]) -> dict[str, Any]:
    """Apply `key=value` pairs (values parsed as YAML); a dotted key addresses a nested one
    (model.d_model=64) and its value replaces what was there, mappings included."""
    out = copy.deepcopy(values)
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError:
            value = raw
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {key}: {part!r} is not a section")
        node[leaf] = value
    return out


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A config file's mapping; ConfigError (one line) for anything that is not one: a missing file, a
    folder, a file that cannot be read, binary data, bad YAML. The one place a config file is read."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory (name a YAML file)")
    if not path.exists():
        raise ConfigError(f"config file not found: {path}")
    if not path.is_file():
        raise ConfigError(f"config file {path} is not a regular file (name a YAML file)")
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read config file {path}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"config file {path} is not UTF-8 text (byte {err.start}: {err.reason}); name a YAML file"
        ) from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]  # a ReaderError has no problem
        raise ConfigError(f"bad YAML in {path}{where}: {problem}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of config keys")
    return data


def training_section(data: dict[str, Any]) -> dict[str, Any]:
    """A search config keeps the training job under `train:`; a plain training config is flat."""
    if "train" in data:
        section = data["train"] or {}
        if not isinstance(section, dict):
            raise ConfigError("config key 'train' must be a mapping")
        return section
    return {k: v for k, v in data.items() if k not in TUNER_SECTIONS}


def is_file_spec(workload: str) -> bool:
    """'path/to/job.py:function' (a file) as opposed to 'package.module:function'."""
    target = workload.rpartition(":")[0]
    return target.endswith(".py") or "/" in target or "\\" in target


def absolute(workload: str, base: Path) -> str:
    """A file workload with its path made absolute against `base`; any other as it is."""
    if workload == "hybrid" or not is_file_spec(workload):
        return workload
    target, _, attr = workload.rpartition(":")
    return f"{(base / Path(target).expanduser()).resolve()}:{attr}"


def with_workload_paths(values: dict[str, Any], base: Path) -> dict[str, Any]:
    """`values` (a training section) with a relative workload file and workload_path made absolute against
    `base`: a config file's folder for what the file says, the working directory for --set."""
    out = dict(values)
    if isinstance(out.get("workload"), str):
        out["workload"] = absolute(out["workload"], base)
    if isinstance(out.get("workload_path"), str):
        out["workload_path"] = str((base / Path(out["workload_path"]).expanduser()).resolve())
    return out


def load_config(
    path: str | Path | None, overrides: Sequence[str] = (), data: str | None = None
) -> TrainConfig:
    values = with_workload_paths(training_section(read_yaml(path)), Path(path).parent) if path else {}
    values = with_workload_paths(apply_overrides(values, list(overrides)), Path.cwd())
    if data is not None:
        values["data"] = data
    return make_config(values)


def dump_config(cfg: TrainConfig, path: str | Path, leave_out: Iterable[str] = ()) -> None:
    """The config as YAML; `leave_out`: knobs its workload does not implement (their defaults stand)."""
    Path(path).write_text(yaml.safe_dump(cfg.model_dump(exclude=set(leave_out)), sort_keys=False))
