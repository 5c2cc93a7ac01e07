"""Workloads: the model zoo, partitions (PPVs), per-layer profiles and hardware.

Everything the simulator, emulator and executor need to know about *what* is
trained (models cut into blocks and stages) and *how fast* it runs (profiles,
device and link figures). Submodules are imported explicitly
(``from stalesim.workloads.zoo import build_model``) so that importing this
package does not pull in torch.
"""
