"""stalesim: predict, emulate and run pipelined training with stale weights.

One schedule IR (:mod:`stalesim.schedule`) feeds three consumers: the SimPy
simulator, the single-device emulator and the torch.distributed executor.

The Python API (docs/api.md), loaded on first use so that ``import stalesim`` stays cheap::

    import stalesim
    prof = stalesim.profile("mymodels:net", [32], dataset="mymodels:data")
    print(stalesim.simulate(prof, "1f1b", stages=2, microbatches=4).summary())
    summary = stalesim.emulate(model="mymodels:net", dataset="mymodels:data", schedule="stale",
                               stages=2, iterations=100, batch_size=32)
    measured = stalesim.run(model="mymodels:net", dataset="mymodels:data", schedule="stale",
                            stages=2, iterations=100, batch_size=32, devices="cpu:2")
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# name -> module that defines it (imported when the name is first used)
_API = {
    "profile": "stalesim.api", "simulate": "stalesim.api", "emulate": "stalesim.api",
    "run": "stalesim.api", "config": "stalesim.api", "load_schedule": "stalesim.api",
    "TrainConfig": "stalesim.runtime.config", "ScheduleConfig": "stalesim.schedule",
    "LayeredModel": "stalesim.workloads.layered", "StalesimError": "stalesim.errors",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'stalesim' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
