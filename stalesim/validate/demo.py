"""Building blocks of ``stalesim demo`` beyond the schedule table.

* :func:`predict_grid`: one profile measured here -> predicted speed-up,
  utilization and peak memory for 2/4/8 devices of this kind (calibrated link,
  the validated cost model) and of a catalog GPU (roofline from the same
  profile) over two link kinds;
* :func:`staleness_study`: the emulator on real MNIST, sequential vs stale
  (LeNet-5, the paper's PPV (2)), a few hundred iterations;
* the two figures.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

PREDICT_SCHEDULES = ("gpipe", "1f1b", "pipedream", "stale", "dp", "pipe-sgd", "interleaved-1f1b", "zb-h1",
                     "zb-h2", "zb-v", "dualpipev")


def predict_grid(cm: Any, cpu_hw: Any, *, devices: Sequence[int] = (2, 4, 8),
                 schedules: Sequence[str] = PREDICT_SCHEDULES, batch_size: int = 128,
                 gpu: str = "h100-sxm", gpu_links: Sequence[str] = ("pcie4-x16", "nvlink4"),
                 cpu_label: str = "this CPU", batches: int | None = None) -> list[dict[str, Any]]:
    """Rows ``{hardware, link, devices, schedule, iteration_time_s, speedup, utilization_mean,
    peak_memory_bytes_max, stages, workers, microbatches}``.

    CPU rows use the validated cost model (profile + per-action overhead +
    contention) over the calibrated link; GPU rows the roofline estimate of the
    same profile over catalog links. Speed-up is over one device of the same kind
    running ``sequential``. Pipelines use S = devices (x V chunks per device for the
    virtual-stage schedules) and M = 2 x devices micro-batches (or the fewest the
    schedule accepts above that).
    """
    from stalesim.schedule import ScheduleConfig, get_spec
    from stalesim.sim.model import SimHardware
    from stalesim.validate.costmodel import CostModel, simulate_with_costs
    from stalesim.workloads.hardware import hardware_from_catalog, roofline_profile

    rows: list[dict[str, Any]] = []
    n_layers = cm.profile.n_layers
    gpu_prof = roofline_profile(cm.profile, gpu)
    gpu_cm = CostModel(gpu_prof)
    kinds: list[tuple[str, str, Any, Any]] = [(cpu_label, cpu_hw.link, cm, cpu_hw)]
    for link in gpu_links:
        kinds.append((gpu, link, gpu_cm, SimHardware.from_hardware(hardware_from_catalog(gpu, link))))
    for label, link, model, hw in kinds:
        base, _ = simulate_with_costs(model, hw, ScheduleConfig("sequential", batches=8), ppv=None,
                                      batch_size=batch_size)
        for n in devices:
            for name in schedules:
                spec = get_spec(name)
                S = n * spec.stages_per_device  # V chunks per device: S = devices x V
                if not spec.data_parallel and n_layers < S:
                    continue
                M = 2 * n if spec.uses_micro else 1
                sc = spec.config(stages=1 if spec.data_parallel else S, batches=batches,
                                 microbatches=M, workers=n)
                if batch_size % (n if spec.data_parallel else sc.microbatches):
                    continue
                r, _ = simulate_with_costs(model, hw, sc, ppv=None, batch_size=batch_size, rounds=3)
                rows.append({
                    "hardware": label, "link": link, "devices": n, "schedule": name,
                    "stages": r.stages, "workers": r.workers, "microbatches": r.microbatches,
                    "iteration_time_s": r.iteration_time_s,
                    "speedup": base.iteration_time_s / r.iteration_time_s if r.iteration_time_s else None,
                    "utilization_mean": sum(r.utilization) / len(r.utilization),
                    "peak_memory_bytes_max": max(r.peak_memory_bytes) if r.peak_memory_bytes else None,
                    "staleness_max": max(r.staleness) if r.staleness else 0,
                })
    return rows


def prediction_figure(rows: Sequence[dict[str, Any]], path: str | os.PathLike[str]) -> Path:
    """Speed-up vs devices, one panel per (hardware, link), one line per schedule."""
    from stalesim.validate.figures import _plt, _save

    plt = _plt()
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["hardware"], r["link"]), []).append(r)
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 3.4), squeeze=False)
    for ax, ((hwl, link), rs) in zip(axes[0], groups.items()):
        for name in dict.fromkeys(r["schedule"] for r in rs):
            pts = sorted((r["devices"], r["speedup"]) for r in rs if r["schedule"] == name and r["speedup"])
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        ns = sorted({r["devices"] for r in rs})
        ax.plot(ns, ns, ls=":", color="grey", lw=0.8)
        ax.set_title(f"{hwl} / {link}", fontsize=9)
        ax.set_xlabel("devices")
        ax.set_xticks(ns)
    axes[0][0].set_ylabel("predicted speed-up over 1 device")
    axes[0][-1].legend(fontsize=7)
    return _save(fig, path)


def staleness_study(data_dir: str, *, iterations: int = 300, batch_size: int = 64, lr: float = 0.01,
                    device: str = "cpu", progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Emulate LeNet-5 on MNIST: sequential vs the stale-weights pipeline (S=2, PPV (2))."""
    from stalesim.emulator.replay import Emulator
    from stalesim.runtime.config import TrainConfig

    out = []
    for name in ("sequential", "stale"):
        cfg = TrainConfig(model="lenet5", dataset="mnist", schedule=name, ppv=[2], iterations=iterations,
                          batch_size=batch_size, lr=lr, momentum=0.9, seed=0, device=device,
                          data_dir=data_dir).check()
        if progress:
            progress(f"emulating {name} (S=2, PPV (2)) for {iterations} iterations on MNIST")
        s = Emulator(cfg, progress=False).run()
        losses = [x for x in s["losses"] if x is not None]
        tail = losses[-20:]
        out.append({"schedule": name, "staleness": s["staleness"], "iterations": iterations,
                    "final_loss_mean20": sum(tail) / len(tail) if tail else None,
                    "test_accuracy": s.get("final_test_accuracy"), "losses": s["losses"],
                    "versions_match": s.get("versions_match"), "data_note": s.get("data_note"),
                    "wall_time_s": s.get("wall_time_s")})
    return out


def staleness_figure(study: Sequence[dict[str, Any]], path: str | os.PathLike[str]) -> Path:
    from stalesim.validate.figures import _plt, _save

    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for r in study:
        ys = [y for y in r["losses"] if y is not None]
        k = 10
        smooth = [sum(ys[max(0, i - k + 1):i + 1]) / len(ys[max(0, i - k + 1):i + 1]) for i in range(len(ys))]
        acc = r.get("test_accuracy")
        ax.plot(smooth, label=f"{r['schedule']} (staleness {r['staleness']}, "
                              f"test acc {acc:.3f})" if acc is not None else r["schedule"])
    ax.set_xlabel("iteration")
    ax.set_ylabel("training loss (10-step mean)")
    ax.set_title("LeNet-5 on MNIST, emulated: sequential vs stale weights (S=2, PPV (2))", fontsize=9)
    ax.legend(fontsize=8)
    return _save(fig, path)


def fmt_bytes(b: float | None) -> str:
    if b is None or not math.isfinite(b):
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(b) < 1024 or unit == "GiB":
            return f"{b:.3g}{unit}"
        b /= 1024
    return f"{b}"  # pragma: no cover
