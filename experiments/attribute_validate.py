"""Per-term attribution of a finished ``validate`` output folder (one written before
``validate`` itself wrote ``attribution.csv``, or to re-examine one).

``python -m experiments.attribute_validate OUT [--csv FILE] [--md FILE]``

Rebuilds the prediction from what the folder stored (profile.json,
profile_contended.json, hardware.json with the executor's per-message calibration,
summary.json's cost model: overheads, per-kind gaps, stage times) -- no measurement is
repeated -- checks that each schedule's rebuilt prediction equals the stored one, reads
the measured rows of the median repeat back from its ``trace.json`` and writes the
attribution (:mod:`stalesim.validate.breakdown`) with the replay of those rows.
Memory facts are not rebuilt (they do not move time).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def rows_from_trace(path: Path) -> dict[str, list[list[Any]]]:
    """The executor's rows (label, kind, stage, batch, micro, worker, start, end) from its trace."""
    from stalesim.schedule import Action

    doc = json.loads(path.read_text())
    ev = doc["traceEvents"] if isinstance(doc, dict) else doc
    out: dict[str, list[list[Any]]] = {}
    for e in ev:
        if e.get("ph") != "X" or " " in e["name"]:  # the simulator's "<label> cpu" slices
            continue
        a = Action.parse(e["name"])
        s = e["ts"] / 1e6
        out.setdefault(str(e["pid"]), []).append([e["name"], e["cat"], a.stage, a.batch, a.micro, a.worker,
                                                  s, s + e["dur"] / 1e6])
    return out


def cost_model(out: Path, summary: dict[str, Any], hw_dict: dict[str, Any]) -> Any:
    from stalesim.validate.costmodel import CostModel
    from stalesim.validate.stagetime import stage_times_from_summary
    from stalesim.workloads.profile import load_profile

    c = summary["cost_model"]
    cont = out / "profile_contended.json"
    return CostModel(load_profile(out / "profile.json"), load_profile(cont) if cont.exists() else None,
                     dict(c["overhead_s"]), [], float(c.get("dispatch_s") or 0.0), dict(c.get("gaps_s") or {}),
                     hw_dict.get("executor_comm"), stage_times_from_summary(c.get("stage_times")),
                     host_cores=c.get("host_cores"))


def run_dir_of(out: Path, row: dict[str, Any], which: str) -> Path | None:
    """The repeat to attribute: the median one (as validate reports), or the fastest (the
    least disturbed by other work on a shared machine)."""
    if which == "median":
        return Path(row["run_dir"]) if row.get("run_dir") else None
    times = row.get("measured_iteration_times_s") or []
    if not times:
        return None
    k = min(range(len(times)), key=lambda i: times[i])
    return out / "runs" / (row["schedule"] if k == 0 else f"{row['schedule']}.r{k}")


@dataclass
class StoredRun:
    """What a finished ``validate`` folder needs to be predicted again: its summary, config,
    cost model, simulator hardware (with the executor's calibrated link) and rank count."""

    out: Path
    summary: dict[str, Any]
    cfg: Any  # the ValidateConfig's fields, as summary.json stored them
    cm: Any  # stalesim.validate.costmodel.CostModel
    hw: Any  # stalesim.sim.model.SimHardware
    ranks: int


def load_run(out: Path) -> StoredRun:
    """Rebuild :class:`StoredRun` from ``out`` (summary.json, hardware.json, profile.json)."""
    from stalesim.sim.model import SimHardware
    from stalesim.validate.costmodel import link_from_comm
    from stalesim.workloads.hardware import hardware_from_dict

    summary = json.loads((out / "summary.json").read_text())
    hw_dict = json.loads((out / "hardware.json").read_text())
    cm = cost_model(out, summary, hw_dict)
    dev = str(summary["devices"])
    N = int(dev.split(":")[1]) if dev.startswith("cpu:") else len(dev.split(","))
    hw = SimHardware.from_hardware(hardware_from_dict(hw_dict))
    if cm.comm:
        hw = link_from_comm(hw, cm.comm, (hw_dict.get("allreduce") or {}).get("measured"), workers=N)
    return StoredRun(out, summary, SimpleNamespace(**summary["config"]), cm, hw, N)


def predict_row(run: StoredRun, row: dict[str, Any], cm: Any = None) -> tuple[Any, dict[str, Any], Any]:
    """The prediction of one summary row as ``validate`` made it (with ``cm`` in place of the
    stored cost model if given): the SimResult, the simulation's info, and the run's TrainConfig."""
    from stalesim.executor.rank import RECV_AHEAD
    from stalesim.schedule import get_spec
    from stalesim.validate.costmodel import simulate_with_costs
    from stalesim.validate.steps import train_config

    cfg, name = run.cfg, row["schedule"]
    ppv = [] if get_spec(name).data_parallel else list(row["ppv"] or [])
    tc = train_config(cfg, name, run.ranks, ppv, cfg.iterations)
    r, info = simulate_with_costs(run.cm if cm is None else cm, run.hw, tc.schedule_config(cfg.iterations),
                                  ppv=row["ppv"] or None, batch_size=cfg.batch_size, recv_ahead=RECV_AHEAD)
    return r, info, tc


def attribute(out: Path, which: str = "median") -> tuple[list[dict[str, Any]], list[str]]:
    from stalesim.schedule import build_schedule
    from stalesim.validate.breakdown import attribution, sim_window, spans_from_rows, spans_from_sim, split
    from stalesim.validate.costmodel import replay
    from stalesim.validate.measured import measured_timing

    run = load_run(out)
    cfg, hw = run.cfg, run.hw
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for row in run.summary["rows"]:
        name = row["schedule"]
        r, info, tc = predict_row(run, row)
        p = row["predicted_iteration_time_s"]
        notes.append(f"{name}: rebuilt prediction {r.iteration_time_s * 1e3:.3f} ms, stored {p * 1e3:.3f} ms")
        run_dir = run_dir_of(out, row, which)
        if run_dir is None or not (run_dir / "trace.json").exists():
            notes.append(f"{name}: no measured trace")
            continue
        mrows = rows_from_trace(run_dir / "trace.json")
        sched = build_schedule(tc.schedule_config(cfg.iterations))
        mt = measured_timing({"rows": mrows, "iterations": cfg.iterations}, sched)
        w = tuple(mt["window_s"])
        rep = replay(info["costs"], info["schedule"], hw, mrows, w, keep_timeline=True)
        pred = split(spans_from_sim(r), *sim_window(r), r.iteration_time_s)
        meas = split(spans_from_rows(mrows), w[0], w[1], mt["iteration_time_s"])
        repl = split(spans_from_sim(rep), *sim_window(rep), rep.iteration_time_s)
        rows += attribution(name, pred, meas, repl)
    return rows, notes


def main(argv: list[str] | None = None) -> int:
    from stalesim.atomic import write_csv_atomic, write_text_atomic
    from stalesim.validate.breakdown import COLUMNS, markdown_table, per_device

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--csv", type=Path, default=None)
    ap.add_argument("--md", type=Path, default=None)
    ap.add_argument("--repeat", choices=("median", "fastest"), default="median",
                    help="which measured repeat of each schedule (default: the median, as validate)")
    args = ap.parse_args(argv)
    rows, notes = attribute(args.out, args.repeat)
    for n in notes:
        print(n, file=sys.stderr)
    table = markdown_table(per_device(rows))
    print("\n".join(table))
    write_csv_atomic(args.csv or args.out / "attribution.csv", rows, header=COLUMNS)
    if args.md:
        write_text_atomic(args.md, "\n".join(table) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
