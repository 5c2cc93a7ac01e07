"""stalesim: predict, emulate and run pipelined training with stale weights.

One schedule IR (:mod:`stalesim.schedule`) feeds three consumers: the SimPy
simulator, the single-device emulator and the torch.distributed executor.
"""

__version__ = "0.1.0"
