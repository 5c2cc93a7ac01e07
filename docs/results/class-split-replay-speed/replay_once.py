"""Replay seconds of one small emulation (lenet5, synthetic, stale S=4, 200 batches)."""

import torch

from stalesim.emulator.replay import Emulator
from stalesim.runtime.config import TrainConfig

torch.set_num_threads(1)
cfg = TrainConfig(model="lenet5", dataset="synthetic", schedule="stale", stages=4, iterations=200,
                  batch_size=8, synthetic_size=256, seed=0)
emu = Emulator(cfg, progress=False)
print(emu.replay())
