"""The GPU half of telemetry: NVML's figures of the run's GPUs, each metric read alone.

Utilization, memory, power (the instant reading where the driver has it), temperature, SM clock and the
energy counter per GPU, in the units the column suffixes name; a metric a board does not support is asked
once, then left out with the reason, so one unsupported metric costs only its own columns.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .nvml import NvmlDevices, is_permanent, nvml_reason, pynvml


def _nvml_queries() -> dict[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]:
    """Column suffixes -> one NVML query of a handle giving them, in the units the suffixes name.

    Utilization is one call for both rates; each other metric is its own call, so that one unsupported
    metric costs only its own columns.
    """
    nv = pynvml

    def utilization(h: Any) -> tuple[Any, ...]:
        rates = nv.nvmlDeviceGetUtilizationRates(h)
        return rates.gpu, rates.memory

    return {
        ("util_pct", "mem_util_pct"): utilization,
        ("mem_used_bytes",): lambda h: (int(nv.nvmlDeviceGetMemoryInfo(h).used),),
        ("power_w",): lambda h: (power_w(h),),
        ("temp_c",): lambda h: (nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),),
        ("sm_clock_mhz",): lambda h: (nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),),
        ("energy_j",): lambda h: (nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0,),  # mJ since driver load
    }


def power_w(handle: Any) -> float:
    """The board's power draw now, in watts.

    ``nvmlDeviceGetPowerUsage`` is a one-second average on Ampere and newer, which smears a short phase into
    its neighbours; the instant field (``NVML_FI_DEV_POWER_INSTANT``, drivers 530+) is read where the driver
    has it, the average elsewhere.
    """
    nv = pynvml
    field = getattr(nv, "NVML_FI_DEV_POWER_INSTANT", None)
    if field is not None:
        try:
            (value,) = nv.nvmlDeviceGetFieldValues(handle, [field])
            if value.nvmlReturn == nv.NVML_SUCCESS:
                return float(value.value.uiVal) / 1000.0  # mW
        except nv.NVMLError:
            pass
    return float(nv.nvmlDeviceGetPowerUsage(handle)) / 1000.0  # mW, averaged over about a second


def gpu_processes(handle: Any) -> int:
    """Processes holding a compute or graphics context on one GPU (PIDs are not compared: in a container
    NVML reports the host's, so "others" is this count less the run's own one context)."""
    nv = pynvml
    pids = {p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses(handle)}
    try:
        pids |= {p.pid for p in nv.nvmlDeviceGetGraphicsRunningProcesses(handle)}
    except nv.NVMLError:
        pass
    return len(pids)


class GpuSource:
    """Samples the chosen GPUs' NVML metrics; each metric read alone so one unsupported metric costs only itself."""

    def __init__(self, gpu_indices: Sequence[int] | None, uuids: Sequence[str] | None):
        self._devices = NvmlDevices(gpu_indices, uuids=uuids)
        self.handles = self._devices.handles
        self.missing = self._devices.missing
        self._disabled: set[str] = set()
        self._queries = _nvml_queries() if self.handles else {}

    def processes(self) -> dict[str, Any]:
        """``gpu{i}_processes`` per GPU (slow: read at the slow-source ticks)."""
        out: dict[str, Any] = {}
        for i, handle in self.handles.items():
            col = f"gpu{i}_processes"
            out[col] = None
            if col in self._disabled:
                continue
            try:
                out[col] = gpu_processes(handle)
            except pynvml.NVMLError as exc:
                self.missing.setdefault(col, nvml_reason(exc))
                if is_permanent(exc):
                    self._disabled.add(col)
        return out

    def sample(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for i, handle in self.handles.items():
            for suffixes, query in self._queries.items():
                cols = [f"gpu{i}_{s}" for s in suffixes]
                out.update(dict.fromkeys(cols))
                if cols[0] in self._disabled:
                    continue
                try:
                    out.update(zip(cols, query(handle)))
                except pynvml.NVMLError as exc:
                    for col in cols:
                        self.missing.setdefault(col, nvml_reason(exc))
                    if is_permanent(exc):
                        self._disabled.add(cols[0])
        return out

    def close(self) -> None:
        self._devices.close()
