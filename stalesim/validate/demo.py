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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    pass

PREDICT_SCHEDULES = ("gpipe", "1f1b", "pipedream", "stale", "dp", "pipe-sgd", "interleaved-1f1b", "zb-h1",
                     "zb-h2", "zb-v", "dualpipev")


def predict_grid(cm: Any, cpu_hw: Any, *, devices: Sequence[int] = (2, 4, 8),
                 schedules: Sequence[str] = PREDICT_SCHEDULES, batch_size: int = 128,
                 gpu: str = "h100-sxm", gpu_links: Sequence[str] = ("pcie4-x16", "nvlink4"),
                 cpu_label: str = "this CPU", batches: int | None = None) -> list[dict[str, Any]]:
    """Rows ``{hardware, link, devices, schedule, iteration_time_s, speedup, utilization_mean,
    peak_memory_bytes_max, stages, workers, microbatches, cost_source, cost_batches, warnings,
    above_ideal}``.

    CPU rows use the validated cost model (profile + per-action overhead +
    contention) over the calibrated link; GPU rows the roofline estimate of the
    same profile over catalog links. Speed-up is over one device of the same kind
    running ``sequential``. Pipelines use S = devices (x V chunks per device for the
    virtual-stage schedules) and M = 2 x devices micro-batches (or the fewest the
    schedule accepts above that).
    ``cost_source`` is the least trustworthy origin of the costs of the row and
    of its baseline (measured / interpolated / roofline / extrapolated, see
    :mod:`stalesim.workloads.scaling`); ``cost_batches`` maps each batch size
    used to its source; ``warnings`` are the plausibility warnings of both
    simulations plus the speed-up limit (speed-up <= devices) with its cause.
    """
    from stalesim.schedule import ScheduleConfig, get_spec
    from stalesim.sim.model import SimHardware
    from stalesim.sim.plausibility import check_relative_speedup, without_speedup
    from stalesim.validate.costmodel import CostModel, simulate_with_costs
    from stalesim.workloads.hardware import hardware_from_catalog, roofline_profile
    from stalesim.workloads.scaling import worst_source

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
                # the row's speed-up is over `base` (same cost model), so its limit is checked
                # against `base`, not simulate()'s own baseline
                warnings = list(dict.fromkeys(without_speedup(base.warnings + r.warnings)
                                              + check_relative_speedup(r, base, n)))
                speedup = base.iteration_time_s / r.iteration_time_s if r.iteration_time_s else None
                rows.append({
                    "hardware": label, "link": link, "devices": n, "schedule": name,
                    "stages": r.stages, "workers": r.workers, "microbatches": r.microbatches,
                    "iteration_time_s": r.iteration_time_s,
                    "speedup": speedup,
                    "utilization_mean": sum(r.utilization) / len(r.utilization),
                    "peak_memory_bytes_max": max(r.peak_memory_bytes) if r.peak_memory_bytes else None,
                    "staleness_max": max(r.staleness) if r.staleness else 0,
                    "cost_source": worst_source([r.cost_source, base.cost_source]),
                    "cost_batches": _cost_batches(r, base),
                    "warnings": warnings,
                    "above_ideal": bool(speedup and speedup > n * (1 + 1e-6)),
                })
    return rows


def _cost_batches(*results: Any) -> dict[str, str]:
    """batch size -> source, over the action batches and mini-batches of ``results``."""
    out: dict[str, str] = {}
    for r in results:
        for key in ("action_batch", "batch_size"):
            d = r.cost_detail.get(key)
            if d:
                out[str(d["batch_size"])] = d["source"]
    return dict(sorted(out.items(), key=lambda kv: int(kv[0])))


def ideal_line_statement(rows: Sequence[dict[str, Any]]) -> str:
    """One line: are any predictions above the ideal line, and if so, what implies them."""
    above = [r for r in rows if r.get("above_ideal")]
    ok = [r for r in rows if r.get("speedup")]
    if not above:
        return (f"ideal line: all {len(ok)} predicted speed-ups are at or below the number of "
                f"devices")
    measured = [r for r in above if r.get("cost_source") in ("measured", "interpolated")]
    parts = [f"{r['schedule']} on {r['devices']} x {r['hardware']} / {r['link']} "
             f"({r['speedup']:.2f}x, {r['cost_source']} costs)" for r in above]
    tail = ("; implied by the measured profile inside its range (smaller batches measured cheaper "
            "per sample), see the warnings" if len(measured) == len(above) else
            "; NOT supported by measurement, see the warnings")
    return f"ideal line: {len(above)} prediction(s) above it: {', '.join(parts)}{tail}"


#: What the demo keeps of each emulation's run summary (same keys, same meaning).
STUDY_KEYS = ("schedule", "staleness_ir", "iterations", "final_test_accuracy", "losses", "versions_match_ir",
              "data_note", "wall_time_s")


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
        # the run summary's own keys (stalesim.summary), plus the smoothed final loss
        row = {k: s[k] for k in STUDY_KEYS}
        row["final_loss_mean20"] = sum(tail) / len(tail) if tail else None
        out.append(row)
    return out


def staleness_figure(study: Sequence[dict[str, Any]], path: str | os.PathLike[str]) -> Path:
    from stalesim.schedule.style import schedule_style
    from stalesim.validate.figures import _plt, _save

    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for r in study:
        ys = [y for y in r["losses"] if y is not None]
        k = 10
        smooth = [sum(ys[max(0, i - k + 1):i + 1]) / len(ys[max(0, i - k + 1):i + 1]) for i in range(len(ys))]
        acc = r.get("final_test_accuracy")
        style = schedule_style(r["schedule"])
        ax.plot(smooth, color=style.color, ls=style.linestyle,
                label=f"{r['schedule']} (staleness {r['staleness_ir']}, "
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
