"""The names ``validate``'s modules import for the cost model, which lives in :mod:`stalesim.cost`.

The model is one package shared by ``simulate``, ``sweep``, ``plan`` and ``validate``
(:mod:`stalesim.cost.model`, :mod:`~stalesim.cost.terms`, :mod:`~stalesim.cost.apply`,
:mod:`~stalesim.cost.memory`, :mod:`~stalesim.cost.calibration`); the replay of a measured
run is :mod:`stalesim.validate.replay`. Nothing is defined here: setting one of the model's
constants on this module (a test's ``monkeypatch``) sets it where it is read.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from stalesim.cost import model as _model
from stalesim.cost.apply import busy_overlap, simulate_with_costs, stage_phi
from stalesim.cost.memory import measured_memory_facts, predicted_peaks, with_memory_facts
from stalesim.cost.model import (
    JITTER_DRAWS,
    KINDS,
    MIN_JITTER_SAMPLES,
    CostModel,
    action_jitter,
    has_contention,
    median_draw,
    wait_curves,
)
from stalesim.cost.terms import (
    _forward_messages,
    dispatch_counts,
    link_from_comm,
    runtime_overheads,
    send_post_fit,
    stage_costs_for,
)
from stalesim.validate.replay import (
    allreduce_times,
    message_delays,
    replay,
    replay_costs,
    replay_jitter,
    replay_link,
)
from stalesim.validate.stagetime import hooked_stages

__all__ = ["JITTER_DRAWS", "KINDS", "MIN_JITTER_SAMPLES", "CostModel", "_forward_messages", "action_jitter",
           "allreduce_times", "busy_overlap", "dispatch_counts", "has_contention", "hooked_stages",
           "link_from_comm", "measured_memory_facts", "median_draw", "message_delays", "predicted_peaks",
           "replay", "replay_costs", "replay_jitter", "replay_link", "runtime_overheads", "send_post_fit",
           "simulate_with_costs", "stage_costs_for", "stage_phi", "wait_curves", "with_memory_facts"]

_CONSTANTS = ("JITTER_DRAWS", "MIN_JITTER_SAMPLES")


class _Forwarding(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        if name in _CONSTANTS:
            setattr(_model, name, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Forwarding
