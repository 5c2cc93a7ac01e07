"""Every schedule on a catalog GPU pair, predicted: the table of docs/RESULTS.md.

``python -m lab.reproduce schedules --shape stalesim/data/shape_profiles/resnet56_b8_shape.json
--micro 16,256 --out docs/results/schedules_resnet56_h100``

For each micro-batch size m it runs two CLI commands (printed, so the table is
traceable to them): ``stalesim profile --roofline DEVICE --from SHAPE
--batch-size m`` (the roofline at the micro-batch, so each kernel launch is
counted once per block and phase) and ``stalesim sweep`` over every schedule at
S in {1, 2, 4}, P in {1, 2}, M micro-batches of m (batch M x m), event
simulation. It keeps the rows that use exactly ``--devices`` devices and writes
``mb<m>.csv`` (the sweep's CSV, all rows), ``table.md`` (each schedule's fastest
two-device configuration at the first micro-batch size, the same configuration at the
others) and ``commands.txt``.
A prediction, not a measurement: nothing here runs on a GPU.
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
from pathlib import Path

from stalesim.atomic import ensure_dir, write_text_atomic

SCHEDULES = ("gpipe,1f1b,interleaved-1f1b,looped-bfs,zb-h1,zb-h2,zb-v,dualpipev,pipedream,2bw,stale,"
             "interleaved-pipedream,interleaved-2bw,dp,pipe-sgd")


def commands(shape: str, micro: int, M: int, device: str, link: str, out: Path) -> list[list[str]]:
    prof = str(out / f"profile_mb{micro}.json")
    return [
        ["stalesim", "profile", "--roofline", device, "--from", shape, "--batch-size", str(micro),
         "-o", prof, "-q"],
        ["stalesim", "sweep", "--profile", prof, "--links", link, "--stages", "1,2,4", "-M", str(M),
         "-P", "1,2", "--batch-size", str(M * micro), "--method", "event", "--schedules", SCHEDULES,
         "--csv", str(out / f"mb{micro}.csv")],
    ]


KEY = ("schedule", "stages", "stages_per_device", "microbatches", "workers")


def rows_on(path: Path, devices: int) -> dict[tuple[str, ...], dict[str, str]]:
    """The rows on exactly ``devices`` devices, by configuration (schedule, S, V, M, P)."""
    with path.open() as f:
        return {tuple(r[k] for k in KEY): r for r in csv.DictReader(f)
                if not r["error"] and int(r["devices"]) == devices}


def best_configs(rows: dict[tuple[str, ...], dict[str, str]]) -> list[tuple[str, ...]]:
    """Each schedule's fastest configuration, fastest schedule first."""
    best: dict[str, tuple[str, ...]] = {}
    for key, r in rows.items():
        cur = best.get(key[0])
        # ties (e.g. dp's S, which only regroups layers on each worker) go to the fewest stages
        if cur is None or (float(r["iteration_time_s"]), int(key[1])) < (
                float(rows[cur]["iteration_time_s"]), int(cur[1])):
            best[key[0]] = key
    return sorted(best.values(), key=lambda k: float(rows[k]["iteration_time_s"]))


def cell(r: dict[str, str]) -> str:
    return (f"{float(r['iteration_time_s']) * 1e3:.3g} / {float(r['speedup']):.2f}x / "
            f"{float(r['bubble_fraction']):.3f} / {float(r['max_peak_memory_bytes']) / 1e6:.0f} MB")


def table(per_micro: dict[int, dict[tuple[str, ...], dict[str, str]]], M: int) -> str:
    """One row per schedule in its fastest configuration at the first micro-batch size; the
    other columns are the same configuration at the other sizes."""
    micros = list(per_micro)
    first = per_micro[micros[0]]
    head = ("| schedule | S | V | M | P | "
            + " | ".join(f"batch {M * m} (micro-batch {m})" for m in micros) + " | staleness |")
    lines = [head, "| " + " | ".join(["---"] * (6 + len(micros))) + " |"]
    for key in best_configs(first):
        r = first[key]
        cells = [cell(per_micro[m][key]) if key in per_micro[m] else "-" for m in micros]
        lines.append(f"| `{key[0]}` | {r['stages']} | {r['stages_per_device']} | {r['microbatches']} | "
                     f"{r['workers']} | " + " | ".join(cells) + f" | {r['max_staleness']} |")
    return "\n".join(lines) + "\n"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``python -m lab.reproduce schedules``."""
    p.add_argument("--shape", required=True, help="a measured profile (FLOPs and bytes) to re-time")
    p.add_argument("--micro", default="16,256", help="micro-batch sizes, comma-separated")
    p.add_argument("-M", type=int, default=8, help="micro-batches per mini-batch")
    p.add_argument("--device", default="h100-sxm")
    p.add_argument("--link", default="nvlink4")
    p.add_argument("--devices", type=int, default=2, help="keep the rows on this many devices")
    p.add_argument("--out", required=True)


def run(a: argparse.Namespace) -> int:
    """Run the profile and sweep commands per micro-batch size, then write the table and the log."""
    out = ensure_dir(a.out)
    per_micro: dict[int, dict[tuple[str, ...], dict[str, str]]] = {}
    log: list[str] = []
    for m in (int(x) for x in a.micro.split(",")):
        for cmd in commands(a.shape, m, a.M, a.device, a.link, out):
            log.append(" ".join(cmd))
            print("+", log[-1], flush=True)
            subprocess.run([sys.executable, "-m", "stalesim", *cmd[1:]], check=True,
                           stdout=subprocess.DEVNULL)
        per_micro[m] = rows_on(out / f"mb{m}.csv", a.devices)
    text = table(per_micro, a.M)
    write_text_atomic(out / "table.md", text)
    write_text_atomic(out / "commands.txt", "\n".join(log) + "\n")
    print(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.reproduce schedules", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))
