"""A fake `pynvml` with deterministic readings, for telemetry tests on machines without a GPU.

`FakeNvml(...)` behaves like the module. Every reading is a function of the (injectable) clock measured
from the fake's creation: constant utilisation and power per GPU, an energy counter that is exactly the
integral of that power, optional throttle periods, processes, unsupported calls and transient failures.
Importing this module as `tests.fake_nvml` gives a default two-GPU instance (GPU 1 has no energy counter,
GPU 0 is thermally throttled between 0.2 s and 0.4 s after import), which is what the Ray actor test uses.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from types import SimpleNamespace

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_UNKNOWN = 999

THERMAL = 0x20  # sw thermal slowdown
POWER_CAP = 0x04  # sw power cap
IDLE = 0x01  # not a throttle: clocks are low because the GPU is idle

_MESSAGES = {
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    def __init__(self, value: int):
        super().__init__(_MESSAGES.get(value, f"NVML error {value}"))
        self.value = value


class NVMLError_NotSupported(NVMLError):  # noqa: N801 (pynvml's names)
    def __init__(self, value: int = NVML_ERROR_NOT_SUPPORTED):
        super().__init__(value)


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801
    def __init__(self, value: int = NVML_ERROR_LIBRARY_NOT_FOUND):
        super().__init__(value)


class NVMLError_FunctionNotFound(NVMLError):  # noqa: N801
    def __init__(self, value: int = NVML_ERROR_FUNCTION_NOT_FOUND):
        super().__init__(value)


class NVMLError_Unknown(NVMLError):  # noqa: N801
    def __init__(self, value: int = NVML_ERROR_UNKNOWN):
        super().__init__(value)


class FakeNvml:
    """Module-like fake of pynvml.

    gpus: number of GPUs. unsupported: {gpu: {function name}} raising NotSupported.
    throttles: [(gpu, t_start, t_end, reason bits)] in seconds since creation.
    processes: {gpu: {pid: used MiB}} (mutable between samples). fail_once: {function name: times}
    raising an Unknown (transient) error. init_error: an exception nvmlInit raises.
    event_reasons: "ok", "missing" (old pynvml without the function) or "no-driver" (FunctionNotFound).
    """

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_CLOCK_MEM = NVML_CLOCK_MEM

    def __init__(
        self,
        gpus: int = 2,
        unsupported: dict[int, set[str]] | None = None,
        throttles: list[tuple[int, float, float, int]] | None = None,
        processes: dict[int, dict[int, float]] | None = None,
        fail_once: dict[str, int] | None = None,
        init_error: Exception | None = None,
        event_reasons: str = "ok",
        clock: Callable[[], float] = time.time,
    ):
        self.gpu_count = gpus
        self.unsupported = unsupported or {}
        self.throttles = throttles or []
        self.processes = processes or {}
        self.fail_once = dict(fail_once or {})
        self.init_error = init_error
        self.clock = clock
        self.origin = clock()
        self.calls: collections.Counter[str] = collections.Counter()
        self.initialized = False
        if event_reasons != "missing":
            self.nvmlDeviceGetCurrentClocksEventReasons = (
                self._event_reasons if event_reasons == "ok" else self._function_not_found
            )

    # readings, as functions of the fake's time --------------------------------------------------------

    def elapsed(self) -> float:
        return self.clock() - self.origin

    @staticmethod
    def power_w(gpu: int) -> float:
        return 100.0 + 50.0 * gpu

    @staticmethod
    def util(gpu: int) -> float:
        return 50.0 + 10.0 * gpu

    def reasons(self, gpu: int) -> int:
        now = self.elapsed()
        bits = IDLE if gpu else 0
        for index, start, end, reason in self.throttles:
            if index == gpu and start <= now < end:
                bits |= reason
        return bits

    def _check(self, name: str, handle: int | None = None) -> None:
        self.calls[name] += 1
        if not self.initialized:
            raise NVMLError(1)  # Uninitialized
        if handle is not None and name in self.unsupported.get(handle, ()):
            raise NVMLError_NotSupported()
        if self.fail_once.get(name, 0) > 0:
            self.fail_once[name] -= 1
            raise NVMLError_Unknown()

    # the pynvml surface --------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self.initialized = False

    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount")
        return self.gpu_count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._check("nvmlDeviceGetHandleByIndex")
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        self._check("nvmlDeviceGetName", handle)
        return b"Fake H100"

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        self._check("nvmlDeviceGetUUID", handle)
        return f"GPU-00000000-0000-0000-0000-00000000000{handle}"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        self._check("nvmlDeviceGetMemoryInfo", handle)
        used = (1000 + 100 * handle) * 1024 * 1024
        total = 80 * 1024**3
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        self._check("nvmlDeviceGetUtilizationRates", handle)
        return SimpleNamespace(gpu=self.util(handle), memory=20.0)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        self._check("nvmlDeviceGetPowerUsage", handle)
        return int(self.power_w(handle) * 1000)  # mW

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        self._check("nvmlDeviceGetTotalEnergyConsumption", handle)
        return int(round(1e6 + self.power_w(handle) * self.elapsed() * 1000))  # mJ

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        self._check("nvmlDeviceGetTemperature", handle)
        assert sensor == NVML_TEMPERATURE_GPU
        return 60 + handle

    def nvmlDeviceGetClockInfo(self, handle: int, clock_type: int) -> int:
        self._check("nvmlDeviceGetClockInfo", handle)
        if clock_type == NVML_CLOCK_MEM:
            return 2619
        return 1200 if self.reasons(handle) & (THERMAL | POWER_CAP) else 1980

    def _event_reasons(self, handle: int) -> int:
        self._check("nvmlDeviceGetCurrentClocksEventReasons", handle)
        return self.reasons(handle)

    def _function_not_found(self, handle: int) -> int:
        self.calls["nvmlDeviceGetCurrentClocksEventReasons"] += 1
        raise NVMLError_FunctionNotFound()

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: int) -> int:
        self._check("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        return self.reasons(handle)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        self._check("nvmlDeviceGetComputeRunningProcesses", handle)
        return [
            SimpleNamespace(pid=pid, usedGpuMemory=int(mb * 1024 * 1024))
            for pid, mb in self.processes.get(handle, {}).items()
        ]


DEFAULT = FakeNvml(
    gpus=2,
    unsupported={1: {"nvmlDeviceGetTotalEnergyConsumption"}},
    throttles=[(0, 0.2, 0.4, THERMAL)],
)


def __getattr__(name: str):
    """`import tests.fake_nvml` acts as the DEFAULT fake (PEP 562)."""
    return getattr(DEFAULT, name)
