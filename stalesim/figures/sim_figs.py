"""Figures from the schedule IR and the simulator (cheap: no training).

Each function takes the output folder and a :class:`Ctx` and returns the paths
it wrote (a CSV with every number plotted, and a PNG).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stalesim.figures import paper
from stalesim.figures.common import merge_coincident, plain_log_ticks, pyplot, save, shape_profile, write_csv

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from stalesim.schedule.ir import Schedule
    from stalesim.sim.model import SimHardware
    from stalesim.sim.result import SimResult
    from stalesim.workloads.hardware import Hardware
    from stalesim.workloads.profile import Profile

GPU_WHATIFS = (  # (device, link): the 2-GPU what-ifs (roofline from the shape profile)
    ("v100-sxm2", "pcie3-x16"),
    ("rtx4090", "pcie4-x16"),
    ("a100-40gb-sxm", "nvlink3"),
    ("h100-sxm", "nvlink4"),
)
BATCH = 128


@dataclass
class Ctx:
    """What every figure function gets: where shape profiles live, and whether to re-measure."""

    profiles: Path
    refresh: bool = False
    log: Any = print

    def profile(self, model: str, batch: int = BATCH) -> Profile:
        return shape_profile(model, self.profiles, refresh=self.refresh).at_batch_size(batch)


def _roofline(prof: Profile, device: str) -> Profile:
    from stalesim.workloads.hardware import roofline_profile

    return roofline_profile(prof, device)


def _hw(device: str, link: str) -> Hardware:
    from stalesim.workloads.hardware import hardware_from_catalog

    return hardware_from_catalog(device, link)


# --------------------------------------------------------------------------- staleness
def staleness_table(out: Path, ctx: Ctx, stages: int = 4) -> list[Path]:
    """Derived staleness per stage for every schedule (S = ``stages``), from the IR."""
    from stalesim.schedule import build_schedule, get_spec, schedule_names

    rows: list[dict[str, Any]] = []
    names: list[str] = []  # one per plotted row: a switching schedule gets one row per phase
    for name in schedule_names():
        spec = get_spec(name)
        sched = build_schedule(spec.config(stages=stages, batches=4 * stages + 4,
                                           microbatches=stages, workers=2))
        vt = sched.table
        # (label suffix, first batch, end batch) of each phase
        phases: list[tuple[str, float, float]] = [("", -math.inf, math.inf)]
        if spec.switches:
            sw = _switch_batch(sched)
            phases = [(f" (before switch: {name})", -math.inf, sw),
                      (f" (after switch: {spec.switch_to})", sw, math.inf)]
        for suffix, lo, hi in phases:
            label = name + (suffix.replace(f": {name})", ")") if suffix else "")
            names.append(label)
            st = [0] * stages
            inc: set[int] = set()
            for key in vt.vf:
                if lo <= key[2] < hi:
                    st[key[1]] = max(st[key[1]], vt.staleness_of(key))
                    if vt.vb[key] != vt.vf[key]:
                        inc.add(key[1])
            for sidx, v in enumerate(st):
                rows.append({"schedule": name, "phase": suffix.strip(" ()") or "whole run",
                             "row": label, "policy": str(sched.policy), "stages": len(st), "stage": sidx,
                             "staleness": v, "weight_inconsistent": sidx in inc})
    csv_path = write_csv(out / "staleness_table.csv", rows)
    plt = pyplot()
    import numpy as np

    grid = np.full((len(names), stages), np.nan)
    for r in rows:
        if r["stage"] < stages:
            grid[names.index(r["row"]), r["stage"]] = r["staleness"]
    fig, ax = plt.subplots(figsize=(6.2, max(4.6, 0.28 * len(names) + 1.2)))  # a row per schedule (phase)
    im = ax.imshow(grid, cmap="Oranges", aspect="auto", vmin=0)
    for i in range(len(names)):
        for j in range(stages):
            if not np.isnan(grid[i, j]):
                marked = any(r["row"] == names[i] and r["stage"] == j and r["weight_inconsistent"]
                             for r in rows)
                dark = grid[i, j] > 0.6 * np.nanmax(grid)  # black text vanishes on the darkest cells
                ax.text(j, i, f"{int(grid[i, j])}{'*' if marked else ''}", ha="center", va="center", fontsize=8,
                        color="white" if dark else "black")
    ax.set_xticks(range(stages), [f"s={j}" for j in range(stages)])
    ax.set_yticks(range(len(names)), names)
    ax.set_title(f"staleness u-1-v_F per stage, S={stages}, steady state\n"
                 "(max over batches of each phase; * = v_B != v_F)", fontsize=9)
    fig.colorbar(im, ax=ax, shrink=0.8)
    return [csv_path, save(fig, out / "staleness_table.png")]


def _switch_batch(sched: Schedule) -> int:
    """The batch a switching schedule switches at (its builder always resolves one)."""
    sw = None if sched.config is None else sched.config.switch
    if sw is None:
        raise AssertionError(f"schedule {sched.name!r} switches but was built without a switch point")
    return sw


# --------------------------------------------------------------------------- 2-GPU ResNets
def predicted_speedup_resnet_2gpu(out: Path, ctx: Ctx, batches: int = 400) -> list[Path]:
    """The stale-weights paper's 2-GPU table: stale and hybrid speed-ups, predicted.

    Roofline what-ifs on catalog GPUs (the paper's own GPUs are not modelled);
    ``hybrid`` switches at N/2, the fraction the paper's two speed-ups imply.
    """
    from stalesim.schedule import ScheduleConfig
    from stalesim.sim import SimOptions, simulate

    rows = []
    for ref in paper.STALE_2GPU:
        prof = ctx.profile(ref["model"])
        flops = [lp.flops + (lp.backward_flops or 2 * lp.flops) for lp in prof.layers]
        from stalesim.workloads.partition import weights_ppv_to_cuts

        cut = weights_ppv_to_cuts(prof.weight_layers, ref["ppv"])[0]
        share0 = sum(flops[:cut]) / sum(flops)
        for device, link in GPU_WHATIFS:
            rp = _roofline(prof, device)
            hw = _hw(device, link)
            S = len(ref["ppv"]) + 1
            ppv = tuple(ref["ppv"])
            st = simulate(rp, ScheduleConfig("stale", stages=S), hw,
                          SimOptions(ppv=ppv, method="event", keep_timeline=False))
            hy = simulate(rp, ScheduleConfig("hybrid", stages=S, batches=batches, switch=batches // 2), hw,
                          SimOptions(ppv=ppv, method="fast", keep_timeline=False))
            sc = st.stage_costs
            t0 = sc["forward_s"][0] + sc["backward_s"][0] + sc["update_s"][0]
            t1 = sc["forward_s"][1] + sc["backward_s"][1] + sc["update_s"][1]
            rows.append({
                "model": ref["model"], "ppv": ref["ppv"], "device": device, "link": link,
                "batch_size": BATCH, "stage0_time_share": t0 / (t0 + t1), "stage0_flop_share": share0,
                "pred_speedup_stale": st.speedup, "pred_speedup_hybrid": hy.speedup,
                "pred_iteration_ms_sequential": 1e3 * st.sequential_time_s,
                "pred_iteration_ms_stale": 1e3 * st.iteration_time_s,
                "paper_speedup_pipelined": ref["speedup_pipelined"],
                "paper_speedup_hybrid": ref["speedup_hybrid"],
            })
    csv_path = write_csv(out / "predicted_speedup_resnet_2gpu.csv", rows)
    plt = pyplot()
    import numpy as np

    models = [r["model"] for r in paper.STALE_2GPU]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, key, pkey, title in ((axes[0], "pred_speedup_stale", "speedup_pipelined", "pipelined (stale)"),
                                 (axes[1], "pred_speedup_hybrid", "speedup_hybrid", "hybrid (switch at N/2)")):
        w = 0.8 / (len(GPU_WHATIFS) + 1)
        x = np.arange(len(models))
        ax.bar(x, [r[pkey] for r in paper.STALE_2GPU], w, label="paper (2 GPUs, measured)", color="k")
        for k, (dev, link) in enumerate(GPU_WHATIFS):
            ys = [next(r[key] for r in rows if r["model"] == m and r["device"] == dev) for m in models]
            ax.bar(x + (k + 1) * w, ys, w, label=f"predicted {dev} / {link}")
        ax.set_xticks(x + w * len(GPU_WHATIFS) / 2, models)
        ax.axhline(1, color="grey", lw=0.5)
        ax.set_title(title)
    axes[0].set_ylabel("speed-up over 1 GPU (batch 128, fp32)")
    # one legend below both panels: inside, it hid the hybrid bars of the deepest ResNets
    fig.legend(*axes[0].get_legend_handles_labels(), fontsize=7, loc="lower center", ncol=len(GPU_WHATIFS) + 1)
    fig.suptitle("stale-weights paper's 2-GPU table: measured (black) vs predicted speed-up of pipelined "
                 "and hybrid training at the paper's PPVs (roofline, catalog GPUs)", fontsize=9)
    return [csv_path, save(fig, out / "predicted_speedup_resnet_2gpu.png", rect=(0, 0.07, 1, 1))]


# --------------------------------------------------------------------------- schedules x S
def predicted_speedup_schedules(out: Path, ctx: Ctx, model: str = "resnet56", device: str = "h100-sxm",
                                link: str = "nvlink4") -> list[Path]:
    """Speed-up and peak memory per device vs pipeline depth for each pipeline schedule."""
    from stalesim.schedule import ScheduleConfig
    from stalesim.sim import SimOptions, simulate

    prof = _roofline(ctx.profile(model), device)
    hw = _hw(device, link)
    rows = []
    for S in (2, 4, 8):
        for name, M in (("gpipe", 8), ("1f1b", 8), ("2bw", 8), ("pipedream", 1), ("stale", 1)):
            r = simulate(prof, ScheduleConfig(name, stages=S, microbatches=M), hw,
                         SimOptions(method="fast", keep_timeline=False))
            rows.append({"model": model, "device": device, "link": link, "batch_size": BATCH,
                         "schedule": name, "stages": S, "microbatches": M, "ppv": r.partition["ppv"],
                         "speedup": r.speedup, "iteration_ms": 1e3 * r.iteration_time_s,
                         "bubble_fraction": r.bubble_fraction,
                         "peak_memory_mib_max": max(r.peak_memory_bytes) / 2**20,
                         "max_staleness": max(r.staleness)})
    csv_path = write_csv(out / f"predicted_speedup_{model}_{device}.csv", rows)
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6))
    styles = ("o-", "s--", "^-.", "D:", "v-")
    for ax, key in ((axes[0], "speedup"), (axes[1], "peak_memory_mib_max")):
        series = []
        for name in dict.fromkeys(r["schedule"] for r in rows):
            rs = [r for r in rows if r["schedule"] == name]
            lab = name + (f" (M={rs[0]['microbatches']})" if rs[0]["microbatches"] > 1 else "")
            series.append((lab, [r["stages"] for r in rs], [r[key] for r in rs]))
        # schedules with the same partition and no bubble predict the same time: one line, all named
        first = [lab for lab, *_ in series]
        for lab, xs, ys in merge_coincident(series):
            k = first.index(lab.split(" = ")[0].split(" ≈ ")[0])  # same colour and marker in both panels
            ax.plot(xs, ys, styles[k % len(styles)], color=f"C{k}", label=lab, ms=5)
        ax.set_xticks([2, 4, 8])
        ax.set_xlabel("stages S (devices)")
        # below the axes: inside, the legend hides the top line's S=8 point
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3)
    axes[0].plot([2, 4, 8], [2, 4, 8], ":", color="grey")
    axes[0].annotate("ideal (S)", (6.2, 6.6), color="grey", fontsize=7)
    axes[0].set(ylabel="predicted speed-up over 1 device", title="speed-up")
    axes[1].set(ylabel="peak memory, max over devices (MiB)", title="peak memory per device")
    ppv2 = next(r["ppv"] for r in rows if r["stages"] == 2)
    fig.suptitle(f"{model}, batch {BATCH}, {device} (roofline) over {link}; every schedule on the "
                 f"FLOP-balanced split (S=2: PPV ({', '.join(map(str, ppv2))}), not the paper's "
                 f"2-GPU PPV (19))", fontsize=9)
    return [csv_path, save(fig, out / f"predicted_speedup_{model}_{device}.png")]


# --------------------------------------------------------------------------- memory
def memory_stale_vs_stash(out: Path, ctx: Ctx) -> list[Path]:
    """Memory increase of 2-partition (paper: 4-stage) stale pipelining vs PipeDream's stashing.

    Increase = (sum over devices of peak memory) / (one device, sequential) - 1,
    in two accountings: everything the simulator counts (weights x versions,
    gradients, momentum, stashed activations, message buffers) and weights +
    activations only (our reading of the paper's Table 9).
    """
    from stalesim.schedule import ScheduleConfig
    from stalesim.sim import SimOptions, simulate

    rows = []
    for model, ref in paper.STALE_MEMORY_TABLE9.items():
        prof = ctx.profile(model)
        fast = SimOptions(method="fast", keep_timeline=False)
        staged = replace(fast, ppv=tuple(ref["ppv"]))
        S = len(ref["ppv"]) + 1
        res = {"sequential": simulate(prof, ScheduleConfig("sequential"), options=fast)}
        for name in ("stale", "pipedream"):
            res[name] = simulate(prof, ScheduleConfig(name, stages=S), options=staged)
        # PipeDream on as many devices as the paper's pipeline has stages (4; min-max partition)
        res["pipedream4"] = simulate(prof, ScheduleConfig("pipedream", stages=4), options=fast)
        wa = ("weights", "activations")
        seq = res["sequential"]
        row = {"model": model, "ppv": ref["ppv"], "batch_size": BATCH,
               "weights_mib": _memory_total(seq, ("weights",)) / 2**20,
               "activations_mib_sequential": _memory_total(seq, ("activations",)) / 2**20,
               "paper_weights_mb": ref["weights_mb"],
               "paper_activations_mb": ref["act_mb_per_sample"] * BATCH}
        for name in ("stale", "pipedream", "pipedream4"):
            r = res[name]
            row[f"{name}_total_mib"] = _memory_total(r) / 2**20
            row[f"{name}_increase_pct_all"] = 100 * (_memory_total(r) / _memory_total(seq) - 1)
            row[f"{name}_increase_pct_w_act"] = 100 * (_memory_total(r, wa) / _memory_total(seq, wa) - 1)
            row[f"{name}_versions_kept"] = r.versions["versions_kept"]
            row[f"{name}_in_flight"] = r.versions["max_in_flight"]
        row["sequential_total_mib"] = _memory_total(seq) / 2**20
        row["paper_stale_pct"] = ref["stale_pct"]
        row["paper_pipedream_pct"] = ref["pipedream_pct"]
        rows.append(row)
    csv_path = write_csv(out / "memory_stale_vs_stash.csv", rows)
    plt = pyplot()
    import numpy as np

    fig, ax = plt.subplots(figsize=(8.5, 4.8))
    x = np.arange(len(rows))
    w = 0.12
    series = [("paper_stale_pct", "paper: stale (this work)", "tab:orange", None),
              ("stale_increase_pct_w_act", "ours: stale, weights+act.", "tab:orange", "//"),
              ("stale_increase_pct_all", "ours: stale, all", "tab:orange", ".."),
              ("paper_pipedream_pct", "paper: PipeDream", "tab:blue", None),
              ("pipedream_increase_pct_w_act", "ours: pipedream, weights+act.", "tab:blue", "//"),
              ("pipedream_increase_pct_all", "ours: pipedream, all", "tab:blue", ".."),
              ("pipedream4_increase_pct_w_act", "ours: pipedream S=4, weights+act.", "tab:cyan", "//")]
    for k, (key, lab, col, hatch) in enumerate(series):
        ax.bar(x + k * w, [r[key] for r in rows], w, label=lab, color=col, hatch=hatch,
               alpha=1.0 if hatch is None else 0.55, edgecolor="k", lw=0.3)
    ax.set_xticks(x + 3 * w, [f"{r['model']} PPV ({', '.join(map(str, r['ppv']))})" for r in rows])
    ax.set_ylabel("memory increase over non-pipelined (%)")
    ax.set_ylim(0, 1.1 * max(max(r[key] for r in rows) for key, *_ in series))
    ax.set_title("batch 128: stale weights vs weight stashing (PipeDream) on the paper's 2 partitions "
                 "(its \"4-stage\" PPV),\nand PipeDream on 4 devices (min-max split); "
                 "sum over devices of the peak / one device - 1", fontsize=9)
    # below the axes: inside, the legend would hide the tallest bars
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.1))
    return [csv_path, save(fig, out / "memory_stale_vs_stash.png")]


def _memory_total(r: SimResult, comps: tuple[str, ...] | None = None) -> float:
    """Memory summed over devices, of the components ``comps`` (None: all)."""
    return sum(sum(v for k, v in b.items() if comps is None or k in comps) for b in r.memory_breakdown)


# --------------------------------------------------------------------------- Pipe-SGD
def _scale_allreduce(prof: Profile, factor: float) -> Profile:
    """Compression as the timing model sees it: all-reduce messages shrink by ``factor``."""
    return replace(prof, layers=[replace(lp, param_bytes=round(lp.param_bytes * factor)) for lp in prof.layers])


# all-reduce compression as the timing model sees it: (name, bytes on the wire per byte)
_COMPRESSIONS = (("none", 1.0), ("fp16", 0.5), ("int8", 0.25))
_CLUSTER_LINKS = ("10gbe", "25gbe", "100gbe")


@dataclass(frozen=True)
class _PipeSgdCase:
    """The workload every Pipe-SGD point simulates: ``base`` (roofline) at ``per_worker_batch``."""

    base: Profile
    model: str
    device: str
    per_worker_batch: int

    def point(self, sweep: str, P: int, hw: Hardware | SimHardware, link: str, comp: str, factor: float,
              lat_us: float | None = None, bw: float | None = None, event: bool = False) -> dict[str, Any]:
        """Synchronous dp and Pipe-SGD on ``P`` workers over ``hw`` (with the event simulation
        beside the fast path when ``event``), against one device."""
        from stalesim.schedule import ScheduleConfig, get_spec
        from stalesim.sim import SimOptions, simulate

        pwb = self.per_worker_batch
        prof = replace(_scale_allreduce(self.base, factor), batch_size=pwb)
        B = pwb * P
        one = simulate(prof, ScheduleConfig("sequential"),
                       options=SimOptions(batch_size=pwb, method="fast", keep_timeline=False))
        rec: dict[str, Any] = {"sweep": sweep, "model": self.model, "device": self.device, "link": link,
                               "workers": P, "latency_us": lat_us, "bandwidth_GBps": bw, "compression": comp,
                               "per_worker_batch": pwb}
        for name in ("dp", "pipe-sgd"):
            r = simulate(prof, ScheduleConfig(name, workers=P), hw,
                         SimOptions(batch_size=B, method="fast", keep_timeline=False))
            key = "sync" if get_spec(name).staleness_free else "pipe"
            rec[f"{key}_iteration_ms"] = 1e3 * r.iteration_time_s
            rec[f"{key}_samples_per_s"] = B / r.iteration_time_s
            if event:
                e = simulate(prof, ScheduleConfig(name, workers=P), hw,
                             SimOptions(batch_size=B, method="event", keep_timeline=False))
                rec[f"{key}_iteration_ms_event"] = 1e3 * e.iteration_time_s
        rec["one_device_samples_per_s"] = pwb / one.iteration_time_s
        rec["pipe_over_sync"] = rec["sync_iteration_ms"] / rec["pipe_iteration_ms"]
        rec["sync_scaling"] = rec["sync_samples_per_s"] / rec["one_device_samples_per_s"]
        rec["pipe_scaling"] = rec["pipe_samples_per_s"] / rec["one_device_samples_per_s"]
        return rec


def pipe_sgd_timing(out: Path, ctx: Ctx, model: str = "resnet56", device: str = "v100-sxm2",
                    per_worker_batch: int = 128) -> list[Path]:
    """Synchronous data parallel vs Pipe-SGD (width 2) over ring all-reduce.

    Fast path (T_sync = T_comp + T_up + T_comm; Pipe-SGD max(T_comp + T_up, T_comm)),
    checked against the event simulation at every uncompressed point of the cluster-size
    sweep. ResNet-56 on a V100 over 10GbE sits where compute and communication are of the
    same order, the regime the width-2 pipeline is for; ``over_sync_uncompressed`` sets
    Pipe-SGD (with its compression) beside uncompressed synchronous training, the kind
    of comparison behind the paper's 5.4x.
    """
    case = _PipeSgdCase(_roofline(ctx.profile(model, per_worker_batch), device), model, device, per_worker_batch)
    rows = _pipe_sgd_rows(case)
    csv_path = write_csv(out / "pipe_sgd_timing.csv", rows)
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    _pipe_sgd_scaling_panel(axes[0], rows)
    _pipe_sgd_latency_panel(axes[1], rows)
    _pipe_sgd_bandwidth_panel(axes[2], rows)
    fig.suptitle(f"Pipe-SGD timing model: {model} on {device} (roofline), {per_worker_batch} samples per "
                 "worker, ring all-reduce; compression = fewer bytes on the wire only", fontsize=9)
    return [csv_path, save(fig, out / "pipe_sgd_timing.png")]


def _pipe_sgd_rows(case: _PipeSgdCase) -> list[dict[str, Any]]:
    """The three sweeps: cluster size x catalog link x compression, latency at P = 4 over
    10GbE's bandwidth, bandwidth x compression at P = 4 and 20 us."""
    from stalesim.sim.model import SimHardware
    from stalesim.workloads.hardware import get_link

    device = case.device
    rows = []
    for link in _CLUSTER_LINKS:
        for P in (2, 4, 8, 16):
            for comp, f in _COMPRESSIONS:
                rows.append(case.point("cluster", P, _hw(device, link), link, comp, f, event=(comp == "none")))
    bw10 = get_link("10gbe").bandwidth_Bps
    for lat in (1, 10, 100, 1000, 10000):
        hw = SimHardware(device=device, link=f"{lat}us-10GbE", latency_ns=lat * 1000, bandwidth_Bps=bw10)
        rows.append(case.point("latency", 4, hw, f"alpha={lat}us, 10GbE bandwidth", "none", 1.0, lat_us=lat,
                               bw=bw10 / 1e9))
    for gbps in (1, 2.5, 5, 10, 25, 50, 100, 200):
        hw = SimHardware(device=device, link=f"{gbps}Gb/s", latency_ns=20_000, bandwidth_Bps=gbps * 1e9 / 8)
        for comp, f in _COMPRESSIONS:
            rows.append(case.point("bandwidth", 4, hw, f"{gbps} Gb/s, 20 us", comp, f, lat_us=20, bw=gbps / 8))
    for r in rows:
        ref = next(q for q in rows if q["sweep"] == r["sweep"] and q["link"] == r["link"]
                   and q["workers"] == r["workers"] and q["compression"] == "none")
        r["over_sync_uncompressed"] = ref["sync_iteration_ms"] / r["pipe_iteration_ms"]
    return rows


def _pipe_sgd_scaling_panel(ax: Axes, rows: list[dict[str, Any]]) -> None:
    cl = [r for r in rows if r["sweep"] == "cluster"]
    Ps = sorted({r["workers"] for r in cl})
    series = []
    for name, key in (("sync", "sync_scaling"), ("pipe-sgd", "pipe_scaling")):
        for link in _CLUSTER_LINKS:
            for comp, _f in _COMPRESSIONS:
                if name == "sync" and link != "10gbe" and comp != "none":
                    continue  # in the CSV; the plot keeps compression for sync at 10GbE only
                rs = [r for r in cl if r["link"] == link and r["compression"] == comp]
                series.append((f"{name} {link}" + ("" if comp == "none" else f" {comp}"),
                               [r["workers"] for r in rs], [r[key] for r in rs]))
    # coincident lines (e.g. every compute-bound pipe-sgd point) are drawn once with all their names
    for lab, xs, ys in merge_coincident(series, rtol=1e-6):
        n_more = lab.count(" = ")
        shown = lab if n_more < 2 else lab.split(" = ")[0] + f" and {n_more} more, identical (see CSV)"
        ax.plot(xs, ys, "o-" if lab.startswith("pipe") else "s--", label=shown, ms=4)
    ax.plot([Ps[0], Ps[-1]], [Ps[0], Ps[-1]], ":", color="grey", label="linear")
    ax.set(xscale="log", yscale="log", xlabel="workers P", ylabel="throughput / one device",
           title="scaling vs cluster size (none / fp16 / int8)")
    ax.set_xticks(Ps)
    plain_log_ticks(ax)
    ax.legend(fontsize=5.5)


def _pipe_sgd_latency_panel(ax: Axes, rows: list[dict[str, Any]]) -> None:
    rs = [r for r in rows if r["sweep"] == "latency"]
    ax.plot([r["latency_us"] for r in rs], [r["sync_iteration_ms"] for r in rs], "s--", label="synchronous dp")
    ax.plot([r["latency_us"] for r in rs], [r["pipe_iteration_ms"] for r in rs], "o-", label="pipe-sgd (width 2)")
    ax.set(xscale="log", yscale="log", xlabel="link latency alpha (us)", ylabel="iteration time (ms), P=4",
           title="P=4, 10GbE bandwidth, vs link latency")
    plain_log_ticks(ax)
    ax.legend(fontsize=7)


def _pipe_sgd_bandwidth_panel(ax: Axes, rows: list[dict[str, Any]]) -> None:
    for (comp, _f), col in zip(_COMPRESSIONS, ("tab:blue", "tab:orange", "tab:green"), strict=True):
        rs = [r for r in rows if r["sweep"] == "bandwidth" and r["compression"] == comp]
        ax.plot([r["bandwidth_GBps"] for r in rs], [r["sync_iteration_ms"] for r in rs], "s--", color=col,
                label=f"synchronous dp, {comp}", ms=4)
        ax.plot([r["bandwidth_GBps"] for r in rs], [r["pipe_iteration_ms"] for r in rs], "o-", color=col,
                label=f"pipe-sgd, {comp}", ms=4, alpha=0.8)
    ax.set(xscale="log", yscale="log", xlabel="link bandwidth (GB/s)", ylabel="iteration time (ms), P=4",
           title="P=4, 20 us latency, vs bandwidth and compression")
    plain_log_ticks(ax)
    ax.legend(fontsize=6)
