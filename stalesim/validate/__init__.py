"""``stalesim validate``: predicted (simulator) vs measured (executor) vs emulated.

Modules: ``config`` (what is compared, checked up front), ``replay`` (a measured run
replayed; the cost terms are :mod:`stalesim.cost`, shared with simulate/sweep/plan), ``measured`` (executor rows ->
the simulator's steady-state window), ``compare`` (rows and aggregates),
``corunners`` (the measurements behind it), ``figures``, ``report``, ``steps`` (one
function per step) and ``workflow`` (running them in order). See docs/validate.md.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ValidateConfig", "validate"]


def __getattr__(name: str) -> Any:
    if name == "ValidateConfig":
        from stalesim.validate.config import ValidateConfig

        return ValidateConfig
    if name == "validate":
        from stalesim.validate.workflow import validate

        return validate
    raise AttributeError(name)
