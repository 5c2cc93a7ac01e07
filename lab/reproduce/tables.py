"""Every table of ``docs/RESULTS.md``, rendered from stored artifacts.

A table in RESULTS.md sits between two markers::

    <!-- table:NAME -->
    | ... |
    <!-- /table:NAME -->

and :data:`RENDERERS` maps NAME to a function that rebuilds it from the files under
``docs/results/`` and ``figures/`` (study configs, per-seed JSONL, figure CSVs). ``check``
(what ``tests/unit/test_results_tables.py`` runs) says which tables differ from their artifacts;
``write`` regenerates them in place. So a number in a table is the artifact's number, rounded
one way (``f"{x:.2f}"``), and cannot drift from it.

    python -m lab.reproduce tables --check   # exit 1 and a diff when a table is stale
    python -m lab.reproduce tables --write
"""

from __future__ import annotations

import csv
import difflib
import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from lab.reproduce import delay2026, lm_staleness
from lab.reproduce.markdown import table
from lab.reproduce.published_tables import published_comparisons, published_runs, published_runs_summary
from lab.reproduce.stats import paired_difference
from lab.reproduce.store import seed_records
from stalesim.errors import StalesimError
from stalesim.summary import get as summary_get

RES = Path("docs/results")
FIG = Path("figures")
LENET_5EP = RES / "lenet5_mnist_depth_5ep"
LENET_2EP = RES / "lenet5_mnist_stale_2ep"
MARK = re.compile(r"<!-- table:([\w-]+) -->\n(.*?)<!-- /table:\1 -->", re.S)


# --------------------------------------------------------------------------- reading
def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def study_rows(study: Path) -> list[dict[str, Any]]:
    """The study's table.csv with its JSON cells parsed."""
    rows = []
    for r in _csv(study / "table.csv"):
        rows.append({k: (json.loads(v) if k in ("ppv", "staleness") else v) for k, v in r.items()})
    return rows


def _f(x: str | float | None) -> float | None:
    return None if x in (None, "") else float(x)


def runs(study: Path, schedule: str, ppv: list[int], mitigation: str = "none") -> list[dict[str, Any]]:
    """The per-seed records of one grid point, sorted by seed."""
    rs = [r for r in seed_records(study) if r["schedule"] == schedule and list(r["ppv"]) == list(ppv)
          and r.get("mitigation", "none") == mitigation]
    return sorted(rs, key=lambda r: r["seed"])


def is_baseline(r: dict[str, Any] | str) -> bool:
    """A schedule whose result does not depend on the placement (sequential, dp): the reference."""
    from stalesim.schedule import get_spec

    return get_spec(r if isinstance(r, str) else r["schedule"]).placement_free


def switches(r: dict[str, Any] | str) -> bool:
    from stalesim.schedule import get_spec

    return get_spec(r if isinstance(r, str) else r["schedule"]).switches


def acc(r: dict[str, Any]) -> float | None:
    a = r.get("final_test_accuracy")
    return None if r.get("diverged") or a is None else a


# --------------------------------------------------------------------------- formatting
def _both(pairs: Iterable[tuple[float | None, float | None]]) -> list[tuple[float, float]]:
    """The pairs (one per seed) where both sides have a value (neither run diverged)."""
    return [(a, b) for a, b in pairs if a is not None and b is not None]


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}"


def mean_std(row: dict[str, Any]) -> str:
    m, s = _f(row["test_acc_mean"]), _f(row["test_acc_std"])
    out = f"{pct(m)} ± {pct(s)}"
    n, d = int(row["seeds"]), int(row["diverged"])
    return out + (f" ({n - d} seeds)" if d else "")


def per_seed(rs: list[dict[str, Any]]) -> str:
    if not rs:
        return "not stored"
    cells = []
    for r in rs:
        if r.get("diverged"):
            cells.append(f"diverged at step {r['diverged_at']}" if r.get("diverged_at") is not None else "diverged")
        else:
            cells.append(pct(r["final_test_accuracy"]))
    return " / ".join(cells)


def ppv_txt(ppv: list[int]) -> str:
    return "-" if not ppv else "(" + ", ".join(map(str, ppv)) + ")"


def _study(study: Path) -> tuple[list[dict[str, Any]], Path]:
    """Rows of a stored study folder and the folder (for its per-seed records)."""
    return study_rows(study), study


# --------------------------------------------------------------------------- LeNet-5 depth
def lenet5_depth(root: Path, study: Path) -> str:
    """schedule x placement: mean ± std, per seed, final train loss, diverged."""
    rows, src = _study(root / study)
    out = []
    for r in rows:
        rs = runs(src, r["schedule"], r["ppv"])
        loss = f"{float(r['final_loss_mean']):.3f} ± {float(r['final_loss_std']):.3f}"
        out.append([r["schedule"], ppv_txt(r["ppv"]), r["stages"], str(r["staleness"]), r["seeds"], mean_std(r),
                    per_seed(rs), loss, r["diverged"]])
    return table(["schedule", "PPV", "S", "staleness per stage", "seeds", "test accuracy (%)",
                  "per seed (seed 0 / 1 / ...)", "final train loss", "diverged"],
                 ["---", "---", "---:", "---", "---:", "---:", "---", "---:", "---:"], out)


