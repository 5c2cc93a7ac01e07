"""Which training runs can share one batch: the fields that may differ, and the check."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields

from stalesim.errors import StalesimError
from stalesim.runtime.config import TrainConfig

#: TrainConfig fields that may differ between the runs of one batch.
PER_RUN_FIELDS = frozenset({
    "seed", "lr", "momentum", "weight_decay", "lr_schedule", "lr_warmup", "lr_min",
    "betas", "eps", "nesterov", "clip_grad_norm",
    "weight_prediction", "spike_compensation", "pipemare_lr", "pipemare_warmup",
    "pipemare_correction", "pipemare_gamma", "staleness_lr",
    "nesterov_lookahead", "lookahead_momentum", "nadam_momentum_decay", "error_feedback", "error_feedback_beta",
    "muon_lr", "muon_momentum", "basis_rotation_beta",
})


def check_batch(cfgs: Sequence[TrainConfig]) -> None:
    """Raise a one-line StalesimError unless the runs can train as one batch."""
    if not cfgs:
        raise StalesimError("batched: no runs")
    ref = cfgs[0].to_dict()
    for i, c in enumerate(cfgs[1:], 1):
        d = c.to_dict()
        for f in fields(TrainConfig):
            if f.name in PER_RUN_FIELDS or ref[f.name] == d[f.name]:
                continue
            if f.name in ("stages", "ppv") and cfgs[0].num_stages == c.num_stages and (
                    cfgs[0].ppv is None or c.ppv is None or list(cfgs[0].ppv) == list(c.ppv)):
                continue  # the same partition spelled two ways is checked on the built stages
            raise StalesimError(
                f"batched: runs 0 and {i} differ in {f.name} ({ref[f.name]!r} vs {d[f.name]!r}); the runs of "
                "one batch must share model shape, data, schedule, partition and optimizer kind "
                f"(they may differ in {', '.join(sorted(PER_RUN_FIELDS))})")
