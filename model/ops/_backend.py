"""Backend choice shared by the ops: argument checks, lazy import of the fused kernels, and "auto".

The fused kernels (fla, mamba_ssm, causal_conv1d) need CUDA and Triton/compiled extensions, so they are
imported only when first asked for; a machine without them still runs "naive" and "torch".
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.machinery import ModuleSpec
from typing import Any

import torch

from model import library_env

# op -> (backend name, module, function) of its fused kernel. All three go through our custom-op wrappers
# (torch.compile and CUDA graphs take them whole): causal_conv1d's own custom ops write into an `out=`
# tensor allocated outside them, which Dynamo refuses under fullgraph. The causal conv keeps the backend
# name "mamba_ssm" (Mamba2's conv; the kernel is the causal_conv1d package's CUDA extension).
FUSED = {
    "rwkv6": ("fla", "model.ops.rwkv6_fused", "rwkv6_fla"),
    "ssd": ("mamba_ssm", "model.ops.ssd_fused", "ssd_mamba"),
    "causal_conv1d": ("mamba_ssm", "model.ops.conv_fused", "causal_conv1d_fused"),
}
FUSED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# Packages whose __init__ our fused wrappers skip: they import what we never call. fla's imports its layers
# and models (transformers with them) and fla.ops every op it has; mamba_ssm's its modules and models
# (transformers, the selective-scan CUDA extension). Importing both whole cost ~16 s and ~14 s in every
# process that trains with the fused kernels, and in the hardware check (one H200); the kernels we call
# need only their own submodules.
SKIPPED_INITS = {"fla": ("fla", "fla.ops"), "mamba_ssm": ("mamba_ssm",)}

# op -> (kernel or None, why not). A plain dict rather than functools.cache so torch.compile traces
# the lookup without tracing into importlib once it is filled.
_loaded: dict[str, tuple[Callable | None, str]] = {}


def load_fused(op: str) -> tuple[Callable | None, str]:
    """The fused kernel of ``op`` and "", or None and a one-line reason it is not importable."""
    if op not in _loaded:
        _, module, name = FUSED[op]
        library_env.keep_autotune_results()
        try:
            with packages_without_init(SKIPPED_INITS.get(FUSED[op][0], ())):
                _loaded[op] = getattr(importlib.import_module(module), name), ""
        except Exception as e:  # ImportError, or a CUDA extension that fails while loading
            reason = (str(e).splitlines() or [""])[0]
            _loaded[op] = None, f"{module}.{name} is not importable ({type(e).__name__}: {reason})"
    return _loaded[op]


def fused_kernel(op: str) -> Callable:
    """The fused kernel of ``op`` where resolve() chose "fused" (it chooses it only once the kernel loaded)."""
    kernel, why = load_fused(op)
    if kernel is None:
        raise RuntimeError(f"{op}: the fused kernel was chosen but {why}")
    return kernel


class _BareInits(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A finder ahead of the others for the packages in `names`: each is found as a bare package of its own
    directory, whose __init__ never runs. The import system makes and registers it; `made` lists them."""

    def __init__(self, names: tuple[str, ...]):
        self.names = set(names)
        self.made: list[str] = []

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if fullname not in self.names:
            return None
        found = importlib.machinery.PathFinder.find_spec(fullname, path)
        if found is None or found.submodule_search_locations is None:
            return None  # not installed: the import itself says so
        spec = ModuleSpec(fullname, self, is_package=True)
        spec.submodule_search_locations = list(found.submodule_search_locations)
        self.made.append(fullname)
        return spec

    def create_module(self, spec: ModuleSpec) -> None:
        return None  # the default module

    def exec_module(self, module: types.ModuleType) -> None:
        # fla.utils reads `from fla import __version__`
        module.__dict__["__version__"] = _version_of(module.__name__)