def paired_vs_sequential(root: Path, study: Path, baseline: str = "sequential") -> str:
    """Stale minus sequential per placement, paired by seed, 95 % Student-t interval."""
    src = root / study
    seq = {r["seed"]: acc(r) for r in runs(src, baseline, [])}
    out = []
    for r in study_rows(src):
        if r["schedule"] == baseline:
            continue
        rs = runs(src, r["schedule"], r["ppv"])
        pairs = _both((acc(x), seq.get(x["seed"])) for x in rs)
        if len(pairs) < 2:
            out.append([r["schedule"], ppv_txt(r["ppv"]), str(len(pairs)), "n/a", "n/a", "n/a", "n/a"])
            continue
        p = paired_difference([100 * a for a, _ in pairs], [100 * b for _, b in pairs])
        verdict = "yes" if p.significant else "no"
        out.append([r["schedule"], ppv_txt(r["ppv"]), str(p.n), f"{p.mean:+.2f} ± {p.std:.2f}",
                    f"[{p.ci_low:+.2f}, {p.ci_high:+.2f}]", " / ".join(f"{d:+.2f}" for d in p.diffs), verdict])
    return table(["schedule", "PPV", "seed pairs (both trained)", "difference vs sequential (pts, mean ± std)",
                  "95 % CI (t)", "per seed", "CI excludes 0"],
                 ["---", "---", "---:", "---:", "---", "---", "---"], out)


# --------------------------------------------------------------------------- mitigations
def lenet5_mitigations(root: Path) -> str:
    base_rows, base_src = _study(root / LENET_2EP)
    seq = next(r for r in base_rows if is_baseline(r))
    stale = next(r for r in base_rows if r["ppv"] == [1, 2, 3, 4])
    sm, tm = float(seq["test_acc_mean"]), float(stale["test_acc_mean"])

    def rec(m: float) -> str:
        return f"{100 * (m - tm) / (sm - tm):.0f} %"

    out = [["sequential (baseline, 2 epochs)", mean_std(seq),
            per_seed(runs(base_src, "sequential", [])), ""],
           ["stale, no mitigation", mean_std(stale),
            per_seed(runs(base_src, "stale", [1, 2, 3, 4])), "0 %"]]
    mit = root / RES / "lenet5_mnist_mitigations"
    hyb = root / RES / "lenet5_mnist_hybrid"
    h = study_rows(hyb)[0]
    out.append(["hybrid (stale epoch 1, then sequential)", mean_std(h), per_seed(runs(hyb, "hybrid", [1, 2, 3, 4])),
                rec(float(h["test_acc_mean"]))])
    for r in study_rows(mit):
        rs = runs(mit, "stale", [1, 2, 3, 4], r["mitigation"])
        trained = [a for x in rs if (a := acc(x)) is not None and a > 0.15]
        note = rec(float(r["test_acc_mean"]))
        if len(trained) < len(rs) and trained:
            note += f"; {rec(sum(trained) / len(trained))} on the {len(trained)} seeds that trained"
        out.append([f"stale + {r['mitigation']}", mean_std(r), per_seed(rs), note])
    return table(["PPV (1,2,3,4), S = 5, 2 epochs", "test accuracy (%)", "per seed 0 / 1 / 2", "recovered"],
                 ["---", "---:", "---", "---:"], out)


# --------------------------------------------------------------------------- local updates
LOCAL_SPEEDUP = RES / "lenet5_mnist_local" / "idealized_speedup.csv"


def write_local_speedups(root: Path) -> Path:
    """Idealized speed-up of local S=2/3 over sequential (roofline, ideal link), stored as CSV."""
    from stalesim.figures.common import shape_profile, write_csv
    from stalesim.schedule import ScheduleConfig
    from stalesim.sim import SimOptions, simulate
    from stalesim.workloads.hardware import roofline_profile

    prof = shape_profile("lenet5").at_batch_size(128)
    rows = []
    for dev in ("cpu-core", "v100-sxm2"):
        rp = roofline_profile(prof, dev)
        for S, ppv in ((2, (1,)), (3, (1, 2))):
            r = simulate(rp, ScheduleConfig("local", stages=S),
                         options=SimOptions(ppv=ppv, method="fast", keep_timeline=False))
            rows.append({"device": dev, "stages": S, "ppv": list(ppv), "speedup": r.speedup,
                         "iteration_ms": 1e3 * r.iteration_time_s, "sequential_ms": 1e3 * r.sequential_time_s})
    return write_csv(root / LOCAL_SPEEDUP, rows)


def lenet5_local(root: Path) -> str:
    src = root / RES / "lenet5_mnist_local"
    sp = _csv(root / LOCAL_SPEEDUP)
    rows = study_rows(src)
    seq = next(r for r in rows if is_baseline(r))
    out = []
    for r in rows:
        S = int(r["stages"])
        if is_baseline(r):
            drop, speed = "", "1 / 1"
        else:
            drop = f"{100 * (float(seq['test_acc_mean']) - float(r['test_acc_mean'])):.2f} pts"
            got = {q["device"]: float(q["speedup"]) for q in sp if int(q["stages"]) == S}
            speed = f"{got['cpu-core']:.2f}× / {got['v100-sxm2']:.2f}×"
        out.append([r["schedule"], f"{S}, {ppv_txt(r['ppv'])}" if r["ppv"] else "1", mean_std(r),
                    per_seed(runs(src, r["schedule"], r["ppv"])), drop, speed])
    return table(["schedule", "S, PPV", "test accuracy after 1 epoch (%)", "per seed 0 / 1 / 2", "drop vs backprop",
                  "idealized speed-up (cpu-core / V100 roofline)"],
                 ["---", "---", "---:", "---", "---:", "---"], out)


