"""When a profile's times may be used on a device, and re-timing it for another one (never silently from nothing).

One rule for every way hardware is named (``--target``, ``--node``, a hardware
JSON with a ``device`` or a ``cluster``), so the same cluster gives the same
answer however it is written:

* a profile **for** the device is used as it is: ``synthetic`` profiles (times
  written by hand for whatever is simulated), a roofline estimate for that
  catalog device, a hand-written profile naming it, a CPU profile on a CPU
  device, a CUDA profile whose recorded GPU name matches the device's model
  (``H100`` in "NVIDIA H100 80GB HBM3") or records none;
* any other profile is re-estimated by the roofline from its FLOPs and bytes
  (:func:`~stalesim.workloads.hardware.roofline_profile`), and a profile whose
  layers have no FLOPs cannot be: that is a one-line error, never a prediction
  from FLOPs = 0 (which predicted a 70B model's iteration in 2.8 s instead of
  the 33.7 s its own times give).

``--target`` is an explicit request to re-estimate, so it re-times even a profile
for the device (and needs FLOPs just the same).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from stalesim.errors import StalesimError

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.workloads.hardware import DeviceSpec
    from stalesim.workloads.profile import Profile

__all__ = ["is_for_device", "retime"]


def _model_token(name: str) -> str | None:
    """The model designation in a device name: ``H100`` in "NVIDIA H100 SXM5 80GB"."""
    for tok in re.split(r"[\s_-]+", name):
        if re.fullmatch(r"[A-Za-z]+\d{2,}[A-Za-z]*", tok) and not tok.lower().endswith("gb"):
            return tok.upper()
    return None


def is_for_device(profile: Profile, dev: DeviceSpec) -> bool:
    """True when ``profile``'s times are (or were written for) ``dev`` (module doc)."""
    name = profile.device.strip()
    if name == "synthetic":
        return True
    if name.endswith(" (roofline)"):
        return name[: -len(" (roofline)")] == dev.key
    if dev.key and name == dev.key:
        return True
    base = name.partition(":")[0]
    if base == "cpu":
        return dev.kind == "cpu"
    if base == "cuda":
        if dev.kind != "gpu":
            return False
        recorded = str(profile.meta.get("device_name", "")) if isinstance(profile.meta, dict) else ""
        want = _model_token(dev.name)
        return not recorded or want is None or want in recorded.upper()
    return False


def retime(profile: Profile, dev: DeviceSpec, *, force: bool = False) -> Profile:
    """``profile`` for ``dev``: as it is when it is for that device (unless ``force``), else its
    roofline estimate; a profile without FLOPs cannot be re-timed (one-line error)."""
    from stalesim.workloads.hardware import roofline_profile

    if not force and is_for_device(profile, dev):
        return profile
    if not any(lp.flops or lp.backward_flops for lp in profile.layers):
        key = dev.key or dev.name
        raise StalesimError(
            f"profile: its layers have no FLOPs, so its times (for {profile.device!r}) cannot be re-timed "
            f"for {key}; give FLOPs per layer, a profile for {key} (\"device\": \"{key}\"), or a "
            f"synthetic one (times used as given)")
    return roofline_profile(profile, dev)
