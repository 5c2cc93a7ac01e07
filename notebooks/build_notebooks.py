"""The reproduction notebooks' cell sources; `make notebooks` builds and executes them.

    make notebooks                              # build + execute in place (what is committed)
    .venv/bin/python notebooks/build_notebooks.py   # build only, without outputs

Every notebook starts with the same parameters cell: ``SHORT`` (default, what
CI runs: tiny iteration counts, synthetic data where real data is not the
point) unless ``STALESIM_NB_FULL`` is set; ``DATA_DIR`` from ``$STALESIM_DATA``.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

PARAMS = '''# Parameters: short mode by default (what CI runs); STALESIM_NB_FULL=1 for the full runs.
import os, sys, json, tempfile, time
from pathlib import Path
SHORT = os.environ.get("STALESIM_NB_FULL", "") == ""
DATA_DIR = os.environ.get("STALESIM_DATA") or None
ROOT = next(p for p in [Path.cwd(), *Path.cwd().parents] if (p / "pyproject.toml").exists())
WORK = Path(tempfile.mkdtemp(prefix="{tag}_")) if SHORT else ROOT / "runs" / "{tag}"
WORK.mkdir(parents=True, exist_ok=True)
import torch
torch.set_num_threads(1 if SHORT else 2)
import pandas as pd
pd.set_option("display.width", 160); pd.set_option("display.max_columns", 30)
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from IPython.display import Image, display
print(f"SHORT={{SHORT}} DATA_DIR={{DATA_DIR}} WORK={{WORK}}")'''


def nb(tag: str, cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    book = new_notebook()
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    book.metadata["language_info"] = {"name": "python"}
    out = []
    for kind, src in cells:
        src = src.strip("\n")
        if kind == "md":
            out.append(new_markdown_cell(src))
        else:
            out.append(new_code_cell(PARAMS.format(tag=tag) if src == "PARAMS" else src))
    for i, cell in enumerate(out):
        cell.id = f"{tag}-{i:02d}"  # stable ids: regenerating gives no diff
    book.cells = out
    return book


NB01 = [("md", """
# 01 — Predict the speed-up before buying hardware

Job 1 of stalesim: measure per-layer costs once on the machine you have, then
ask what N devices of kind X over link Y, schedule Z and partition P would give
(iteration time, utilization, speed-up, memory per device). GPU what-ifs re-time
the measured profile with the roofline model of a catalog part
(`stalesim.workloads.hardware.roofline_profile`). Everything below calls the
library (`profile_model`, `min_max_partition`, `simulate`); the CLI equivalents are
`stalesim profile`, `stalesim partition`, `stalesim simulate`, `stalesim sweep`.

Short mode profiles LeNet-5 at batch 64; full mode ResNet-20 at batch 128.
"""), ("code", "PARAMS"), ("md", "## 1. Profile (or load a stored profile)"), ("code", """
from stalesim.workloads.profiler import profile_model
from stalesim.workloads.profile import load_profile
MODEL, BATCH = ("lenet5", 64) if SHORT else ("resnet20", 128)
stored = os.environ.get("STALESIM_NB_PROFILE")  # reuse a profile JSON if you have one
if stored:
    prof = load_profile(stored)
else:
    prof = profile_model(MODEL, [BATCH], device="cpu", threads=1,
                         repeats=2 if SHORT else 5, warmup=1 if SHORT else 2)
    prof.to_json(WORK / "profile.json")
pd.DataFrame([{"block": lp.name, "forward ms": 1e3 * lp.forward_s, "backward ms": 1e3 * lp.backward_s,
               "update ms": 1e3 * lp.update_s, "params KiB": lp.param_bytes / 1024,
               "out KiB": lp.output_bytes / 1024, "MFLOP fwd": lp.flops / 1e6} for lp in prof.layers])
"""), ("md", "## 2. Pick a partition (exact min-max over F+B+U per block)"), ("code", """
from stalesim.workloads.partition import min_max_partition
rows = []
for S in (2, 3, 4):
    if S > prof.n_layers:
        continue
    part = min_max_partition(prof.costs(), S, weight_layers=prof.weight_layers)
    rows.append({"stages": S, "ppv": part.ppv, "stage ms": [round(1e3 * c, 2) for c in part.stage_costs],
                 "bottleneck stage": part.bottleneck_stage,
                 "ideal speed-up": sum(prof.costs()) / part.bottleneck})