# --------------------------------------------------------------------------- ResNet-20 short
def resnet20_short(root: Path) -> str:
    src = root / RES / "resnet20_cifar10_short"
    out = []
    for r in study_rows(src):
        rs = runs(src, r["schedule"], r["ppv"])
        tl = [x["train_loss_last50_mean"] for x in rs]
        from statistics import fmean, stdev

        name = r["schedule"] + (f", PPV {ppv_txt(r['ppv'])}, staleness {r['staleness']}" if r["ppv"] else "")
        out.append([name, mean_std(r), per_seed(rs), f"{fmean(tl):.3f} ± {stdev(tl):.3f}"])
    seq, st = runs(src, "sequential", []), runs(src, "stale", [7])
    p = paired_difference([100 * acc(x) for x in seq], [100 * acc(x) for x in st])  # type: ignore[operator]
    out.append(["paired difference (sequential − stale)", f"**{p.mean:.2f} ± {p.std:.2f} pts**, 95 % CI "
                f"[{p.ci_low:.2f}, {p.ci_high:.2f}]", " / ".join(f"{d:.2f}" for d in p.diffs), ""])
    return table(["ResNet-20, 300 iterations", "test accuracy (%)", "per seed 0 / 1 / 2",
                  "training loss, last 50 steps"], ["---", "---:", "---", "---:"], out)


# --------------------------------------------------------------------------- simulator tables
def resnet_2gpu(root: Path) -> str:
    rows = _csv(root / FIG / "predicted_speedup_resnet_2gpu.csv")
    devs = list(dict.fromkeys((r["device"], r["link"]) for r in rows))
    out = []
    for m in dict.fromkeys(r["model"] for r in rows):
        rs = {r["device"]: r for r in rows if r["model"] == m}
        first = next(iter(rs.values()))
        cells = [f"{m}, ({first['ppv']})",
                 f"{float(first['paper_speedup_pipelined']):.2f} / {float(first['paper_speedup_hybrid']):.2f}"]
        cells += [f"{float(rs[d]['pred_speedup_stale']):.2f} / {float(rs[d]['pred_speedup_hybrid']):.2f}"
                  for d, _ in devs]
        out.append(cells)
    return table(["model, PPV", "paper pipelined / hybrid"] + [f"{d} + {link}" for d, link in devs],
                 ["---"] * (2 + len(devs)), out)


def memory_table9(root: Path) -> str:
    out = []
    def inc(r: dict[str, str], k: str) -> str:
        return f"{float(r[k + '_increase_pct_w_act']):.0f} % (all: {float(r[k + '_increase_pct_all']):.0f})"

    for r in _csv(root / FIG / "memory_stale_vs_stash.csv"):
        out.append([f"{r['model']}, ({r['ppv'].replace(' ', ', ')})", f"{float(r['weights_mib']):.2f}",
                    f"{float(r['activations_mib_sequential']):.1f}", inc(r, "stale"), inc(r, "pipedream"),
                    inc(r, "pipedream4"), f"{r['paper_stale_pct']} / {r['paper_pipedream_pct']} %"])
    return table(["model, PPV", "weights MiB", "activations MiB (seq.)", "stale", "PipeDream, same 2 partitions",
                  "PipeDream, 4 devices", "paper: this work / PipeDream"],
                 ["---", "---:", "---:", "---:", "---:", "---:", "---"], out)


