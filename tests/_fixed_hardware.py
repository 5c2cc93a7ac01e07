"""A fixed ``--hardware`` file for the validate tests that are not about calibration.

Given a hardware file, ``validate`` skips the link calibration; it still measures the
executor's per-message costs (``commcal``, 2 ranks, seconds on a loaded 2-core machine)
unless the file carries them as ``executor_comm``, as a file that ``validate`` itself
wrote does. These tests check the steps after the calibration, so the file carries both:
the link, and per-message fits of the form ``commcal.measure_comm`` writes, with values of
the order it measured for gloo on one CPU host (their size does not enter what the tests
assert). Both calibrations are tested on their own (``test_validate_commcal``, the
workloads area) and in full by the README's ``stalesim validate`` (no ``--hardware``).
"""

from __future__ import annotations

import json
from pathlib import Path

# per message kind: fixed cost (s) and cost per byte (s/B), as commcal fits them
_FITS = {
    "post": (5e-5, 3e-10), "complete": (1.5e-4, 0.0), "release": (1.5e-5, 1e-12),
    "arrive": (1e-4, 1e-10), "ar_post": (1e-4, 8e-11), "ar_complete": (8e-5, 1.3e-10),
    "lost_sender": (8e-6, 1e-11), "lost_receiver": (0.0, 9e-11),
}
EXECUTOR_COMM = {"sizes": [64, 4096, 65536, 262144, 1048576], "repeats": 15, "device": "cpu",
                 "rank_devices": ["cpu", "cpu"],
                 **{k: {"alpha_s": a, "beta_s_per_byte": b} for k, (a, b) in _FITS.items()}}


def fixed_hardware(folder: Path, executor_comm: bool = True) -> Path:
    """``folder/hw.json``: CPU cores on gloo's loopback (a transfer not overlapped with compute,
    its core busy half its time) and, unless ``executor_comm`` is false, the per-message costs."""
    hw = {"schema_version": 1, "device": "cpu-core", "link": "gloo-loopback",
          "comm_overlaps_compute": False, "cpu_comm_occupancy": 0.5}
    if executor_comm:
        hw["executor_comm"] = EXECUTOR_COMM
    path = folder / "hw.json"
    path.write_text(json.dumps(hw))
    return path
