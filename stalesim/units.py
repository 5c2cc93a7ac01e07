"""Human units for terminal output: one formatter for bytes, one for durations.

Bytes are binary (KiB, MiB, GiB: powers of 1024) everywhere a command prints them, as the
memory model, torch's allocator and the papers' tables (whose "MB" are MiB) count them;
mixing 10^6-byte MB with MiB made the same buffer read 4.9 % apart in two lines.
"""

from __future__ import annotations

import math

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def fmt_bytes(b: float | None) -> str:
    """``1536 -> '1.5 KiB'``, ``149446200 -> '143 MiB'`` (3 significant digits)."""
    if b is None or not math.isfinite(b):
        return "n/a"
    for unit in _BYTE_UNITS:
        if abs(b) < 1024 or unit == _BYTE_UNITS[-1]:
            return f"{b:.3g} {unit}" if unit != "B" else f"{b:.0f} B"
        b /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def fmt_seconds(s: float | None) -> str:
    """A duration with a unit that keeps 3-4 significant digits and no exponent:
    ``1.524e-3 -> '1.524 ms'``, ``61.99 -> '61.99 s'``, ``4.2e-6 -> '4.2 us'``, ``7380 -> '2.05 h'``."""
    if s is None or not math.isfinite(s):
        return "n/a"
    a = abs(s)
    if a == 0:
        return "0 s"
    if a < 1e-3:
        return f"{s * 1e6:.4g} us"
    if a < 1:
        return f"{s * 1e3:.4g} ms"
    if a < 600:
        return f"{s:.4g} s"
    if a < 3 * 3600:
        return f"{s / 60:.4g} min"
    return f"{s / 3600:.4g} h"


def fmt_bandwidth(bps: float | None) -> str:
    """A link rate in decimal GB/s (``1.25e9 -> '1.25 GB/s'``): links are sold and calibrated in
    10^9 bytes (or bits) per second, unlike memory, which is counted in binary units."""
    if bps is None or math.isinf(bps):
        return "unlimited"
    for scale, unit in ((1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s")):
        if abs(bps) >= scale:
            return f"{bps / scale:.3g} {unit}"
    return f"{bps:.3g} B/s"