def megatron_table1(root: Path) -> str:
    """Megatron-LM's Table 1: published vs. predicted teraFLOP/s per GPU (lab.reproduce.megatron)."""
    from lab.reproduce.megatron import RES as MEGATRON
    from lab.reproduce.megatron import error_stats

    rows = _csv(root / MEGATRON / "predicted.csv")
    out = [[r["workload"].removeprefix("megatron-"), f"{r['tp']} / {r['pp']} / {r['dp']}", r["gpus"], r["batch"],
            r["microbatches"], f"{float(r['bubble_pct']):.1f} %", f"{float(r['memory_gb']):.1f}",
            f"{float(r['published_tflops_per_gpu']):.0f}", f"{float(r['predicted_tflops_per_gpu']):.1f}",
            f"{float(r['error_pct']):+.1f} %"] for r in rows]
    med, mx = error_stats(rows)
    out.append(["**all rows**", "", "", "", "", "", "", "", "", f"median {med:.1f} %, max {mx:.1f} %"])
    return table(["model", "tp / pp / dp", "GPUs", "batch", "M", "bubble", "memory GB/GPU",
                  "published TFLOP/s/GPU", "predicted", "error"],
                 ["---", "---", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:"], out)


def korthikanti_table2(root: Path) -> str:
    """Korthikanti et al. 2022, Table 2's per-layer activation memory vs the analytic derivation."""
    from lab.reproduce.megatron import KORTHIKANTI

    rows = _csv(root / KORTHIKANTI / "activations.csv")
    out = [[r["workload"], r["technique"], r["tp"], f"{float(r['closed_form_mb']):,.1f}",
            f"{float(r['derived_mb']):,.1f}", f"{float(r['error_pct']):+.2f} %"] for r in rows]
    return table(["model", "technique", "t", "paper's formula MiB/layer", "derived MiB/layer", "error"],
                 ["---", "---", "---:", "---:", "---:", "---:"], out)


PIPE_ROWS = (  # (label, sweep, link) at P = 4, uncompressed
    ("10GbE", "cluster", "10gbe"), ("25GbE", "cluster", "25gbe"), ("100GbE", "cluster", "100gbe"),
    ("5 Gb/s, 20 us", "bandwidth", "5 Gb/s, 20 us"), ("1 Gb/s, 20 us", "bandwidth", "1 Gb/s, 20 us"),
    ("10GbE bandwidth, 10 ms latency", "latency", "alpha=10000us, 10GbE bandwidth"))


def pipe_sgd_timing(root: Path) -> str:
    rows = _csv(root / FIG / "pipe_sgd_timing.csv")
    out = []
    for label, sweep, link in PIPE_ROWS:
        for comp in ("none", "fp16", "int8"):
            r = next((q for q in rows if q["sweep"] == sweep and q["link"] == link and q["workers"] == "4"
                      and q["compression"] == comp), None)
            if r is None:
                continue
            out.append([label, comp, f"{float(r['sync_iteration_ms']):.2f}", f"{float(r['pipe_iteration_ms']):.2f}",
                        f"{float(r['pipe_over_sync']):.2f}×", f"{float(r['over_sync_uncompressed']):.2f}×"])
    return table(["P = 4, ResNet-56 / V100", "compression", "sync dp ms", "pipe-sgd ms", "pipe-sgd / sync",
                  "pipe-sgd / uncompressed sync"], ["---", "---", "---:", "---:", "---:", "---:"], out)


def pipe_sgd_validate(root: Path) -> str:
    s = json.loads((root / RES / "pipe_sgd_validate_2cpu" / "summary.json").read_text())
    out = []
    for r in s["rows"]:
        out.append([r["schedule"], f"{1e3 * r['predicted_iteration_time_s']:.2f}",
                    f"{1e3 * r['measured_iteration_time_s']:.2f}", f"{100 * r['time_error']:+.1f} %",
                    f"{r['predicted_speedup']:.2f} / {r['measured_speedup']:.2f}"])
    return table(["schedule", "predicted ms", "measured ms", "error", "speed-up over one rank, pred / meas"],
                 ["---", "---:", "---:", "---:", "---"], out)


# --------------------------------------------------------------------------- Pipe-SGD accuracy
PIPE_ACC = (("dp", "none"), ("pipe-sgd", "none"), ("pipe-sgd", "fp16"), ("pipe-sgd", "int8"))


def pipe_sgd_accuracy(root: Path) -> str:
    if not all((root / RES / f"lenet5_mnist_pipesgd_{c}" / "table.csv").exists() for _, c in PIPE_ACC):
        return "_Not stored yet: the three studies below write `docs/results/lenet5_mnist_pipesgd_*/`._\n"
    out = []
    dp = runs(root / RES / "lenet5_mnist_pipesgd_none", "dp", [])
    for sched, comp in PIPE_ACC:
        src = root / RES / f"lenet5_mnist_pipesgd_{comp}"
        row = next(r for r in study_rows(src) if r["schedule"] == sched)
        rs = runs(src, sched, row["ppv"])
        diff = ""
        if not is_baseline(sched):
            p = paired_difference([100 * acc(x) for x in rs], [100 * acc(x) for x in dp])  # type: ignore[operator]
            diff = f"{p.mean:+.2f} [{p.ci_low:+.2f}, {p.ci_high:+.2f}]"
        out.append([sched, comp, mean_std(row), per_seed(rs), diff])
    return table(["schedule (P = 4)", "all-reduce compression", "test accuracy (%)", "per seed 0 / 1 / 2",
                  "paired vs dp (pts, 95 % CI)"], ["---", "---", "---:", "---", "---:"], out)


# --------------------------------------------------------------------------- GPU reproduction
GPU_RES = RES / "gpu_cifar10"
NOT_RUN = "_Not run yet: `make reproduce-gpu` writes `docs/results/gpu_cifar10/` and regenerates this table._\n"


def gpu_cifar10(root: Path) -> str:
    """One-GPU emulation: per model and placement, sequential / stale / hybrid, drop vs sequential."""
    from stalesim.figures import paper

    base = root / GPU_RES
    if not base.is_dir() or not any(base.glob("*_cifar10_stale/table.csv")):
        return NOT_RUN
    out = []
    for st in sorted(base.glob("*_cifar10_stale")):
        model = st.name.split("_")[0]
        hy = base / f"{model}_cifar10_hybrid"
        seq = runs(st, "sequential", [])
        seq_acc = {r["seed"]: acc(r) for r in seq}
        seq_row = next(r for r in study_rows(st) if is_baseline(r))
        out.append([model, "-", "sequential", mean_std(seq_row), per_seed(seq), "", ""])
        ref = paper.STALE_DROPS_4STAGE.get(model)
        for src in (st, hy) if (hy / "table.csv").exists() else (st,):
            for r in study_rows(src):
                if is_baseline(r):
                    continue
                rs = runs(src, r["schedule"], r["ppv"])
                pairs = _both((seq_acc.get(x["seed"]), acc(x)) for x in rs)
                drop = "n/a"
                if len(pairs) >= 2:
                    p = paired_difference([100 * a for a, _ in pairs], [100 * b for _, b in pairs])
                    drop = f"{p.mean:.2f} [{p.ci_low:.2f}, {p.ci_high:.2f}]"
                elif len(pairs) == 1:
                    drop = f"{100 * (pairs[0][0] - pairs[0][1]):.2f} (1 seed)"
                pub = ""
                if ref and r["ppv"] == ref[1]:
                    pub = "" if switches(r) else f"{ref[2]} (4-stage)"
                elif model in paper.STALE_DEEP_DROPS and not switches(r):
                    pub = f"up to {paper.STALE_DEEP_DROPS[model]} (deep)"
                out.append([model, ppv_txt(r["ppv"]), r["schedule"], mean_std(r), per_seed(rs), drop, pub])
    return table(["model", "PPV", "schedule", "test accuracy (%)", "per seed", "drop vs sequential (pts, 95 % CI)",
                  "paper drop (pts)"], ["---", "---", "---", "---:", "---", "---:", "---"], out)


def gpu_2gpu(root: Path) -> str:
    """The 2-GPU ResNet table, measured with the executor: accuracy and speed-up over one GPU."""
    from stalesim.figures import paper

    f = root / GPU_RES / "two_gpu_runs.jsonl"
    if not f.exists():
        return NOT_RUN
    recs = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    out = []
    for ref in paper.STALE_2GPU:
        got = {r["schedule"]: r for r in recs if r["model"] == ref["model"]}
        if not any(is_baseline(r) for r in got.values()):
            continue
        def cell(s: str, got: dict[str, Any] = got) -> str:
            t1 = next(r for r in got.values() if is_baseline(r))["iteration_time_s"]
            r = got.get(s)
            if r is None:
                return "not run"
            acc = summary_get(r, "final_test_accuracy")  # records from before the run summary schema too
            a = "diverged" if r["diverged"] or acc is None else pct(acc)
            return a if is_baseline(s) else f"{a} / {t1 / r['iteration_time_s']:.2f}×"

        out.append([f"{ref['model']}, ({ref['ppv'][0]})", cell("sequential"), cell("stale"), cell("hybrid"),
                    f"{ref['acc_nonpipelined']} / {ref['acc_pipelined']} ({ref['speedup_pipelined']}×) / "
                    f"{ref['acc_hybrid']} ({ref['speedup_hybrid']}×)"])
    return table(["model, PPV", "sequential, 1 GPU: acc. (%)", "stale, 2 GPUs: acc. / speed-up",
                  "hybrid, 2 GPUs: acc. / speed-up", "paper: non-pipelined / pipelined / hybrid"],
                 ["---", "---:", "---:", "---:", "---"], out)


# --------------------------------------------------------------------------- summary
def _rng(xs: list[float], fmt: str = "{:.2f}") -> str:
    lo, hi = min(xs), max(xs)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"


def _row(study: Path, schedule: str, ppv: list[int]) -> dict[str, Any]:
    return next(r for r in study_rows(study) if r["schedule"] == schedule and r["ppv"] == ppv)


def _paired(study: Path, ppv: list[int]) -> Any:
    seq = {r["seed"]: acc(r) for r in runs(study, "sequential", [])}
    pairs = _both((seq.get(x["seed"]), acc(x)) for x in runs(study, "stale", ppv))
    return paired_difference([100 * a for a, _ in pairs], [100 * b for _, b in pairs])


def summary(root: Path) -> str:
    """The claims table: each paper claim, its published number, ours and where it comes from."""
    seq2, st2, deep2 = _lenet_2ep(root)
    out = [
        _summary_stale_lenet(root, seq2, st2),
        _summary_stale_cifar(root),
        _summary_deep(root, seq2, deep2),
        _summary_hybrid(root, seq2, deep2),
        *_summary_2gpu(root),
        _summary_memory(root),
        _summary_pipe_sgd(root),
        _summary_he(),
        _summary_local(root),
        lm_summary_row(root),
    ]
    return table(["claim (paper)", "published", "ours", "how", "section"], ["---"] * 5, out)


def _lenet_2ep(root: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The 2-epoch LeNet-5 study's sequential, PPV (2) and PPV (1,2,3,4) rows."""
    rows2, _ = _study(root / LENET_2EP)
    seq2 = next(r for r in rows2 if is_baseline(r))
    st2 = next(r for r in rows2 if r["ppv"] == [2])
    deep2 = next(r for r in rows2 if r["ppv"] == [1, 2, 3, 4])
    return seq2, st2, deep2


def _acc_drop(base: dict[str, Any], r: dict[str, Any]) -> str:
    """``base``'s mean test accuracy minus ``r``'s, in points."""
    return f"{100 * (float(base['test_acc_mean']) - float(r['test_acc_mean'])):.2f}"


def _summary_stale_lenet(root: Path, seq2: dict[str, Any], st2: dict[str, Any]) -> list[str]:
    from stalesim.figures import paper

    s5 = root / LENET_5EP
    p2 = _paired(s5, [2])
    seq5, st5 = _row(s5, "sequential", []), _row(s5, "stale", [2])
    n5 = int(seq5["seeds"])
    sig = "significant" if p2.significant else "not significant"
    lenet = (f"**{p2.mean:.2f} pts** paired (95 % CI [{p2.ci_low:.2f}, {p2.ci_high:.2f}], {sig}; "
             f"{pct(float(seq5['test_acc_mean']))} → {pct(float(st5['test_acc_mean']))} %, {n5} seeds, 5 epochs, "
             f"step lr); 2 epochs, 3 seeds, constant lr: {_acc_drop(seq2, st2)} pts")
    return ["stale weights, LeNet-5/MNIST, 4-stage (our S=2), PPV (2): accuracy drop",
            f"{paper.STALE_DROPS_4STAGE['lenet5'][2]} pts", lenet, "emulator, `stalesim study`",
            "[LeNet-5](#lenet-5-on-mnist-stale-weight-pipelining)"]


def _summary_stale_cifar(root: Path) -> list[str]:
    from stalesim.figures import paper

    pr = _paired(root / RES / "resnet20_cifar10_short", [7])
    cifar = ("not reproduced (full CIFAR training unaffordable on 2 CPU cores; `make reproduce-gpu` runs it on a "
             f"GPU); short relative run: ResNet-20 PPV (7) after 0.77 epoch: **{pr.mean:.2f} ± {pr.std:.2f} pts** "
             "below sequential (3 seeds, paired)")
    return ["same, AlexNet (PPV 3) / VGG-16 (PPV 2) / ResNet-20 (PPV 7) on CIFAR-10",
            " / ".join(str(paper.STALE_DROPS_4STAGE[m][2]) for m in ("alexnet", "vgg16", "resnet20")) + " pts",
            cifar, "emulator", "[CIFAR-10](#cifar-10-networks-short-relative-runs-only)"]


def _summary_deep(root: Path, seq2: dict[str, Any], deep2: dict[str, Any]) -> list[str]:
    from stalesim.figures import paper

    s5 = root / LENET_5EP
    deep5 = _row(s5, "stale", [1, 2, 3, 4])
    trained5 = int(deep5["seeds"]) - int(deep5["diverged"])
    pd5 = _paired(s5, [1, 2, 3, 4]) if trained5 >= 2 else None
    deep_txt = ("LeNet-5 PPV (1,2,3,4) (S=5, staleness 8), 5 epochs, step lr: "
                + (f"**{pd5.mean:.2f} pts** paired (95 % CI [{pd5.ci_low:.2f}, {pd5.ci_high:.2f}])"
                   if pd5 else "n/a")
                + f", {pct(float(deep5['test_acc_mean']))} %, {trained5} of "
                f"{deep5['seeds']} seeds trained; 2 epochs, constant lr: {_acc_drop(seq2, deep2)} pts "
                f"({int(deep2['seeds']) - int(deep2['diverged'])} of {deep2['seeds']} seeds)")
    return ["deep placements", f"up to {paper.STALE_DEEP_DROPS['vgg16']:g} (VGG-16) / "
            f"{paper.STALE_DEEP_DROPS['resnet20']:g} pts (ResNet-20)", deep_txt, "emulator",
            "[LeNet-5](#lenet-5-on-mnist-stale-weight-pipelining)"]


def _summary_hybrid(root: Path, seq2: dict[str, Any], deep2: dict[str, Any]) -> list[str]:
    hyb = study_rows(root / RES / "lenet5_mnist_hybrid")[0]
    rec = (float(hyb["test_acc_mean"]) - float(deep2["test_acc_mean"])) / (
        float(seq2["test_acc_mean"]) - float(deep2["test_acc_mean"]))
    return ["hybrid recovers the deep-placement drop", "yes (2-GPU table)",
            f"LeNet-5 PPV (1,2,3,4), stale for epoch 1 then sequential, 2 epochs: **{mean_std(hyb)} %** "
            f"({100 * rec:.0f} % of the lost accuracy recovered)", "emulator",
            "[mitigations](#lenet-5-on-mnist-how-much-of-the-stale-drop-mitigations-recover)"]


def _summary_2gpu(root: Path) -> list[list[str]]:
    """The 2-GPU ResNet table's rows: pipelined and hybrid speed-ups (predicted), accuracy (not run)."""
    from stalesim.figures import paper

    g = _csv(root / FIG / "predicted_speedup_resnet_2gpu.csv")
    comp = [r for r in g if r["device"] != "rtx4090"]
    section = "[2-GPU](#stale-weights-paper-2-gpu-resnet-table-predicted-speed-ups)"
    return [
        ["2-GPU ResNet-56/110/224/362 speed-up, pipelined",
         " / ".join(f"{r['speedup_pipelined']}" for r in paper.STALE_2GPU) + "×",
         f"predicted {_rng([float(r['pred_speedup_stale']) for r in comp])}× (V100, A100, H100 roofline: "
         f"compute-bound) and {_rng([float(r['pred_speedup_stale']) for r in g if r['device'] == 'rtx4090'])}× "
         "(RTX 4090 roofline: memory-bound)", "simulator + roofline", section],
        ["same, hybrid", " / ".join(f"{r['speedup_hybrid']}" for r in paper.STALE_2GPU) + "×",
         f"predicted {_rng([float(r['pred_speedup_hybrid']) for r in g if r['link'].startswith('nvlink')])}× "
         f"(A100/H100 over NVLink), "
         f"{_rng([float(r['pred_speedup_hybrid']) for r in g if r['device'] == 'v100-sxm2'])}× (V100 over PCIe 3), "
         f"{_rng([float(r['pred_speedup_hybrid']) for r in g if r['device'] == 'rtx4090'])}× (RTX 4090 over PCIe 4)",
         "simulator (switch at N/2)", section],
        ["same, accuracy: non-pipelined / pipelined / hybrid",
         f"{_rng([r['acc_nonpipelined'] for r in paper.STALE_2GPU])} / "
         f"{_rng([r['acc_pipelined'] for r in paper.STALE_2GPU])} / "
         f"{_rng([r['acc_hybrid'] for r in paper.STALE_2GPU])} %",
         "not reproduced here (weeks of CPU time); `make reproduce-gpu` runs it with the executor on 2 GPUs", "",
         "[GPU](#reproducing-the-cifar-10-results-on-a-gpu-make-reproduce-gpu)"],
    ]


def _summary_memory(root: Path) -> list[str]:
    from stalesim.figures import paper

    mem = {r["model"]: r for r in _csv(root / FIG / "memory_stale_vs_stash.csv")}
    order = ("lenet5", "alexnet", "vgg16", "resnet20")
    t9 = paper.STALE_MEMORY_TABLE9
    return ["memory increase, 4-stage, this work vs PipeDream",
            ", ".join(f"{m} {t9[m]['stale_pct']} vs {t9[m]['pipedream_pct']} %" for m in order),
            "stale " + " / ".join(f"{float(mem[m]['stale_increase_pct_w_act']):.0f}" for m in order)
            + " %, PipeDream on the same 2 partitions "
            + " / ".join(f"{float(mem[m]['pipedream_increase_pct_w_act']):.0f}" for m in order)
            + " %, PipeDream on 4 devices "
            + " / ".join(f"{float(mem[m]['pipedream4_increase_pct_w_act']):.0f}" for m in order)
            + " % (weights + activations, predicted; VGG-16/ImageNet row not computed)", "simulator memory model",
            "[memory](#memory-stale-pipelining-vs-weight-stashing)"]


def _summary_pipe_sgd(root: Path) -> list[str]:
    from stalesim.figures import paper

    ps = _csv(root / FIG / "pipe_sgd_timing.csv")
    best = max((r for r in ps if r["compression"] == "none" and r["workers"] == "4"),
               key=lambda r: float(r["pipe_over_sync"]))
    gb10 = next(r for r in ps if r["sweep"] == "cluster" and r["link"] == "10gbe" and r["workers"] == "4"
                and r["compression"] == "none")
    i8 = next(r for r in ps if r["sweep"] == "bandwidth" and r["link"] == "1 Gb/s, 20 us"
              and r["compression"] == "int8")
    val = json.loads((root / RES / "pipe_sgd_validate_2cpu" / "summary.json").read_text())
    v = {r["schedule"]: r for r in val["rows"]}
    vd, vp = v["dp"], v["pipe-sgd"]
    return ["Pipe-SGD speed-up over conventional training, 4 nodes", f"up to {paper.PIPE_SGD_MAX_SPEEDUP}×",
            f"model: width-2 pipelining alone is bounded by 2× over synchronous; predicted up to "
            f"**{float(best['pipe_over_sync']):.2f}×** uncompressed (ResNet-56, V100 roofline, P=4, {best['link']}), "
            f"{float(gb10['pipe_over_sync']):.2f}× at 10GbE; with int8 at 1 Gb/s "
            f"{float(i8['over_sync_uncompressed']):.2f}× over uncompressed sync; measured on 2 CPU ranks (LeNet-5): "
            f"pipe-sgd {vd['measured_iteration_time_s'] / vp['measured_iteration_time_s']:.2f}× faster than dp, but "
            f"**both slower than one rank** ({vd['measured_speedup']:.2f}× / {vp['measured_speedup']:.2f}×)"
            + _pipe_sgd_accuracy_note(root),
            "simulator; executor; emulator", "[Pipe-SGD](#pipe-sgd-timing-model-and-2-rank-measurement)"]


def _pipe_sgd_accuracy_note(root: Path) -> str:
    """The Pipe-SGD row's accuracy clause (empty until the int8 study is stored)."""
    if not (root / RES / "lenet5_mnist_pipesgd_int8" / "table.csv").exists():
        return ""
    cells = []
    for sched, c in PIPE_ACC:
        r = next(q for q in study_rows(root / RES / f"lenet5_mnist_pipesgd_{c}") if q["schedule"] == sched)
        cells.append(f"{sched}{'' if c == 'none' else ' + ' + c} {pct(float(r['test_acc_mean']))}")
    return "; accuracy, LeNet-5/MNIST, P=4, 2 epochs, 3 seeds: " + " / ".join(cells) + " %"


def _summary_he() -> list[str]:
    from stalesim.figures import paper

    he = paper.HE_RESNET_CIFAR10
    return ["ResNet-20/56/110 on CIFAR-10 (He et al.)", " / ".join(f"{he[m]}" for m in he) + " %",
            "not reproduced (~160 epochs per network; `make reproduce-gpu` runs ResNet-20's)", "", ""]


def _summary_local(root: Path) -> list[str]:
    loc = study_rows(root / RES / "lenet5_mnist_local")
    lseq = next(r for r in loc if is_baseline(r))
    l2, l3 = (next(r for r in loc if int(r["stages"]) == k) for k in (2, 3))
    sp = {int(q["stages"]): float(q["speedup"]) for q in _csv(root / LOCAL_SPEEDUP) if q["device"] == "cpu-core"}
    return ["local updates (Laskin et al.)", "\"particularly effective in the high-compute regime\" (vision and "
            "language, large models)",
            f"LeNet-5/MNIST, 1 epoch, 3 seeds: local S=2 / S=3 lose **{_acc_drop(lseq, l2)} / {_acc_drop(lseq, l3)} "
            f"pts** vs backprop ({mean_std(lseq)} %) at equal compute, at {sp[2]:.2f}× / {sp[3]:.2f}× idealized "
            "speed-up; time-matched run not done", "emulator + simulator", "[local](#local-updates-lenet-5-on-mnist)"]


GPU_RENDERERS: dict[str, Callable[[Path], str]] = {"gpu-cifar10": gpu_cifar10, "gpu-2gpu": gpu_2gpu}

def lm_summary_row(root: Path) -> list[str]:
    """The summary's one-step-delay row, from the stored 2026 comparison (AdamW and Muon, 2bw vs
    sequential, paired by seed; :mod:`lab.reproduce.delay2026`)."""
    return delay2026.summary_row(root)


def stored_markdown(folder: str) -> Callable[[Path], str]:
    """A table kept as ``docs/results/<folder>/table.md`` by the code that built it (its own test
    rebuilds that file from the folder's CSVs, see ``tests/integration/test_results_schedules.py``)."""
    def render(root: Path) -> str:
        return (root / RES / folder / "table.md").read_text(encoding="utf-8")

    return render


DEPTH = "depth_scaling_2026-11-26"
# the 32-block model's study (S = 1..32), the same targets
DEPTH32 = "depth_scaling_32_2026-11-26"
# (stored table, target) of the depth study: the target fixed before the run, then the one added after
DEPTH_TABLES = (("depth.csv", 2.9), ("depth_target3.3.csv", 3.3))


def depth_table(root: Path, folder: str, tables: tuple[tuple[str, float], ...] = DEPTH_TABLES) -> str:
    """Iterations to the target per S, with the slowdown vs S = 1, from a depth study's stored
    ``depth.csv`` files (one study per optimizer; :mod:`stalesim.plan.depth` wrote them); a
    column per stage count the study ran, a row per target whose tables are stored."""
    from stalesim.plan.depth import read_depth_csv

    names = {("adamw", "none"): "AdamW", ("adamw", "basis-rotation"): "AdamW + basis rotation",
             ("muon", "none"): "Muon"}
    found = [(f, t) for f, t in tables if all((root / RES / folder / o / f).is_file() for o in ("adamw", "muon"))]
    if not found:
        raise StalesimError(f"{RES / folder}: no stored depth tables ({', '.join(f for f, _ in tables)})")
    per = {f: [r for opt in ("adamw", "muon") for r in read_depth_csv(root / RES / folder / opt / f)]
           for f, _ in found}
    depths = sorted({r["stages"] for rows in per.values() for r in rows})
    lines = ["| target | optimizer | " + " | ".join(f"S = {s}" for s in depths) + " |",
             "| --- | --- | " + " | ".join("---:" for _ in depths) + " |"]
    for fname, target in found:
        for key, label in names.items():
            cells = []
            for S in depths:
                r = next(x for x in per[fname] if (x["optimizer"], x["mitigation"]) == key and x["stages"] == S)
                if r["iterations_mean"] is None:
                    cells.append(f"not reached in {r['horizon']}, **> {r['slowdown_at_least']:.2f}x**")
                    continue
                mean, lo, hi = (delay2026.iterations_text(r[k])
                                for k in ("iterations_mean", "iterations_lo", "iterations_hi"))
                its = f"{mean} ({lo}-{hi})"
                cells.append(its if S == 1 else f"{its}, **{r['slowdown']:.2f}x**")
            lines.append(f"| {target:g} | {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"



def depth_scaling(root: Path) -> str:
    """The first depth study's table (8 blocks, S = 1..8)."""
    return depth_table(root, DEPTH)


def depth_scaling_32(root: Path) -> str:
    """The 32-block study's table (S = 1..32)."""
    return depth_table(root, DEPTH32)


RENDERERS: dict[str, Callable[[Path], str]] = {
    "summary": summary,
    "depth-scaling": depth_scaling,
    "depth-scaling-32": depth_scaling_32,
    "claims-2026": delay2026.table,
    "claims-2026-seeds": delay2026.seed_table,
    "schedules-resnet56-h100": stored_markdown("schedules_resnet56_h100"),
    "schedules-gptchar-h100": stored_markdown("schedules_gptchar_h100"),
    "lm-staleness": lambda root: lm_staleness.table(root / lm_staleness.DEFAULT),
    "lenet5-depth-5ep": lambda root: lenet5_depth(root, LENET_5EP),
    "lenet5-depth-5ep-paired": lambda root: paired_vs_sequential(root, LENET_5EP),
    "lenet5-depth-2ep": lambda root: lenet5_depth(root, LENET_2EP),
    "lenet5-mitigations": lenet5_mitigations,
    "lenet5-local": lenet5_local,
    "resnet20-short": resnet20_short,
    "resnet-2gpu": resnet_2gpu,
    "memory-table9": memory_table9,
    "pipe-sgd-timing": pipe_sgd_timing,
    "pipe-sgd-validate": pipe_sgd_validate,
    "pipe-sgd-accuracy": pipe_sgd_accuracy,
    "megatron-table1": lambda root: megatron_table1(root),
    "korthikanti-table2": lambda root: korthikanti_table2(root),
    "published-runs-summary": published_runs_summary,
    "published-runs": published_runs,
    "published-comparisons": published_comparisons,
}


def blocks(text: str) -> list[tuple[str, str]]:
    """(name, body) of every marked table in ``text``."""
    return [(m.group(1), m.group(2)) for m in MARK.finditer(text)]


def render_all(text: str, root: Path, only: set[str] | None = None) -> str:
    """``text`` with its marked tables regenerated (all, or those named in ``only``)."""
    rend = {**RENDERERS, **GPU_RENDERERS}

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if only is not None and name not in only:
            return m.group(0)
        if name not in rend:
            raise StalesimError(f"table:{name}: no renderer (known: {', '.join(rend)})")
        return f"<!-- table:{name} -->\n{rend[name](root)}<!-- /table:{name} -->"

    return MARK.sub(sub, text)


def check(md: Path, root: Path, only: set[str] | None = None) -> list[str]:
    """A unified diff per table of ``md`` that differs from its artifacts (empty: all equal)."""
    text = md.read_text(encoding="utf-8")
    new = render_all(text, root, only)
    diffs = []
    for (name, old), (_, fresh) in zip(blocks(text), blocks(new), strict=True):
        if old != fresh:
            diffs.append(f"table:{name}\n" + "".join(difflib.unified_diff(
                old.splitlines(True), fresh.splitlines(True), "RESULTS.md", "artifacts")))
    return diffs


def write(md: Path, root: Path, only: set[str] | None = None) -> bool:
    """Regenerate the tables of ``md`` in place; True when something changed."""
    from stalesim.atomic import write_text_atomic

    text = md.read_text(encoding="utf-8")
    new = render_all(text, root, only)
    if new != text:
        write_text_atomic(md, new)
    return new != text