pd.DataFrame(rows)
"""), ("md", """
## 3. Predict across schedules, devices and links
This CPU over the catalog `gloo-loopback` link (run `stalesim calibrate` for the
measured one), and catalog GPUs by roofline over PCIe / NVLink.
"""), ("code", """
from stalesim.schedule import ScheduleConfig, get_spec
from stalesim.sim import SimOptions, simulate
from stalesim.workloads.hardware import hardware_from_catalog, roofline_profile
targets = [("this CPU", prof, hardware_from_catalog("cpu-core", "gloo-loopback"))]
gpus = [("v100-sxm2", "pcie3-x16"), ("h100-sxm", "nvlink4")] if SHORT else \\
       [("v100-sxm2", "pcie3-x16"), ("a100-40gb-sxm", "nvlink3"), ("rtx4090", "pcie4-x16"),
        ("h100-sxm", "pcie5-x16"), ("h100-sxm", "nvlink4")]
for dev, link in gpus:
    targets.append((f"{dev} / {link}", roofline_profile(prof, dev), hardware_from_catalog(dev, link)))
SCHEDS = [("gpipe", 4), ("1f1b", 4), ("2bw", 4), ("pipedream", 1), ("stale", 1), ("dp", 1), ("pipe-sgd", 1)]
method = "fast" if SHORT else "event"
pred = []
for label, p, hw in targets:
    for n in ((2, 4) if SHORT else (2, 4, 8)):
        if n > p.n_layers:
            continue
        for name, M in SCHEDS:
            spec = get_spec(name)
            cfg = spec.config(workers=n) if spec.data_parallel else spec.config(stages=n, microbatches=M)
            r = simulate(p, cfg, hw, SimOptions(method=method, keep_timeline=False))
            pred.append({"target": label, "devices": n, "schedule": name, "speed-up": r.speedup,
                         "utilization": sum(r.utilization) / len(r.utilization),
                         "peak MiB/device": max(r.peak_memory_bytes) / 2**20,
                         "max staleness": max(r.staleness)})
pred = pd.DataFrame(pred)
pred.pivot_table(index=["target", "devices"], columns="schedule", values="speed-up").round(2)
"""), ("code", """
fig, ax = plt.subplots(figsize=(9, 3.5))
piv = pred[pred.devices == 4].pivot_table(index="target", columns="schedule", values="speed-up")
piv.plot.bar(ax=ax, rot=15)
ax.set_ylabel("predicted speed-up, 4 devices"); ax.axhline(1, color="grey", lw=0.5)
ax.legend(title="schedule", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars
fig.tight_layout(); fig.savefig(WORK / "predicted_speedup.png"); display(Image(str(WORK / "predicted_speedup.png")))
"""), ("md", "## 4. The winner per target, its staleness and memory, and its timeline"), ("code", """
best = pred.loc[pred.groupby(["target", "devices"])["speed-up"].idxmax()]
display(best.round(3))
stale_free = pred[pred["max staleness"] == 0]
display(stale_free.loc[stale_free.groupby(["target", "devices"])["speed-up"].idxmax()].round(3))
"""), ("code", """
label, p, hw = targets[-1]
r = simulate(p, ScheduleConfig("1f1b", stages=2, microbatches=4, batches=6), hw)
print(r.summary())
r.plot(WORK / "gantt.png"); display(Image(str(WORK / "gantt.png")))
"""), ("md", """
**Reading it.** Speed-ups are predictions, not measurements: the CPU rows use
this machine's measured per-layer times; the GPU rows use the roofline (peak
FLOP/s and memory bandwidth from datasheets, no kernel efficiency), an upper
bound in spirit. `03_validate` checks the CPU predictions against real runs.
""")]

NB02 = [("md", """
# 02 — Pipelined training with stale weights (Zhang & Abdelrahman, arXiv 1912.12675)

The paper pipelines backpropagation with a register after each PPV layer and
updates with stale weights (PPL-SGD). **Counting**: its "4-stage pipeline" (one
register: forward and backward pipeline stages of 2 partitions) is our `S = 2`;
6-stage is `S = 3`, 8-stage `S = 4`. We reproduce (1) the staleness the schedule
induces, (2) accuracy vs placement depth (emulator, exact staleness), (3) the
hybrid scheme, (4) the memory of stale pipelining vs PipeDream's weight stashing.

