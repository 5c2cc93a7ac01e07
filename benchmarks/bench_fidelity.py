"""The fidelity campaign (simulator vs executor, docs/validate.md): every goal, measured,
next to its target, with the load.

``python -m benchmarks.bench_fidelity [--quick] [--out DIR] [--repeats K] [--only main,grid,executor]``

Run it on a quiet machine (``/work/shared/tools/quiet run python -m benchmarks.bench_fidelity``);
it also waits itself until the 1-minute load average is below ``--max-load`` (or
``--wait`` seconds passed) and prints the load before and after every part.

0. **plan**: one whole-model training step per (model, batch) is timed first; each run
   gets the iterations for about ``--target-s`` seconds of measured time (12..200,
   :mod:`benchmarks.fidelity_scope`) and the estimated duration of every part is
   printed before anything runs (``--estimate``: only that).
1. **main**: ``validate`` on 2 CPU ranks, the ten original schedules plus the newer
   ones this build has (``--schedules``), LeNet-5 and ResNet-20 at batch 32 and 128
   (M = 4), K >= 5 interleaved repeats (``--repeats``): iteration time, utilization,
   speed-up, peak memory and replay error per schedule, the noise floor of each, and
   the aggregates next to the goals.
2. **grid** (held-out configurations): batch 16, 32, 64, 96, 128, M in {1, 2, 4, 8}, S = 2 on 2
   ranks and S = 3 on 3 ranks, both models, every schedule. The cost model is
   calibrated once per model and device count (profile over every batch size the grid
   uses, contention, the per-message costs); the grid's runs reuse it (``--profile``,
   ``--contended-profile``, ``--hardware``), so no calibration step touched their
   configuration (each run's own 1-rank baseline is the speed-up denominator).
   ``--grid-sample N`` runs N configurations spread over the grid (default: all).
3. **executor**: ``stale`` 2 ranks vs 1 rank at batch 128 (LeNet-5 >= 1.5x,
   ResNet-20 >= 1.85x) and ``gpipe``/``1f1b`` vs ``torch.distributed.pipelining``
   (ResNet-20, M = 4, >= 1.0x), medians of ``--rounds`` interleaved rounds.

``--quick`` (a few minutes): LeNet-5 only, batch 32, 8..16 iterations, 2 repeats, the
ten schedules and two newer ones, two grid configurations, one executor round with
short runs. It checks the campaign end
to end; its numbers are not the goals' evidence.

Everything lands in ``--out`` (one ``validate`` folder per run, ``fidelity.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

GOALS_TEXT = {
    "median_abs_time_error": ("median |iteration-time error|", 0.03, "%"),
    "max_abs_time_error": ("max |iteration-time error|", 0.08, "%"),
    "max_abs_utilization_error_points": ("max utilization gap (points)", 3.0, "pts"),
    "max_abs_speedup_error": ("max speed-up error", 0.05, "%"),
    "max_abs_memory_error": ("max peak-memory error", 0.05, "%"),
    "median_abs_replay_error": ("median |replay error|", 0.02, "%"),
    "max_abs_replay_error": ("max |replay error|", 0.05, "%"),
}
EXECUTOR_GOALS = {"stale_speedup_lenet5": 1.5, "stale_speedup_resnet20": 1.85,
                  "gpipe_vs_torch": 1.0, "1f1b_vs_torch": 1.0}


# ----------------------------------------------------------------------- quiet machine
def load1() -> float:
    return os.getloadavg()[0]


def wait_quiet(max_load: float, wait_s: float, say=print) -> dict[str, Any]:
    """Wait until the 1-minute load average is below ``max_load`` (at most ``wait_s``)."""
    t0 = time.monotonic()
    while load1() > max_load and time.monotonic() - t0 < wait_s:
        time.sleep(5)
    la = [round(x, 2) for x in os.getloadavg()]
    quiet = la[0] <= max_load
    say(f"load average {la} ({os.cpu_count()} cores){'' if quiet else '  NOT QUIET: measuring anyway'}",
        flush=True)
    return {"load_average": la, "quiet": quiet, "waited_s": round(time.monotonic() - t0, 1)}


# --------------------------------------------------------------------------- aggregates
def aggregate_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    from stalesim.validate.compare import aggregate

    return aggregate(rows)


def goal_lines(agg: dict[str, Any], title: str) -> list[str]:
    out = [f"-- {title} --"]
    for key, (text, goal, unit) in GOALS_TEXT.items():
        v = agg.get(key)
        if v is None:
            shown, ok = "n/a", "n/a"
        elif unit == "%":
            shown, ok = f"{v:.1%}", "met" if v <= goal else "MISSED"
        else:
            shown, ok = f"{v:.1f}", "met" if v <= goal else "MISSED"
        goal_s = f"{goal:.0%}" if unit == "%" else f"{goal:g}"
        out.append(f"  {text:36s} {shown:>8s}  goal <= {goal_s:>4s} {unit if unit != '%' else '':3s} {ok}")
    nf, mx = agg.get("median_noise_floor"), agg.get("max_noise_floor")
    wn, wt = agg.get("schedules_within_noise"), agg.get("schedules_with_noise_floor")
    out.append(f"  {'noise floor median / max':36s} {'n/a' if nf is None else f'{nf:.1%}':>8s} / "
               f"{'n/a' if mx is None else f'{mx:.1%}'};  errors within noise: "
               f"{'n/a' if wt is None else f'{wn} of {wt}'}")
    return out


# ------------------------------------------------------------------------------ validate
def run_validate(out: Path, *, model: str, devices: str, batch: int, micro: int, iterations: int,
                 repeats: int, schedules: str = "all", reuse: dict[str, str] | None = None,
                 profile_repeats: int = 5, say=print) -> dict[str, Any]:
    from stalesim.validate.config import ValidateConfig
    from stalesim.validate.workflow import validate

    reuse = reuse or {}
    cfg = ValidateConfig(model=model, devices=devices, schedules=[schedules], iterations=iterations,
                         batch_size=batch, microbatches=micro, out=str(out), emulate_iterations=2,
                         repeats=repeats, profile_repeats=profile_repeats,
                         hardware=reuse.get("hardware"), profile=reuse.get("profile"),
                         contended_profile=reuse.get("contended_profile"),
                         command=(f"python -m benchmarks.bench_fidelity: validate --model {model} "
                                  f"--devices {devices} --batch-size {batch} --microbatches {micro} "
                                  f"--iterations {iterations} --repeats {repeats} --schedules {schedules}"))
    t0 = time.perf_counter()
    s = validate(cfg, progress=lambda m: None)
    say(f"  {model} {devices} B={batch} M={micro}: {len(s['rows'])} schedules in "
        f"{time.perf_counter() - t0:.0f} s, load {s['load_average']['before']} -> {s['load_average']['after']}",
        flush=True)
    return s


def calibration(out: Path, model: str, devices: str, sizes: list[int], repeats: int, say=print) -> dict[str, str]:
    """Profile (alone and contended, over ``sizes``) and the link + per-message costs, once."""
    from stalesim.devices import parse_devices
    from stalesim.validate.commcal import measure_comm
    from stalesim.validate.corunners import paired_profiles
    from stalesim.validate.steps import COMM_SIZES
    from stalesim.workloads.calibrate import calibrate

    out.mkdir(parents=True, exist_ok=True)
    n = parse_devices(devices).count
    say(f"  calibrating {model} on {devices}: profile at {sizes}, contention, link, per-message costs",
        flush=True)
    prof, cont = paired_profiles(model, sizes, co_runners=n - 1, threads=1, device="cpu", repeats=repeats,
                                 co_batch=min(sizes))
    prof.to_json(out / "profile.json")
    cont.to_json(out / "profile_contended.json")
    hw = calibrate("gloo", n, sizes=[4 * 4**k for k in range(11)], repeats=3)
    hw["executor_comm"] = measure_comm(COMM_SIZES, repeats=15)
    (out / "hardware.json").write_text(json.dumps(hw))
    return {"profile": str(out / "profile.json"), "contended_profile": str(out / "profile_contended.json"),
            "hardware": str(out / "hardware.json")}


def grid_configs(models: list[str], batches: list[int], micros: list[int],
                 devices: list[str]) -> list[dict[str, Any]]:
    """The held-out grid: per (model, devices, batch) every schedule at M = 4, and the
    micro-batched schedules again at every other M; a schedule is left out where
    ``validate`` itself would refuse it (:func:`stalesim.validate.config.check_config`: the
    batch does not split, or the schedule's constraints at its S = devices x V stages)."""
    from stalesim.errors import StalesimError
    from stalesim.schedule import get_spec
    from stalesim.validate.config import ValidateConfig, check_config, runnable_schedules

    out = []
    for model in models:
        for dev in devices:
            n = int(dev.split(":")[1])
            for b in batches:
                for m in micros:
                    names = []
                    for name in runnable_schedules(n):
                        if m != 4 and not get_spec(name).uses_micro:
                            continue
                        try:
                            check_config(ValidateConfig(model=model, devices=dev, schedules=[name], batch_size=b,
                                                        microbatches=m))
                        except StalesimError:
                            continue
                        names.append(name)
                    if names:
                        out.append({"model": model, "devices": dev, "batch": b, "micro": m,
                                    "schedules": ",".join(names)})
    return out


def spread(items: list[Any], n: int | None) -> list[Any]:
    """``n`` items spread evenly over the list (all when n is None or large)."""
    if n is None or n >= len(items):
        return list(items)
    if n <= 0:
        return []
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


# ------------------------------------------------------------------------------ executor
def executor_targets(rounds: int, quick: bool, say=print) -> dict[str, Any]:
    from benchmarks.bench_executor import _executor, _pippy, measured_ppv

    it_res, it_lenet = (6, 30) if quick else (30, 150)
    models = ("lenet5",) if quick else ("resnet20", "lenet5")
    ppvs = {m: measured_ppv(m, 128) for m in ("resnet20", "lenet5")}
    times: dict[str, list[float]] = {}
    for r in range(rounds):
        for model in models:
            iters = it_res if model == "resnet20" else it_lenet
            one = _executor(model, "sequential", 1, 1, iters, 128)
            two = _executor(model, "stale", 2, 2, iters, 128, ppv=ppvs[model])
            times.setdefault(f"{model}/1rank", []).append(one["iteration_time_s"])
            times.setdefault(f"{model}/stale2", []).append(two["iteration_time_s"])
            say(f"  round {r}: {model}: 1 rank {one['iteration_time_s'] * 1e3:.1f} ms, stale 2 ranks "
                f"{two['iteration_time_s'] * 1e3:.1f} ms", flush=True)
        if not quick:
            for sched in ("gpipe", "1f1b"):
                ours = _executor("resnet20", sched, 2, 2, it_res, 128, 4, ppv=ppvs["resnet20"])
                theirs = _pippy("resnet20", sched, it_res, 128, 4, ppv=ppvs["resnet20"])
                times.setdefault(f"{sched}/ours", []).append(ours["iteration_time_s"])
                times.setdefault(f"{sched}/torch", []).append(theirs["iteration_time_s"])
                say(f"  round {r}: resnet20 {sched}: ours {ours['iteration_time_s'] * 1e3:.1f} ms, "
                    f"torch.distributed.pipelining {theirs['iteration_time_s'] * 1e3:.1f} ms", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    res: dict[str, Any] = {"times_s": times, "median_s": med, "rounds": rounds}
    for model in ("lenet5", "resnet20"):
        if f"{model}/1rank" in med:
            res[f"stale_speedup_{model}"] = med[f"{model}/1rank"] / med[f"{model}/stale2"]
    for sched in ("gpipe", "1f1b"):
        if f"{sched}/ours" in med:
            res[f"{sched}_vs_torch"] = med[f"{sched}/torch"] / med[f"{sched}/ours"]
    return res


# ---------------------------------------------------------------------------------- scope
# the ten schedules the fidelity goals were first set for, then a few of the newer ones (interleaved
# virtual stages, split backward) where this build registers them
ORIGINAL_SCHEDULES = ("sequential", "gpipe", "1f1b", "pipedream", "2bw", "stale", "hybrid", "local", "dp",
                      "pipe-sgd")
NEWER_SCHEDULES = ("interleaved-1f1b", "zb-h1", "zb-v", "dualpipev")


def main_schedules(names: str | None, quick: bool) -> list[str]:
    """The main part's schedules: ``names`` (comma list, "all": every runnable on 2 ranks)
    or the ten original ones plus the newer ones above that this build has."""
    from stalesim.schedule import schedule_names
    from stalesim.validate.config import runnable_schedules

    if names == "all":
        return list(runnable_schedules(2))
    if names:
        return names.split(",")
    have = set(schedule_names())
    new = [n for n in NEWER_SCHEDULES if n in have]
    return [*ORIGINAL_SCHEDULES, *new[:2 if quick else None]]


def plan_campaign(args: argparse.Namespace, models: list[str], parts: set[str], K: int,
                  say=print) -> dict[str, Any]:
    """Probe one training step per (model, batch) used, pick iterations, estimate each part."""
    from benchmarks.fidelity_scope import ValidatePlan, iterations_for, probe_step_s

    q = args.quick
    step: dict[tuple[str, int], float] = {}

    def st(model: str, b: int) -> float:
        if (model, b) not in step:
            step[(model, b)] = probe_step_s(model, b)
        return step[(model, b)]

    def iters(model: str, b: int) -> int:
        if args.iterations:
            return args.iterations
        return iterations_for(st(model, b), target_s=args.target_s, lo=8 if q else 12, hi=16 if q else 200)

    plan: dict[str, Any] = {"main": [], "grid": [], "estimate_s": {}}
    prof_rep = 2 if q else 5
    if "main" in parts:
        scheds = main_schedules(args.schedules, q)
        plan["schedules"] = scheds
        for model in models:
            for b in ((32,) if q else (32, 128)):
                it = iters(model, b)
                vp = ValidatePlan(f"{model}-b{b}", st(model, b), st(model, max(1, b // 4)), len(scheds), it, K,
                                  prof_rep)
                plan["main"].append({"model": model, "batch": b, "iterations": it, "step_s": vp.step_s,
                                     "estimate_s": vp.estimate_s()})
        plan["estimate_s"]["main"] = sum(x["estimate_s"] for x in plan["main"])
    if "grid" in parts:
        total = 0.0
        for c in grid_plan(args, models):
            it = iters(c["model"], c["batch"])
            n = len(c["schedules"].split(","))
            vp = ValidatePlan("grid", st(c["model"], c["batch"]), 0.0, n, it, K, prof_rep, calibrates=False)
            c["iterations"] = it
            plan["grid"].append(c)
            total += vp.estimate_s()
        keys = {(c["model"], c["devices"]) for c in plan["grid"]}
        # one calibration per (model, devices): profile over the grid's sizes, link, messages
        total += sum(2 * prof_rep * 3.0 * sum(st(m, b) for b in (16, 64, 128)) + 20 for m, _ in keys)
        plan["estimate_s"]["grid"] = total
    if "executor" in parts:
        rounds = args.rounds or (1 if q else 5)
        ex = 0.0
        for model in (("lenet5",) if q else ("resnet20", "lenet5")):
            n_it = (6 if model == "resnet20" else 30) if q else (30 if model == "resnet20" else 150)
            ex += rounds * (n_it * st(model, 128) * 1.6 + 8)
        if not q:
            ex += rounds * 2 * (2 * 30 * st("resnet20", 128) * 0.8 + 8)
        plan["estimate_s"]["executor"] = ex
    plan["estimate_s"]["total"] = sum(plan["estimate_s"].values())
    plan["probe_step_s"] = {f"{m}/b{b}": v for (m, b), v in step.items()}
    return plan


def grid_plan(args: argparse.Namespace, models: list[str]) -> list[dict[str, Any]]:
    q = args.quick
    batches, micros = ((16, 64), (2, 8)) if q else ((16, 32, 64, 96, 128), (1, 2, 4, 8))
    devices = ("cpu:2",) if q else ("cpu:2", "cpu:3")
    configs = grid_configs(models, list(batches), list(micros), list(devices))
    if q:  # two configurations, three schedules each
        configs = configs[:2]
        for c in configs:
            c["schedules"] = ",".join(c["schedules"].split(",")[:3])
    return spread(configs, args.grid_sample)


# ---------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    default = sys.argv[1:] if __name__ == "__main__" else ["--quick"]
    args = _parser().parse_args(argv if argv is not None else default)
    q = args.quick
    if args.wait is None:
        args.wait = 30.0 if q else 900.0
    K = args.repeats or (2 if q else 5)
    rounds = args.rounds or (1 if q else 5)
    models = (args.models or ("lenet5" if q else "lenet5,resnet20")).split(",")
    parts = set(args.only.split(","))
    out = Path(args.out)
    report: dict[str, Any] = {"command": "python -m benchmarks.bench_fidelity " + " ".join(argv or sys.argv[1:]),
                              "quick": q, "repeats": K, "loads": {}}
    t_all = time.perf_counter()
    print(f"fidelity campaign ({'quick' if q else 'full'}): models {models}, {K} repeats, parts {sorted(parts)}")
    report["loads"]["start"] = wait_quiet(args.max_load, 0 if args.estimate else args.wait)
    plan = plan_campaign(args, models, parts, K)
    report["plan"] = plan
    print_plan(plan, report["loads"]["start"])
    if args.estimate:
        return 0
    out.mkdir(parents=True, exist_ok=True)

    lines: list[str] = []
    if "main" in parts:
        lines += run_main_part(out, plan, K, q, report)
        report["loads"]["after_main"] = wait_quiet(args.max_load, 0)
    if "grid" in parts:
        lines += run_grid_part(out, plan, K, q, report)
        report["loads"]["after_grid"] = wait_quiet(args.max_load, 0)
    if "executor" in parts:
        lines += run_executor_part(rounds, q, report)
        report["loads"]["after_executor"] = wait_quiet(args.max_load, 0)
    report["elapsed_s"] = time.perf_counter() - t_all
    write_and_print(out, report, lines, plan["estimate_s"], q)
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_fidelity")
    p.add_argument("--quick", action="store_true", help="a few minutes: checks the campaign end to end")
    p.add_argument("--out", default="runs/bench_fidelity")
    p.add_argument("--repeats", type=int, default=None, help="interleaved repeats per schedule (default 5)")
    p.add_argument("--iterations", type=int, default=None,
                   help="iterations per run (default: a steady window of about --target-s per run, 12..200)")
    p.add_argument("--target-s", type=float, default=3.0, help="measured seconds per 2-rank run (default 3)")
    p.add_argument("--rounds", type=int, default=None, help="executor rounds (default 5)")
    p.add_argument("--only", default="main,grid,executor", help="comma list of parts")
    p.add_argument("--models", default=None, help="comma list (default lenet5,resnet20)")
    p.add_argument("--schedules", default=None,
                   help="main part: comma list or 'all' (default: the ten original ones and a few newer ones)")
    p.add_argument("--grid-sample", type=int, default=None, help="grid configurations to run (default all)")
    p.add_argument("--max-load", type=float, default=float(os.environ.get("QUIET_LOAD", 0.6)))
    p.add_argument("--wait", type=float, default=None,
                   help="seconds to wait for a quiet machine (default 900; --quick: 30)")
    p.add_argument("--estimate", action="store_true", help="print the plan and its estimated duration; run nothing")
    return p


def print_plan(plan: dict[str, Any], start: dict[str, Any]) -> None:
    """Iterations and estimated duration of every part (``start``: the load when it began)."""
    from benchmarks.fidelity_scope import fmt_minutes

    for x in plan["main"]:
        print(f"  main {x['model']} B={x['batch']}: 1-rank step {x['step_s'] * 1e3:.1f} ms -> "
              f"{x['iterations']} iterations per run, ~{fmt_minutes(x['estimate_s'])}")
    if "schedules" in plan:
        print(f"  main schedules ({len(plan['schedules'])}): {','.join(plan['schedules'])}")
    if plan["grid"]:
        print(f"  grid: {len(plan['grid'])} configurations")
    est = plan["estimate_s"]
    print("estimated duration from the step probes (load "
          f"{start['load_average'][0]}; meaningful on a quiet machine only: under load "
          "the 2-rank runs slow down more than the 1-thread probe): "
          + ", ".join(f"{k} {fmt_minutes(v)}" for k, v in est.items()), flush=True)


def run_main_part(out: Path, plan: dict[str, Any], K: int, q: bool, report: dict[str, Any]) -> list[str]:
    """Every schedule on 2 ranks per (model, batch); fills ``report["main"]``; returns goal lines."""
    from stalesim.cli.validate_cmd import summary_table

    print("\n== main: every schedule on 2 ranks ==", flush=True)
    lines: list[str] = []
    rows_all: list[dict] = []
    report["main"] = {}
    for x in plan["main"]:
        model, batch = x["model"], x["batch"]
        s = run_validate(out / "main" / f"{model}-b{batch}", model=model, devices="cpu:2", batch=batch,
                         micro=4, iterations=x["iterations"], repeats=K, profile_repeats=2 if q else 5,
                         schedules=",".join(plan["schedules"]))
        print(summary_table(s), flush=True)
        agg = aggregate_rows(s["rows"])
        report["main"][f"{model}/b{batch}"] = {"aggregates": agg, "load_average": s["load_average"],
                                              "rows": s["rows"]}
        lines += goal_lines(agg, f"main {model} batch {batch} (load {s['load_average']['before']})")
        rows_all += s["rows"]
    agg = aggregate_rows(rows_all)
    report["main_aggregates"] = agg
    lines += goal_lines(agg, "main, all models and batches")
    return lines


def run_grid_part(out: Path, plan: dict[str, Any], K: int, q: bool, report: dict[str, Any]) -> list[str]:
    """The held-out configurations, each reusing its (model, devices) calibration; fills
    ``report["grid"]`` (a failed configuration is recorded and skipped); returns goal lines."""
    print("\n== grid: held-out configurations ==", flush=True)
    configs = plan["grid"]
    cal: dict[tuple[str, str], dict[str, str]] = {}
    rows_all: list[dict] = []
    report["grid"] = []
    for c in configs:
        key = (c["model"], c["devices"])
        if key not in cal:
            cal[key] = grid_calibration(out, configs, key, q)
        name = f"{c['model']}-{c['devices'].replace(':', '')}-b{c['batch']}-m{c['micro']}"
        try:
            s = run_validate(out / "grid" / name, model=c["model"], devices=c["devices"], batch=c["batch"],
                             micro=c["micro"], iterations=c["iterations"], repeats=K, schedules=c["schedules"],
                             reuse=cal[key])
        except Exception as exc:  # noqa: BLE001 - one bad configuration does not end the campaign
            print(f"  {name}: failed: {exc}", flush=True)
            report["grid"].append({"config": c, "error": str(exc)})
            continue
        agg = aggregate_rows(s["rows"])
        report["grid"].append({"config": c, "aggregates": agg, "load_average": s["load_average"],
                               "rows": s["rows"]})
        rows_all += s["rows"]
    agg = aggregate_rows(rows_all)
    report["grid_aggregates"] = agg
    return goal_lines(agg, f"held-out grid: {len(report['grid'])} configurations, {len(rows_all)} rows")


def grid_calibration(out: Path, configs: list[dict[str, Any]], key: tuple[str, str], q: bool) -> dict[str, str]:
    """:func:`calibration` for one (model, devices) of the grid, profiled at every size its
    configurations use."""
    from stalesim.validate.steps import profile_sizes

    model, devices = key
    n = int(devices.split(":")[1])
    sizes = sorted({b for cc in configs if (cc["model"], cc["devices"]) == key
                    for b in profile_sizes(cc["batch"], cc["micro"], n)})
    return calibration(out / "grid" / f"calibration-{model}-{n}", model, devices, sizes, 2 if q else 5)


def run_executor_part(rounds: int, q: bool, report: dict[str, Any]) -> list[str]:
    """The executor's speed targets; fills ``report["executor"]``; returns goal lines."""
    print("\n== executor targets ==", flush=True)
    ex = executor_targets(rounds, q)
    report["executor"] = ex
    lines = [f"-- executor (median of {rounds} round(s)) --"]
    for k, goal in EXECUTOR_GOALS.items():
        v = ex.get(k)
        ok = "n/a" if v is None else ("met" if v >= goal else "MISSED")
        lines.append(f"  {k:36s} {'n/a' if v is None else f'{v:.2f}x':>8s}  goal >= {goal:.2f}x  {ok}")
    return lines


def write_and_print(out: Path, report: dict[str, Any], lines: list[str], est: dict[str, float], q: bool) -> None:
    """``fidelity.json`` (atomic), then the goal lines and the loads."""
    from stalesim.atomic import write_json_atomic
    from stalesim.validate.steps import clean

    write_json_atomic(out / "fidelity.json", clean(report))
    print("\n== aggregates next to the goals ==")
    print("\n".join(lines))
    la = report["loads"]
    loads = ", ".join(f"{k} {v['load_average']}" for k, v in la.items())
    print(f"loads: {loads}; {report['elapsed_s'] / 60:.1f} min (estimated {est['total'] / 60:.1f} min); "
          f"{out / 'fidelity.json'}")
    if q:
        print("(--quick: a check of the campaign, not evidence for the goals)")


if __name__ == "__main__":
    raise SystemExit(main())
