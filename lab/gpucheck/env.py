"""The machine a campaign ran on: GPUs, driver, torch/CUDA/cuDNN versions, precision flags."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
import sys
import warnings
from typing import Any


def precision_flags() -> dict[str, Any]:
    """The float32 precision in force: TF32 on matmuls (off by torch's default) and on cuDNN
    convolutions (on by default), the matmul precision, cuDNN benchmark/deterministic. Read,
    never set: the campaign measures the defaults a user gets."""
    import torch

    with warnings.catch_warnings():  # torch >= 2.9 steers towards fp32_precision; the old flags still read
        warnings.simplefilter("ignore")
        flags: dict[str, Any] = {
            "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
            "tf32_conv": bool(torch.backends.cudnn.allow_tf32),
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
            "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        }
    return flags


def _nvidia_smi() -> tuple[str | None, list[str]]:
    """(driver version, GPU names) from nvidia-smi, or (None, []) where it is missing."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, []
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version,name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None, []
    rows = [[x.strip() for x in line.split(",", 1)] for line in out.splitlines() if "," in line]
    return (rows[0][0] if rows else None), [r[1] for r in rows]


def environment(dry: bool) -> dict[str, Any]:
    import torch

    driver, smi_names = _nvidia_smi()
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    names = [torch.cuda.get_device_name(i) for i in range(n)] or smi_names
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {"dry": dry, "gpu_count": n, "gpu_names": names, "driver": driver, "torch": torch.__version__,
            "cuda": torch.version.cuda, "cudnn": cudnn, "nccl": _nccl_version(n),
            "python": sys.version.split()[0], "executable": sys.executable, "machine": platform.machine(),
            "precision": precision_flags(), "missing_packages": missing_packages()}


# what stalesim imports beyond torch (pyproject's dependencies and the test runner): a lent GPU
# machine's image lacks some (simpy, for one), which then travel as wheels (docs/gpu-check.md)
NEEDED = ("numpy", "simpy", "tqdm", "matplotlib", "pytest", "hypothesis")


def missing_packages() -> list[str]:
    import importlib.util

    return [m for m in NEEDED if importlib.util.find_spec(m) is None]


def _nccl_version(gpus: int) -> str | None:
    if not gpus:
        return None
    import torch

    try:
        v = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):
        return None
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def slug(env: dict[str, Any]) -> str:
    """The results folder's name part: the first GPU's name (``nvidia-h200``), ``cpu-dry`` when dry."""
    if env.get("dry") or not env.get("gpu_names"):
        return "cpu-dry" if env.get("dry") else "no-gpu"
    return re.sub(r"[^a-z0-9]+", "-", env["gpu_names"][0].lower()).strip("-") or "gpu"