Short mode: LeNet-5, 40 iterations, one seed, synthetic data unless
`STALESIM_DATA` is set; full mode: 2 epochs of MNIST, 3 seeds (about an hour on
2 CPU cores), plus short relative CIFAR-10 runs.
"""), ("code", "PARAMS"), ("md", "## 1. Staleness the register pipeline induces (derived from the IR)"), ("code", """
from stalesim.schedule import ScheduleConfig, build_schedule
rows = []
for S in (2, 3, 4, 5):
    sched = build_schedule(ScheduleConfig("stale", stages=S, batches=4 * S + 4))
    rows.append({"S (partitions)": S, "paper's pipeline stages": 2 * S,
                 "staleness per stage": sched.versions.staleness(),
                 "v_B != v_F on stages": sched.versions.inconsistent_stages()})
pd.DataFrame(rows)
"""), ("md", """
## 2. Accuracy vs placement depth: LeNet-5 on MNIST
`stalesim study` = a grid of emulations (schedule x placement x mitigation x seed).
CLI equivalent (full mode):
`stalesim study --model lenet5 --epochs 2 --batch-size 128 --lr 0.01 --schedules sequential,stale --placements "2;1,2;1,2,3,4" --seeds 0,1,2 --out runs/lenet5_depth`
"""), ("code", """
from dataclasses import replace
from stalesim.runtime.config import TrainConfig
from stalesim.emulator.study import expand, run_study, aggregate
dataset = "mnist" if DATA_DIR else "synthetic"
base = TrainConfig(model="lenet5", dataset=dataset, schedule="sequential", stages=1,
                   batch_size=64 if SHORT else 128, lr=0.01, momentum=0.9, data_dir=DATA_DIR,
                   **({"iterations": 40} if SHORT else {"epochs": 2}))
