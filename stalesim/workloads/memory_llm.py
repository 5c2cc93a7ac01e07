"""Training state per parameter: weights, gradients and optimizer state by optimizer, precision and ZeRO stage.

The rule (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
Trillion Parameter Models", section 3.1): mixed-precision Adam keeps 16-bit
weights (2 bytes) and gradients (2 bytes), and an fp32 master copy plus two
fp32 moments (4 + 4 + 4 = 12 bytes), 16 bytes per parameter. Other optimizers
change the moment count (momentum SGD and Muon keep one), fp32 training drops the
master copy. Error feedback (the stale schedules' one-step-delay correction,
:mod:`stalesim.runtime.optim`) keeps the previous step, one more fp32 tensor per
parameter, counted and sharded with the optimizer state as the runtime counts it
(:func:`~stalesim.runtime.optim.state_copies`). ZeRO stage 1 shards the optimizer state over the ``dp`` data-parallel
ranks, stage 2 also the gradients, stage 3 also the weights.

The extra weight versions of the asynchronous schedules (PipeDream's stash,
2BW's double buffer) are copies of the weights the forward used, so they are
counted at the *weight* precision (2 bytes per parameter in mixed precision),
never sharded (each rank's backward reads its own full stage).
"""

from __future__ import annotations

from dataclasses import dataclass

from stalesim.errors import StalesimError

__all__ = ["OPTIMIZERS", "PRECISIONS", "ZERO_STAGES", "StateBytes", "state_bytes"]

# moments kept per parameter (fp32 each)
OPTIMIZERS = {"adam": 2, "adamw": 2, "muon": 1, "sgd": 1}
PRECISIONS = ("mixed", "fp32")
ZERO_STAGES = (0, 1, 2, 3)


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter of each component, after ZeRO sharding over ``dp`` ranks."""

    weights: float
    gradients: float
    optimizer: float
    version: float  # one extra weight version (stash / double buffer)

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer


def state_bytes(optimizer: str = "adam", precision: str = "mixed", zero: int = 0, dp: int = 1, *,
                error_feedback: bool = False) -> StateBytes:
    """Bytes per parameter for ``optimizer`` in ``precision`` with ZeRO ``zero`` over ``dp`` ranks
    (``error_feedback``: one more fp32 buffer in the optimizer state).

    >>> state_bytes().total                      # mixed-precision Adam: 2 + 2 + 12
    16.0
    >>> state_bytes(zero=1, dp=8).optimizer      # 12 / 8
    1.5
    """
    if optimizer not in OPTIMIZERS:
        raise StalesimError(f"optimizer: expected one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    if precision not in PRECISIONS:
        raise StalesimError(f"precision: expected one of {', '.join(PRECISIONS)}, got {precision!r}")
    if zero not in ZERO_STAGES:
        raise StalesimError(f"zero: expected 0, 1, 2 or 3, got {zero!r}")
    if isinstance(dp, bool) or not isinstance(dp, int) or dp < 1:
        raise StalesimError(f"dp: expected an integer >= 1, got {dp!r}")
    moments = 4.0 * (OPTIMIZERS[optimizer] + (1 if error_feedback else 0))
    if precision == "mixed":
        w, g, o = 2.0, 2.0, 4.0 + moments  # fp32 master copy + moments
    else:
        w, g, o = 4.0, 4.0, moments
    return StateBytes(weights=w / dp if zero >= 3 else w, gradients=g / dp if zero >= 2 else g,
                      optimizer=o / dp if zero >= 1 else o, version=w)
