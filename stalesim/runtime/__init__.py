"""Stage runtime shared by the emulator and the executor (see docs/CONTRACTS.md).

``config`` (TrainConfig), ``plan`` (the run's schedule), ``stage`` (StageRuntime:
F/LOSS/B/U with exact weight versions), ``data`` (deterministic batches),
``mitigations`` (weight prediction, spike compensation, PipeMare, ...).
Modules are imported directly (``from stalesim.runtime.stage import StageRuntime``)
so that importing the package does not import torch.
"""