seeds = [0] if SHORT else [0, 1, 2]
placements = [[2], [1, 2, 3, 4]] if SHORT else [[2], [1, 2], [1, 2, 3, 4]]
points = expand(base, ["sequential", "stale"], placements, ["none"], seeds)
t0 = time.time()
results = run_study(points, WORK / "depth", jobs=1 if SHORT else 2, progress=False)
depth = pd.DataFrame(aggregate(results))
print(f"{len(points)} runs in {time.time() - t0:.0f} s on {dataset}")
depth[["schedule", "ppv", "stages", "staleness", "seeds", "test_acc_mean", "test_acc_std", "final_loss_mean"]]
"""), ("md", "## 3. The hybrid scheme: stale for the first half, then drain and continue non-pipelined"), ("code", """
from stalesim.emulator.replay import emulate
n = base.iterations or None
hy_cfg = replace(base, schedule="hybrid", stages=None, ppv=[1, 2, 3, 4],
                 **({"switch": base.iterations // 2} if SHORT else {"switch_epoch": 1}))
hy = emulate(hy_cfg, out=WORK / "hybrid", progress=False)
print("hybrid", hy["staleness_ir"], "test accuracy", hy["final_test_accuracy"], "final loss", round(hy["final_loss"], 4))
fig, ax = plt.subplots(figsize=(6, 3))
for r in results:
    if r["seed"] == 0:
        ax.plot(pd.Series(r["losses"]).rolling(5, min_periods=1).mean(), label=f"{r['schedule']} ppv={r['ppv']}")
ax.plot(pd.Series(hy["losses"]).rolling(5, min_periods=1).mean(), "k--", label="hybrid ppv=[1,2,3,4]")
ax.set(xlabel="iteration", ylabel="training loss (5-step mean)"); ax.legend(fontsize=7)
fig.tight_layout(); fig.savefig(WORK / "loss.png"); display(Image(str(WORK / "loss.png")))
"""), ("md", """
## 4. Stored full-length results (3 seeds) beside the paper
`make figures` collects every stored LeNet-5 study (`docs/results/`, then `runs/`)
into `figures/lenet5_accuracy_vs_depth.csv`; the paper reports a 0.4-point drop
for PPV (2).
"""), ("code", """
stored = ROOT / "figures" / "lenet5_accuracy_vs_depth.csv"
if stored.exists():
    display(pd.read_csv(stored)[["schedule", "ppv", "mitigation", "depth", "seeds", "test_acc_mean_pct",
                                 "test_acc_std_pct", "drop_vs_sequential_pts", "length", "source"]])
else:
    print("no stored study yet: run the full mode or `stalesim study` (see docs/RESULTS.md)")
"""), ("md", """
## 5. The CIFAR-10 networks (short relative runs only)
Full-length CIFAR training (the paper's 4-stage drops: AlexNet 4, VGG-16 0.83,
ResNet-20 1.45 points) is not affordable on 2 CPU cores. Short mode only shows
the mechanics on synthetic tensors; full mode runs a few hundred iterations of
the JPEG-derived CIFAR-10 copy, sequential vs stale at the paper's PPVs, as a
*relative* comparison.
"""), ("code", """
cifar = []
for model, ppv in (("resnet20", [7]), ("alexnet", [3])):
    if SHORT and model == "alexnet":
        continue
    for sched, kw in (("sequential", {"stages": 1}), ("stale", {"ppv": ppv})):
        cfg = TrainConfig(model=model, dataset="cifar10" if (DATA_DIR and not SHORT) else "synthetic",
                          schedule=sched, batch_size=16 if SHORT else 128, lr=0.05 if model == "resnet20" else 0.01,
                          momentum=0.9, weight_decay=5e-4, data_dir=DATA_DIR, synthetic_size=256,
                          iterations=6 if SHORT else 400, **kw)
        s = emulate(cfg, progress=False)
        cifar.append({"model": model, "schedule": sched, "ppv": s["ppv"], "staleness": s["staleness_ir"],
                      "iterations": s["iterations"], "final loss": s["final_loss"],
                      "test accuracy": s["final_test_accuracy"], "data": s["data_note"]})
pd.DataFrame(cifar)
"""), ("md", """
## 6. Memory: stale pipelining vs weight stashing (simulator memory model)
The paper's Table 9 (4-stage, batch 128): memory increase over non-pipelined of
LeNet-5 97 vs 109 % (this work vs PipeDream), AlexNet 37 vs 214 %, VGG-16 75 vs
124 %, ResNet-20 60 vs 61 %. Ours comes from the IR-derived memory model on
exact per-block bytes (the same function `make figures` runs).
"""), ("code", """
from stalesim.figures.common import SHAPE_PROFILES
from stalesim.figures.sim_figs import Ctx, memory_stale_vs_stash
memory_stale_vs_stash(WORK, Ctx(profiles=SHAPE_PROFILES))
mem = pd.read_csv(WORK / "memory_stale_vs_stash.csv")
mem[["model", "ppv", "weights_mib", "activations_mib_sequential", "stale_increase_pct_w_act",
     "pipedream_increase_pct_w_act", "stale_increase_pct_all", "pipedream_increase_pct_all",
     "paper_stale_pct", "paper_pipedream_pct"]].round(1)
"""), ("md", """
**Reading it.** In our model the register pipeline keeps 2(S-1-s)+1 batches of
activations in flight on stage s (3 on stage 0 at S = 2) and one weight
version; PipeDream keeps S-s of both. Which costs more depends on activation vs
weight bytes of the early stage; see `docs/RESULTS.md` for the comparison with
Table 9 and why the percentages differ.
""")]

NB03 = [("md", """
# 03 — Validate: predicted vs measured on 2 CPU ranks

`stalesim validate` profiles the model on the ranks' device, calibrates the link,
simulates each schedule, runs it for real on the executor (2 gloo ranks here),
emulates it, and reports predicted vs measured iteration time, utilization,
speed-up and memory, and emulated vs executed loss.

Short mode: LeNet-5, 8 iterations, a catalog link instead of calibration, no
contention/overhead measurement (fast, less accurate). Full mode: every
measurement, 40 iterations, all schedules. CLI:
`stalesim validate --model lenet5 --devices cpu:2 --schedules all --out runs/validate`.
On a shared machine the measurement is only as good as the machine is quiet:
the report records the load average.
"""), ("code", "PARAMS"), ("code", """
from stalesim.validate.config import ValidateConfig
from stalesim.validate.workflow import validate
hw_json = None
if SHORT:  # skip calibration: catalog CPU core + gloo loopback figures
    hw_json = WORK / "hw.json"
    hw_json.write_text(json.dumps({"schema_version": 1, "device": "cpu-core", "link": "gloo-loopback",
                                   "comm_overlaps_compute": False, "cpu_comm_occupancy": 1.0,
                                   "allreduce": {"algorithm": "ring"}}))
cfg = ValidateConfig(model="lenet5", devices="cpu:2",
                     schedules=["1f1b,stale"] if SHORT else ["all"],
                     iterations=8 if SHORT else 40, batch_size=32 if SHORT else 64,
                     emulate_iterations=2 if SHORT else 10, repeats=1 if SHORT else 3,
                     profile_repeats=1 if SHORT else 5,
                     hardware=str(hw_json) if hw_json else None, contention=not SHORT, overhead=not SHORT,
                     dataset="synthetic", out=str(WORK / "validate"))
t0 = time.time()
summary = validate(cfg, progress=None)
print(f"validate took {time.time() - t0:.0f} s; load average {summary['load_average']}")
"""), ("code", """
cols = ["schedule", "predicted_iteration_time_s", "measured_iteration_time_s", "time_error",
        "replay_time_error", "predicted_utilization_mean", "measured_utilization_mean",
        "predicted_speedup", "measured_speedup", "max_loss_rel_diff", "versions_match_ir"]
pd.DataFrame(summary["rows"])[[c for c in cols if c in summary["rows"][0]]]
"""), ("code", """
for f in ("iteration_time.png", "loss.png"):
    p = WORK / "validate" / "figures" / f
    if p.exists():
        display(Image(str(p)))
print("report:", WORK / "validate" / "report.md")
"""), ("md", """
**Reading it.** `loss diff` 0 means the executor reproduced the emulator's
per-step losses exactly (the emulator is exact). `replay error` re-runs the
simulator with the measured per-action durations: small replay error with a
large time error means the *costs* were off (load, contention), not the
schedule model.
""")]

NB04 = [("md", """
# 04 — Pipe-SGD (Li et al., NeurIPS 2018)

Pipe-SGD overlaps the all-reduce of step t with the compute of step t+1
(pipeline width 2): w(t+1) = w(t) - lr * g(w(t-1)), staleness 1. Timing model:
synchronous T = T_comp + T_up + T_comm, Pipe-SGD T = max(T_comp + T_up, T_comm),
ring all-reduce 2(P-1)a + 2(P-1)/P n b. The paper reports up to 5.4x over
conventional approaches on 4 nodes (with compression). Here: (1) the timing model
from the simulator across latency, bandwidth and cluster size; (2) measured `dp`
vs `pipe-sgd` on 2 CPU ranks against the prediction; (3) accuracy with 1-step
staleness and fp16/int8 compression from the emulator.
"""), ("code", "PARAMS"), ("md", "## 1. Timing model (ResNet-56, 128 per worker, V100 roofline, ring all-reduce)"), ("code", """
from stalesim.figures.common import SHAPE_PROFILES
from stalesim.figures.sim_figs import Ctx, pipe_sgd_timing
pipe_sgd_timing(WORK, Ctx(profiles=SHAPE_PROFILES))
t = pd.read_csv(WORK / "pipe_sgd_timing.csv")
display(t[(t.sweep == "cluster") & (t.compression == "none")][
    ["link", "workers", "sync_iteration_ms", "pipe_iteration_ms", "pipe_over_sync", "sync_scaling", "pipe_scaling"]].round(2))
display(Image(str(WORK / "pipe_sgd_timing.png")))
"""), ("code", """
four = t[(t.sweep == "cluster") & (t.workers == 4)]
four[["link", "compression", "sync_iteration_ms", "pipe_iteration_ms", "pipe_over_sync",
      "over_sync_uncompressed"]].round(2)
"""), ("md", "## 2. Measured: `dp` vs `pipe-sgd` on 2 CPU ranks (validate machinery)"), ("code", """
from stalesim.validate.config import ValidateConfig
from stalesim.validate.workflow import validate
hw_json = None
if SHORT:
    hw_json = WORK / "hw.json"
    hw_json.write_text(json.dumps({"schema_version": 1, "device": "cpu-core", "link": "gloo-loopback",
                                   "comm_overlaps_compute": False, "cpu_comm_occupancy": 1.0,
                                   "allreduce": {"algorithm": "ring"}}))
cfg = ValidateConfig(model="lenet5" if SHORT else "resnet20", devices="cpu:2", schedules=["dp,pipe-sgd"],
                     iterations=8 if SHORT else 40, batch_size=32 if SHORT else 64,
                     emulate_iterations=2 if SHORT else 10, repeats=1 if SHORT else 3,
                     profile_repeats=1 if SHORT else 5,
                     hardware=str(hw_json) if hw_json else None, contention=not SHORT, overhead=not SHORT,
                     dataset="synthetic", out=str(WORK / "validate"))
summary = validate(cfg, progress=None)
pd.DataFrame(summary["rows"])[["schedule", "predicted_iteration_time_s", "measured_iteration_time_s",
                               "time_error", "predicted_speedup", "measured_speedup", "max_loss_rel_diff"]]
"""), ("md", "## 3. Accuracy: 1-step staleness and compression (emulator, 2 workers)"), ("code", """
from stalesim.runtime.config import TrainConfig
from stalesim.emulator.replay import emulate
dataset = "mnist" if DATA_DIR else "synthetic"
acc = []
for sched, comp in (("dp", "none"), ("pipe-sgd", "none"), ("pipe-sgd", "fp16"), ("pipe-sgd", "int8")):
    cfg = TrainConfig(model="lenet5", dataset=dataset, schedule=sched, stages=1, workers=2, compression=comp,
                      batch_size=64 if SHORT else 128, lr=0.01, momentum=0.9, data_dir=DATA_DIR,
                      **({"iterations": 30} if SHORT else {"epochs": 2}))
    s = emulate(cfg, progress=False)
    acc.append({"schedule": sched, "compression": comp, "staleness": s["staleness_ir"],
                "final loss": s["final_loss"], "test accuracy": s["final_test_accuracy"], "data": s["data_note"]})
pd.DataFrame(acc)
"""), ("md", """
**Reading it.** The width-2 pipeline hides communication up to T_comp + T_up;
past that point Pipe-SGD is communication-bound like synchronous SGD, which is
where compression pays. The paper's 5.4x compares against the conventional
approaches it ran on its own cluster, which we do not model; see `docs/RESULTS.md`.
""")]

NB05 = [("md", """
# 05 — Local updates with auxiliary heads (Laskin et al., arXiv 2012.03837)

`local`: each stage trains on its own auxiliary head (pool + linear); no
gradient crosses a stage, so stages run in parallel on consecutive batches
without weight staleness (upstream features drift instead). We compare
`local` with backprop (`sequential`) for accuracy against (a) compute
(FLOPs processed) and (b) idealized time (the simulator's iteration time for
`local` on S devices vs `sequential` on one, ideal link).
"""), ("code", "PARAMS"), ("code", """
from stalesim.runtime.config import TrainConfig
from stalesim.emulator.replay import emulate
from stalesim.schedule import ScheduleConfig, get_spec
from stalesim.sim import SimOptions, simulate
from stalesim.figures.common import shape_profile
dataset = "mnist" if DATA_DIR else "synthetic"
B = 64 if SHORT else 128
runs = {}
for name, S in (("sequential", 1), ("local", 2), ("local", 3)):
    cfg = TrainConfig(model="lenet5", dataset=dataset, schedule=name, stages=S, batch_size=B, lr=0.01,
                      momentum=0.9, data_dir=DATA_DIR, **({"iterations": 40} if SHORT else {"epochs": 2}))
    runs[(name, S)] = emulate(cfg, progress=False)
pd.DataFrame([{"schedule": k[0], "S": k[1], "ppv": s["ppv"], "final loss": s["final_loss"],
               "test accuracy": s["final_test_accuracy"], "data": s["data_note"]} for k, s in runs.items()])
"""), ("md", "## Idealized time and compute per iteration (simulator, shape profile)"), ("code", """
prof = shape_profile("lenet5").at_batch_size(B)  # the stored shape profile (FLOPs, bytes)
from stalesim.workloads.hardware import roofline_profile
rp = roofline_profile(prof, "cpu-core")   # idealized: roofline times, ideal link
rows = []
for (name, S), s in runs.items():
    r = simulate(rp, ScheduleConfig(name, stages=S), options=SimOptions(method="fast", keep_timeline=False))
    flops = sum(lp.flops + (lp.backward_flops or 2 * lp.flops) for lp in prof.layers)
    rows.append({"schedule": name, "S": S, "iteration ms (ideal)": 1e3 * r.iteration_time_s,
                 "speed-up": r.speedup, "GFLOP / iteration": flops / 1e9})
cost = pd.DataFrame(rows); cost
"""), ("code", """
fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
for ((name, S), s), row in zip(runs.items(), rows):
    loss = pd.Series(s["losses"]).rolling(5, min_periods=1).mean()
    steps = pd.RangeIndex(1, len(loss) + 1)
    axes[0].plot(steps * row["GFLOP / iteration"], loss, label=f"{name} S={S}")
    axes[1].plot(steps * row["iteration ms (ideal)"] / 1e3, loss, label=f"{name} S={S}")
axes[0].set(xlabel="compute (GFLOP, aux heads not counted)", ylabel="training loss (5-step mean)")
axes[1].set(xlabel="idealized wall time (s, roofline cpu-core, ideal link)")
axes[0].legend(fontsize=7)
fig.tight_layout(); fig.savefig(WORK / "local.png"); display(Image(str(WORK / "local.png")))
"""), ("md", """
**Reading it.** For `local` the logged loss is the last stage's auxiliary-head
loss (the network's own output head). Local updates spend the same compute per
sample but finish iterations up to S times faster in idealized time; the paper
finds local parallelism "particularly effective in the high-compute regime".
Short runs here only show the mechanics; full mode trains 2 MNIST epochs
(`docs/RESULTS.md` has the 3-seed, 1-epoch result: 0.9 / 1.5 points below
backprop at S = 2 / 3, at 1.7x / 2.3x idealized speed-up).
""")]


NB06 = [("md", """
# 06 — Your own model, data and schedule

Everything stalesim does with its zoo it does with a model you write: define a factory
that returns an `nn.Sequential` (each child is a block, the pipeline's split points) and
one that returns `(train, test)` torch Datasets of `(x, y)`, and hand them to
`stalesim.profile`, `simulate`, `emulate` and `run` (docs/api.md; on the command line:
`--model pkg.module:factory --dataset pkg.module:factory`). A factory defined here, in the
notebook, works in this process (profile, simulate, emulate); the executor's ranks are other
processes, so for `run` the same code goes into a module file (step 5).

Short mode trains a small CNN on synthetic 1x12x12 images for a few dozen iterations.
"""), ("code", "PARAMS"), ("md", "## 1. The model and the data set, defined here"), ("code", """
import stalesim
from torch import nn
from torch.utils.data import TensorDataset

def make_net():
    # each child is a block: a pipeline cut falls between children, nowhere else
    return nn.Sequential(
        nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)),
        nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)),
        nn.Sequential(nn.Flatten(), nn.Linear(16 * 3 * 3, 64), nn.ReLU()),
        nn.Linear(64, 4),
    )

def make_data():
    # a learnable synthetic task: the class is the argmax of a fixed random projection
    g = torch.Generator().manual_seed(0)
    n = 1024 if SHORT else 8192
    x = torch.randn(n + 512, 1, 12, 12, generator=g)
    y = (x.flatten(1) @ torch.randn(144, 4, generator=g)).argmax(1)
    return TensorDataset(x[:n], y[:n]), TensorDataset(x[n:], y[n:])

BATCH, ITERS = 32, (40 if SHORT else 600)
"""), ("md", "## 2. Profile it (the input shape comes from the data set)"), ("code", """
prof = stalesim.profile(make_net, [BATCH], dataset=make_data, repeats=2 if SHORT else 5, warmup=1)
pd.DataFrame([{"block": lp.name, "weight layers": lp.weight_layers, "forward ms": 1e3 * lp.forward_s,
               "backward ms": 1e3 * lp.backward_s, "params KiB": lp.param_bytes / 1024}
              for lp in prof.layers])
"""), ("md", "## 3. Predict schedules on 2 and 4 devices"), ("code", """
rows = []
for name, S, M in [("sequential", 1, 1), ("gpipe", 2, 4), ("1f1b", 2, 4), ("stale", 2, 1), ("1f1b", 4, 4),
                   ("stale", 4, 1)]:
    r = stalesim.simulate(prof, name, stages=S, microbatches=M)
    rows.append({"schedule": name, "S": S, "M": M, "iteration ms": 1e3 * r.iteration_time_s,
                 "speed-up": r.speedup, "bubble": r.bubble_fraction, "staleness": r.staleness})
pd.DataFrame(rows)
"""), ("md", "## 4. Train it with a schedule's staleness (emulator)"), ("code", """
runs = {}
for name, S in [("sequential", 1), ("stale", 2), ("stale", 4)]:
    s = stalesim.emulate(model=make_net, dataset=make_data, schedule=name, stages=S, iterations=ITERS,
                         batch_size=BATCH, lr=0.05)
    runs[f"{name} S={S}"] = s
    print(f"{name:10s} S={S}: staleness {s['staleness']}, final loss {s['final_loss']:.3f}, "
          f"test accuracy {s['final_test_accuracy']:.3f}")
fig, ax = plt.subplots(figsize=(6, 3.2))
for label, s in runs.items():
    ax.plot(pd.Series(s["losses"]).rolling(5, min_periods=1).mean(), label=label)
ax.set_xlabel("iteration"); ax.set_ylabel("training loss (5-iteration mean)")
ax.set_title("own model: sequential vs stale pipelines")
ax.legend(loc="upper right", frameon=False)
fig.tight_layout(); fig.savefig(WORK / "own_loss.png"); display(Image(str(WORK / "own_loss.png")))
"""), ("md", """
## 5. Run it on 2 CPU ranks (the executor)

The ranks are other processes: they import the model by name. The same two functions go
into a module file (its folder on `sys.path`), and the run's losses equal the emulator's.
"""), ("code", """
import inspect
module_dir = WORK / "own_code"
module_dir.mkdir(exist_ok=True)
(module_dir / "nbmodels.py").write_text(
    "import torch\\nfrom torch import nn\\nfrom torch.utils.data import TensorDataset\\n"
    "SHORT = " + repr(SHORT) + "\\n\\n" + inspect.getsource(make_net) + "\\n" + inspect.getsource(make_data))
sys.path.insert(0, str(module_dir))
kw = dict(model="nbmodels:make_net", dataset="nbmodels:make_data", schedule="stale", stages=2,
          iterations=ITERS, batch_size=BATCH, lr=0.05)
measured = stalesim.run(devices="cpu:2", **kw)
emulated = stalesim.emulate(**kw)
print(f"executor: {1e3 * measured['iteration_time_s']:.2f} ms per iteration, "
      f"losses equal to the emulator's: {measured['losses'] == emulated['losses']}")
"""), ("md", """
## 6. A schedule of your own

Export a schedule as our action-list JSON (or write torch's CSV), edit the order, and hand
the file to `simulate`, `emulate` or `run` (`--schedule-file` on the command line). The IR
checks it on load: every action once, dependencies, no deadlock, the version table.
"""), ("code", """
from stalesim.schedule import ScheduleConfig, build_schedule
mine = WORK / "my_1f1b.json"
mine.write_text(json.dumps(build_schedule(ScheduleConfig("1f1b", stages=2, batches=8, microbatches=4)).to_dict()))
sched = stalesim.load_schedule(mine)
r = stalesim.simulate(prof, mine)
print(f"{sched.name}: {sched.stages} stages, {sched.microbatches} micro-batches, "
      f"predicted {1e3 * r.iteration_time_s:.2f} ms per iteration")
s = stalesim.emulate(model=make_net, dataset=make_data, schedule_file=str(mine), stages=2, microbatches=4,
                     iterations=8, batch_size=BATCH, lr=0.05)
print(f"emulated {s['steps_done']} iterations of {s['schedule']}: final loss {s['final_loss']:.3f}")
""")]


def books() -> dict[str, nbformat.NotebookNode]:
    """Every notebook by file name, built from the cell sources above (no outputs)."""
    parts = {"01_predict_speedup": ("nb01", NB01), "02_stale_weights": ("nb02", NB02),
             "03_validate": ("nb03", NB03), "04_pipe_sgd": ("nb04", NB04),
             "05_local_updates": ("nb05", NB05), "06_own_model": ("nb06", NB06)}
    return {f"{name}.ipynb": nb(tag, cells) for name, (tag, cells) in parts.items()}


def main() -> None:
    # without outputs: `make notebooks` (run_notebooks.py) writes them executed, as committed
    for name, book in books().items():
        nbformat.write(book, HERE / name)
        print("wrote", HERE / name)


if __name__ == "__main__":
    main()
