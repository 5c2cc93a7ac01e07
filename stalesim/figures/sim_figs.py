"""Figures from the schedule IR and the simulator (cheap: no training).

Each function takes the output folder and a :class:`Ctx` and returns the paths
it wrote (a CSV with every number plotted, and a PNG).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from stalesim.figures import paper
from stalesim.figures.common import pyplot, save, shape_profile, write_csv

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

    def profile(self, model: str, batch: int = BATCH):
        return shape_profile(model, self.profiles, refresh=self.refresh).at_batch_size(batch)


def _roofline(prof, device: str):
    from stalesim.workloads.hardware import roofline_profile

    return roofline_profile(prof, device)


def _hw(device: str, link: str):
    from stalesim.workloads.hardware import hardware_from_catalog

    return hardware_from_catalog(device, link)


# --------------------------------------------------------------------------- staleness
def staleness_table(out: Path, ctx: Ctx, stages: int = 4) -> list[Path]:
    """Derived staleness per stage for every schedule (S = ``stages``), from the IR."""
    from stalesim.schedule import build_schedule, get_spec, schedule_names

    rows = []
    names = schedule_names()
    for name in names:
        sched = build_schedule(get_spec(name).config(stages=stages, batches=4 * stages + 4,
                                                     microbatches=stages, workers=2))
        st = sched.versions.staleness()
        inc = set(sched.versions.inconsistent_stages())
        for s, v in enumerate(st):
            rows.append({"schedule": name, "policy": str(sched.policy), "stages": len(st), "stage": s,
                         "staleness": v, "weight_inconsistent": s in inc})
    csv_path = write_csv(out / "staleness_table.csv", rows)
    plt = pyplot()
    import numpy as np

    grid = np.full((len(names), stages), np.nan)
    for r in rows:
        if r["stage"] < stages:
            grid[names.index(r["schedule"]), r["stage"]] = r["staleness"]
    fig, ax = plt.subplots(figsize=(5.2, max(4.2, 0.28 * len(names) + 1.0)))  # a row per schedule
    im = ax.imshow(grid, cmap="Oranges", aspect="auto", vmin=0)
    for i in range(len(names)):
        for j in range(stages):
            if not np.isnan(grid[i, j]):
                inc = any(r["schedule"] == names[i] and r["stage"] == j and r["weight_inconsistent"]
                          for r in rows)
                ax.text(j, i, f"{int(grid[i, j])}{'*' if inc else ''}", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(stages), [f"s={j}" for j in range(stages)])
    ax.set_yticks(range(len(names)), names)
    ax.set_title(f"staleness u-1-v_F per stage, S={stages} (* = v_B != v_F)")
    fig.colorbar(im, ax=ax, shrink=0.8)
    return [csv_path, save(fig, out / "staleness_table.png")]


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
    axes[1].legend(fontsize=7, loc="lower right")
    return [csv_path, save(fig, out / "predicted_speedup_resnet_2gpu.png")]


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
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for name in dict.fromkeys(r["schedule"] for r in rows):
        rs = [r for r in rows if r["schedule"] == name]
        lab = name + (f" (M={rs[0]['microbatches']})" if rs[0]["microbatches"] > 1 else "")
        axes[0].plot([r["stages"] for r in rs], [r["speedup"] for r in rs], "o-", label=lab)
        axes[1].plot([r["stages"] for r in rs], [r["peak_memory_mib_max"] for r in rs], "o-", label=lab)
    axes[0].plot([2, 4, 8], [2, 4, 8], ":", color="grey", label="ideal")
    axes[0].set(xlabel="stages S (devices)", ylabel="predicted speed-up", xticks=[2, 4, 8])
    axes[1].set(xlabel="stages S (devices)", ylabel="peak memory, max over devices (MiB)", xticks=[2, 4, 8])
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{model}, batch {BATCH}, {device} (roofline) over {link}", fontsize=9)
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

        def tot(r, comps=None):
            return sum(sum(v for k, v in b.items() if comps is None or k in comps) for b in r.memory_breakdown)

        wa = ("weights", "activations")
        seq = res["sequential"]
        row = {"model": model, "ppv": ref["ppv"], "batch_size": BATCH,
               "weights_mib": tot(seq, ("weights",)) / 2**20,
               "activations_mib_sequential": tot(seq, ("activations",)) / 2**20,
               "paper_weights_mb": ref["weights_mb"],
               "paper_activations_mb": ref["act_mb_per_sample"] * BATCH}
        for name in ("stale", "pipedream", "pipedream4"):
            r = res[name]
            row[f"{name}_total_mib"] = tot(r) / 2**20
            row[f"{name}_increase_pct_all"] = 100 * (tot(r) / tot(seq) - 1)
            row[f"{name}_increase_pct_w_act"] = 100 * (tot(r, wa) / tot(seq, wa) - 1)
            row[f"{name}_versions_kept"] = r.versions["versions_kept"]
            row[f"{name}_in_flight"] = r.versions["max_in_flight"]
        row["sequential_total_mib"] = tot(seq) / 2**20
        row["paper_stale_pct"] = ref["stale_pct"]
        row["paper_pipedream_pct"] = ref["pipedream_pct"]
        rows.append(row)
    csv_path = write_csv(out / "memory_stale_vs_stash.csv", rows)
    plt = pyplot()
    import numpy as np

    fig, ax = plt.subplots(figsize=(8, 3.8))
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
    ax.set_title("2 partitions (paper's 4-stage), batch 128: stale weights vs weight stashing", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    return [csv_path, save(fig, out / "memory_stale_vs_stash.png")]


# --------------------------------------------------------------------------- Pipe-SGD
def _scale_allreduce(prof, factor: float):
    """Compression as the timing model sees it: all-reduce messages shrink by ``factor``."""
    return replace(prof, layers=[replace(lp, param_bytes=round(lp.param_bytes * factor)) for lp in prof.layers])


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
    from stalesim.schedule import ScheduleConfig, get_spec
    from stalesim.sim import SimOptions, simulate
    from stalesim.sim.model import SimHardware

    base = _roofline(ctx.profile(model, per_worker_batch), device)
    rows = []

    def point(sweep: str, P: int, hw, link: str, comp: str, factor: float, lat_us=None, bw=None,
              event=False):
        prof = _scale_allreduce(base, factor)
        prof = replace(prof, batch_size=per_worker_batch)
        B = per_worker_batch * P
        one = simulate(prof, ScheduleConfig("sequential"),
                       options=SimOptions(batch_size=per_worker_batch, method="fast", keep_timeline=False))
        rec = {"sweep": sweep, "model": model, "device": device, "link": link, "workers": P,
               "latency_us": lat_us, "bandwidth_GBps": bw, "compression": comp,
               "per_worker_batch": per_worker_batch}
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
        rec["one_device_samples_per_s"] = per_worker_batch / one.iteration_time_s
        rec["pipe_over_sync"] = rec["sync_iteration_ms"] / rec["pipe_iteration_ms"]
        rec["sync_scaling"] = rec["sync_samples_per_s"] / rec["one_device_samples_per_s"]
        rec["pipe_scaling"] = rec["pipe_samples_per_s"] / rec["one_device_samples_per_s"]
        rows.append(rec)

    comps = (("none", 1.0), ("fp16", 0.5), ("int8", 0.25))
    for link in ("10gbe", "25gbe", "100gbe"):
        for P in (2, 4, 8, 16):
            for comp, f in comps:
                point("cluster", P, _hw(device, link), link, comp, f, event=(comp == "none"))
    from stalesim.workloads.hardware import get_link

    bw10 = get_link("10gbe").bandwidth_Bps
    for lat in (1, 10, 100, 1000, 10000):
        hw = SimHardware(device=device, link=f"{lat}us-10GbE", latency_ns=lat * 1000, bandwidth_Bps=bw10)
        point("latency", 4, hw, f"alpha={lat}us, 10GbE bandwidth", "none", 1.0, lat_us=lat, bw=bw10 / 1e9)
    for gbps in (1, 2.5, 5, 10, 25, 50, 100, 200):
        hw = SimHardware(device=device, link=f"{gbps}Gb/s", latency_ns=20_000, bandwidth_Bps=gbps * 1e9 / 8)
        point("bandwidth", 4, hw, f"{gbps} Gb/s, 20 us", "none", 1.0, lat_us=20, bw=gbps / 8)
    for r in rows:
        ref = next(q for q in rows if q["sweep"] == r["sweep"] and q["link"] == r["link"]
                   and q["workers"] == r["workers"] and q["compression"] == "none")
        r["over_sync_uncompressed"] = ref["sync_iteration_ms"] / r["pipe_iteration_ms"]
    csv_path = write_csv(out / "pipe_sgd_timing.csv", rows)

    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    ax = axes[0]
    for link, col in (("10gbe", "tab:red"), ("25gbe", "tab:orange"), ("100gbe", "tab:green")):
        rs = [r for r in rows if r["sweep"] == "cluster" and r["link"] == link and r["compression"] == "none"]
        ax.plot([r["workers"] for r in rs], [r["sync_scaling"] for r in rs], "o--", color=col, label=f"sync {link}")
        ax.plot([r["workers"] for r in rs], [r["pipe_scaling"] for r in rs], "o-", color=col, label=f"pipe-sgd {link}")
    rs = [r for r in rows if r["sweep"] == "cluster" and r["link"] == "10gbe" and r["compression"] == "int8"]
    ax.plot([r["workers"] for r in rs], [r["pipe_scaling"] for r in rs], "s-", color="k",
            label="pipe-sgd 10gbe + int8")
    ax.plot([2, 16], [2, 16], ":", color="grey")
    ax.set(xscale="log", yscale="log", xlabel="workers P", ylabel="throughput / one device",
           title=f"{model} on {device} (roofline), {per_worker_batch}/worker")
    ax.set_xticks([2, 4, 8, 16], ["2", "4", "8", "16"])
    ax.legend(fontsize=6)
    for ax, sweep, xkey, xlabel in ((axes[1], "latency", "latency_us", "link latency alpha (us), 10GbE bandwidth"),
                                    (axes[2], "bandwidth", "bandwidth_GBps", "link bandwidth (GB/s), 20 us")):
        rs = [r for r in rows if r["sweep"] == sweep]
        ax.plot([r[xkey] for r in rs], [r["sync_iteration_ms"] for r in rs], "o--", label="synchronous dp")
        ax.plot([r[xkey] for r in rs], [r["pipe_iteration_ms"] for r in rs], "o-", label="pipe-sgd (width 2)")
        ax.set(xscale="log", yscale="log", xlabel=xlabel, ylabel="iteration time (ms), P=4")
        ax.legend(fontsize=7)
    return [csv_path, save(fig, out / "pipe_sgd_timing.png")]
