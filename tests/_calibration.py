"""A machine calibration with every term non-zero, for tests of the paths that read one
(a path that drops a term then shows)."""

from __future__ import annotations

from stalesim.cost.calibration import MachineCalibration


def _fit(alpha: float, beta: float) -> dict[str, float]:
    return {"alpha_s": alpha, "beta_s_per_byte": beta}


def calibration(host_cores: int | None = 8) -> MachineCalibration:
    """Every term non-zero: per-action overheads and gaps, and the per-message fits."""
    comm = {"post": _fit(20e-6, 1e-10), "complete": _fit(15e-6, 5e-11), "arrive": _fit(60e-6, 3e-10),
            "ar_post": _fit(30e-6, 1e-10), "ar_complete": _fit(25e-6, 1e-10), "release": {"alpha_s": 4e-6},
            "lost_sender": _fit(2e-6, 2e-11), "lost_receiver": _fit(3e-6, 2e-11)}
    return MachineCalibration(overhead_s={"F": 40e-6, "B": 60e-6, "U": 10e-6, "LOSS": 20e-6},
                              gaps_s={"F": 12e-6, "B": 15e-6, "U": 8e-6, "LOSS": 9e-6, "comm": 5e-6},
                              comm=comm, host_cores=host_cores, threads=1, device="cpu", source="test")
