"""The machine a configuration runs on: devices, CPU threads, data-parallel processes, the environment manifest."""
from .devices import available_hardware, device_name, resolve_hardware, synchronize
from .manifest import collect_manifest, machine_name, manifest_id
from .threads import apply_threads, usable_cpus

__all__ = ["apply_threads", "available_hardware", "collect_manifest", "device_name", "machine_name", "manifest_id",
           "resolve_hardware", "synchronize", "usable_cpus"]