@contextmanager
def packages_without_init(names: tuple[str, ...]) -> Iterator[None]:
    """Within it, importing a submodule of a package in `names` (parents first) does not run that package's
    __init__: it stands as a bare package of its own directory (`_BareInits`). After it, the bare packages
    and everything imported under them are forgotten by the import system (the functions taken from them
    keep working), so a later plain `import fla` (a user's workload) gets the whole real package, as if we
    had never imported it. A package already imported is left as it is."""
    finder = _BareInits(names)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        prefixes = tuple(f"{name}." for name in finder.made)
        for name in [m for m in sys.modules if m in finder.made or m.startswith(prefixes)]:
            sys.modules.pop(name)


def _version_of(package: str) -> str:
    """The version of the distribution that installs `package` (its top-level name), "" if none says."""
    for dist in importlib.metadata.packages_distributions().get(package.partition(".")[0], []):
        return importlib.metadata.version(dist)
    return ""


def preload(backends: dict[str, str]) -> None:
    """Imports the fused kernel of each op (op -> backend) that may run it, before any torch.compile: a first
    import inside a traced forward is a graph break, which fullgraph and CUDA graphs refuse. "auto" imports
    only where CUDA is, as only there can it pick the fused kernel."""
    for op, backend in backends.items():
        if backend == FUSED[op][0] or (backend == "auto" and torch.cuda.is_available()):
            load_fused(op)


def resolve(op: str, backend: str, tensors: tuple[torch.Tensor, ...], unsupported: str | None = None) -> str:
    """Implementation to run: "naive", "torch" or "fused"; ValueError if ``backend`` cannot run here.

    ``unsupported`` is the op's own reason its fused kernel cannot take these arguments (e.g. conv width).
    """
    fused_name = FUSED[op][0]
    allowed = ("naive", "torch", fused_name, "auto")
    if backend not in allowed:
        raise ValueError(f"{op}: unknown backend {backend!r}; allowed: {', '.join(allowed)}")
    if backend in ("naive", "torch"):
        return backend
    problem = unsupported or _fused_problem(op, tensors)
    if problem is None:
        return "fused"
    if backend == "auto":
        return "torch"
    raise ValueError(f"{op}: backend {fused_name!r} cannot run: {problem}")


def _fused_problem(op: str, tensors: tuple[torch.Tensor, ...]) -> str | None:
    devices = sorted({t.device.type for t in tensors})
    if devices != ["cuda"]:
        return f"it needs CUDA tensors, got {'/'.join(devices)} (use backend 'torch' or 'auto')"
    dtypes = sorted({str(t.dtype) for t in tensors if t.dtype not in FUSED_DTYPES})
    if dtypes:
        return f"it takes float32/float16/bfloat16, got {', '.join(dtypes)}"
    return load_fused(op)[1] or None


def compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """float64 stays float64; bf16/fp16 (and fp32) are computed in float32."""
    dtype = torch.float32
    for t in tensors:
        dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def run_upcast(fn, out_dtype: torch.dtype, *tensors: torch.Tensor | None) -> torch.Tensor:
    """fn(*tensors) computed in ``compute_dtype`` (autocast off), returned as ``out_dtype``: the naive
    and chunked versions take bf16 or mixed-dtype inputs (bf16 activations, fp32 decays) and never
    accumulate a state or a decay product in bf16. Gradients flow back in each input's own dtype."""
    ct = compute_dtype(*(t for t in tensors if t is not None))
    device = next(t for t in tensors if t is not None).device
    with torch.autocast(device.type, enabled=False):
        return fn(*(t if t is None else t.to(ct) for t in tensors)).to(out_dtype)


def available_backends() -> dict[str, bool | str]:
    """Backend name -> True if it can run on this machine, else a one-line reason why not.

    "mamba_ssm" covers both the SSD scan (mamba_ssm) and the causal conv (causal_conv1d package).
    Fused backends also need a CUDA device.
    """
    result: dict[str, bool | str] = {"naive": True, "torch": True}
    for op, (name, _, _) in FUSED.items():
        why = load_fused(op)[1]
        if not why and not torch.cuda.is_available():
            why = "no CUDA device (torch.cuda.is_available() is False)"
        if result.get(name, True) is True:  # keep the first reason of a backend that serves two ops
            result[name] = why or True
    return result
