"""Published LLM training runs predicted by the analytic estimate, row by row, with their errors.

``docs/results/published_runs/runs.json`` holds every run this check compares with:
its source (paper and table, or a framework's benchmark page and launch script), the
model shape, the node, the settings the source states (and, marked as such, the ones it
does not), and what it published: teraFLOP/s per GPU, iteration seconds, tokens/s per
GPU or per-layer milliseconds, memory per GPU where measured, and whether it trained or
ran out of memory. Each row is predicted with the public API only
(:func:`stalesim.sim.parallel.predict_llm` on a :class:`~stalesim.sim.llm_plan.ParallelPlan`
and a :class:`~stalesim.workloads.transformer.TransformerSpec`, the node from the
catalog), at the default kernel efficiencies, never a factor per row or per source.

A row the tool cannot express yet (a precision it does not model, a setting it refuses)
is kept and listed as ``not expressible: why`` instead of being dropped, so the table
shows what is left to cover. ``python -m lab.reproduce.published --write``
rewrites ``predicted.csv`` (a test recomputes it and checks it is equal), and
:func:`lab.reproduce.tables.published_runs` renders the RESULTS.md tables from it.
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stalesim.atomic import csv_text
from stalesim.errors import StalesimError

if TYPE_CHECKING:
    from stalesim.sim.llm_plan import ParallelPlan
    from stalesim.workloads.hardware import Hardware
    from stalesim.workloads.transformer import TransformerSpec

__all__ = ["FIELDS", "METRICS", "RES", "RUNS", "Comparison", "PublishedRun", "Published", "comparisons",
           "error_summary", "load", "metric_of", "predict_rows", "read_predicted", "to_csv", "write_predictions"]

RES = Path("docs/results/published_runs")
RUNS = RES / "runs.json"
PREDICTED = RES / "predicted.csv"

# What a source can publish about a run, and the unit each is compared in. The per-layer pair
# is compared as their sum (forward + backward of one layer); ``model_state_gb`` is the ZeRO
# paper's analytic model-state memory per GPU (weights, gradients, optimizer state), compared
# with the plan's state bytes per parameter times the model's parameters; ``samples_per_s_per_gpu``
# is the zero-bubble paper's throughput (sequences per second over the GPUs).
METRICS = ("tflops_per_gpu", "iteration_s", "tokens_per_s_per_gpu", "samples_per_s_per_gpu", "layer_ms",
           "model_state_gb")
# speed metrics where more is faster (the others: iteration seconds, less is faster)
FASTER_IS_MORE = ("tflops_per_gpu", "tokens_per_s_per_gpu", "samples_per_s_per_gpu")
# metrics of a part of a run: no iteration, so no memory verdict
PART_METRICS = ("layer_ms", "model_state_gb")
OUTCOMES = ("trained", "oom")
FIELDS = ("id", "source", "status", "metric", "published", "predicted", "error_pct", "memory_published_gib",
          "memory_predicted_gib", "memory_error_pct", "outcome", "fits", "verdict", "detail")
GIB = 2**30


@dataclass(frozen=True)
class PublishedRun:
    """One published run: where it is from, how it was set up, what it reported."""

    id: str
    source: str
    model: str
    node: str
    plan: dict[str, Any]
    published: dict[str, Any]
    device_memory_gb: float | None = None
    note: str = ""
    not_expressible: str = ""
    # the published setup this run is one schedule of: the runs sharing it were measured on the same
    # model, GPUs and batch, so their published order is the measured ranking (:func:`comparisons`)
    comparison: str = ""

    @property
    def outcome(self) -> str:
        return str(self.published.get("outcome", ""))


@dataclass(frozen=True)
class Published:
    """The data file: its sources, the model shapes no preset has, its runs."""

    sources: dict[str, dict[str, str]]
    models: dict[str, dict[str, Any]]
    runs: tuple[PublishedRun, ...]


def metric_of(published: dict[str, Any]) -> str | None:
    """The speed metric a row published (None: only a fits / out-of-memory outcome)."""
    if "layer_forward_ms" in published or "layer_backward_ms" in published:
        return "layer_ms"
    found = [m for m in METRICS if m in published]
    return found[0] if found else None


def _run(d: dict[str, Any], sources: dict[str, Any], where: str) -> PublishedRun:
    known = {f.name for f in fields(PublishedRun)}
    for k in ("id", "source", "model", "node", "plan", "published"):
        if k not in d:
            raise StalesimError(f"{where}.{k}: missing")
    extra = set(d) - known
    if extra:
        raise StalesimError(f"{where}.{sorted(extra)[0]}: unknown field (known: {', '.join(sorted(known))})")
    if d["source"] not in sources:
        raise StalesimError(f"{where}.source: {d['source']!r} is not one of the file's sources "
                            f"({', '.join(sources)})")
    pub = d["published"]
    if metric_of(pub) is None and pub.get("outcome") not in OUTCOMES:
        raise StalesimError(f"{where}.published: names no metric ({', '.join(METRICS)}) and no outcome")
    if "outcome" in pub and pub["outcome"] not in OUTCOMES:
        raise StalesimError(f"{where}.published.outcome: expected one of {', '.join(OUTCOMES)}, "
                            f"got {pub['outcome']!r}")
    from stalesim.sim.llm_plan import ParallelPlan

    plan_fields = {f.name for f in fields(ParallelPlan)}
    bad = set(d["plan"]) - plan_fields
    if bad:
        raise StalesimError(f"{where}.plan.{sorted(bad)[0]}: not a ParallelPlan field")
    return PublishedRun(**d)


def load(root: Path) -> Published:
    """The data file, checked: every run names a known source and publishes something."""
    path = root / RUNS
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise StalesimError(f"{RUNS}: cannot read ({exc})") from exc
    sources = raw.get("sources", {})
    for name, s in sources.items():
        if not s.get("cite"):
            raise StalesimError(f"{RUNS}: sources.{name}.cite: missing")
    runs = tuple(_run(d, sources, f"runs[{i}]") for i, d in enumerate(raw.get("runs", [])))
    ids = [r.id for r in runs]
    if len(ids) != len(set(ids)):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise StalesimError(f"{RUNS}: runs.id {dup!r} appears twice")
    return Published(sources=sources, models=raw.get("models", {}), runs=runs)


def spec_for(data: Published, name: str) -> TransformerSpec:
    """The row's model: a preset by name, or a shape from the file's ``models``."""
    from stalesim.workloads.transformer import PRESETS, TransformerSpec

    if name in data.models:
        if name in PRESETS:  # one shape per name: a preset is not redefined here
            raise StalesimError(f"models.{name}: is a preset already; use the preset or another name")
        shape = {k: v for k, v in data.models[name].items() if k != "from"}
        return TransformerSpec(name, **shape)
    if name in PRESETS:
        return PRESETS[name]
    raise StalesimError(f"model: {name!r} is neither a preset nor in the file's models")


def hardware_for(run: PublishedRun) -> Hardware:
    """The catalog node, with the device's memory as the source states it where that differs."""
    from stalesim.workloads.hardware import hardware_from_node

    hw = hardware_from_node(run.node)
    if run.device_memory_gb is not None:
        hw = replace(hw, device=replace(hw.device, memory_bytes=float(run.device_memory_gb) * 1e9))
    return hw


def plan_for(run: PublishedRun) -> ParallelPlan:
    from stalesim.sim.llm_plan import ParallelPlan

    kw = dict(run.plan)
    if kw.get("stage_layers") is not None:
        kw["stage_layers"] = tuple(kw["stage_layers"])
    return ParallelPlan(**kw)


def _half_unit(value: float | int | str) -> float:
    """Half a unit of the last digit a published number states (``32``: 0.5, ``39.7``: 0.05)."""
    text = repr(value) if not isinstance(value, str) else value
    decimals = len(text.split(".")[1]) if "." in text else 0
    return 0.5 * 10.0 ** -decimals


def _err(pred: float, pub: float) -> float:
    return round(100 * (pred - pub) / pub, 2)


def _blank(run: PublishedRun, status: str) -> dict[str, Any]:
    m = metric_of(run.published)
    pub = _published_value(run.published, m)
    mem = run.published.get("memory_gib")
    return {"id": run.id, "source": run.source, "status": status, "metric": m or "", "published": pub,
            "predicted": "", "error_pct": "", "memory_published_gib": "" if mem is None else mem,
            "memory_predicted_gib": "", "memory_error_pct": "", "outcome": run.outcome, "fits": "",
            "verdict": "", "detail": ""}


def _published_value(pub: dict[str, Any], metric: str | None) -> float | str:
    if metric is None:
        return ""
    if metric == "layer_ms":
        return round(float(pub["layer_forward_ms"]) + float(pub["layer_backward_ms"]), 4)
    return float(pub[metric])


def predict_run(data: Published, run: PublishedRun) -> dict[str, Any]:
    """One CSV row: the prediction beside what was published (module doc)."""
    if run.not_expressible:
        return _blank(run, f"not expressible: {run.not_expressible}")
    from stalesim.sim.llm_costs import llm_costs
    from stalesim.sim.parallel import predict_llm

    try:
        spec, hw, plan = spec_for(data, run.model), hardware_for(run), plan_for(run)
        p = predict_llm(spec, plan, hw)
    except StalesimError as exc:
        return _blank(run, f"not expressible: {exc}")
    row = _blank(run, "predicted")
    m = row["metric"]
    detail = f"{plan.gpus} GPUs, M {plan.microbatches}, bubble {100 * p.bubble_fraction:.1f} %"
    pred: float | None = None
    if m == "tflops_per_gpu":
        pred = p.hardware_tflops_per_gpu
    elif m == "iteration_s":
        pred = p.iteration_s
    elif m == "tokens_per_s_per_gpu":
        pred = p.tokens_per_s / plan.gpus
    elif m == "samples_per_s_per_gpu":
        pred = plan.batch / p.iteration_s / plan.gpus
    elif m == "model_state_gb":
        pred = plan.state.total * spec.params() / 1e9
        detail = f"{plan.state.total:.4g} bytes per parameter x {spec.params() / 1e9:.4g} B parameters"
    elif m == "layer_ms":
        _costs, _sim, lt = llm_costs(spec, plan, hw)
        f_ms, b_ms = 1e3 * lt.layer_f, 1e3 * lt.layer_b
        pred = f_ms + b_ms
        detail = (f"forward {f_ms:.2f} ms (published {float(run.published['layer_forward_ms']):g}), "
                  f"backward {b_ms:.2f} ms (published {float(run.published['layer_backward_ms']):g})")
    if pred is not None:
        row["predicted"] = round(pred, 4)
        row["error_pct"] = _err(pred, float(row["published"]))
    if m not in PART_METRICS:
        mem = p.memory_bytes / GIB
        row["memory_predicted_gib"] = round(mem, 2)
        if run.published.get("memory_gib") is not None:
            pub_mem = float(run.published["memory_gib"])
            row["memory_error_pct"] = _err(mem, pub_mem)
            lo, hi = p.memory_low_bytes / GIB, p.memory_high_bytes / GIB
            # a published figure stands for the interval its last digit rounds (32 GB: 31.5 to 32.5)
            half = _half_unit(run.published["memory_gib"])
            holds = lo <= pub_mem + half and pub_mem - half <= hi
            detail += (f", memory range {lo:.1f} to {hi:.1f} GiB "
                       f"({'holds' if holds else 'misses'} the published {pub_mem:g})")
        row["fits"] = "yes" if p.fits else "no"
        if run.outcome:
            row["verdict"] = "right" if p.fits == (run.outcome == "trained") else "wrong"
    row["detail"] = detail
    return row


def predict_rows(root: Path) -> list[dict[str, Any]]:
    """Every row predicted; a row of a multi-schedule comparison also says, in its detail, where
    the prediction and the measurement rank it (:func:`comparisons`)."""
    data = load(root)
    rows = [predict_run(data, r) for r in data.runs]
    by_id = {r["id"]: r for r in rows}
    for c in comparisons(data, rows):
        for rank_pred, rid in enumerate(c.predicted_order, 1):
            row = by_id[rid]
            row["detail"] += (f"; {c.name}: predicted rank {rank_pred}, measured rank "
                              f"{c.measured_order.index(rid) + 1} of {len(c.measured_order)}")
    return rows


@dataclass(frozen=True)
class Comparison:
    """One published setup measured under several schedules: the measured order (fastest first)
    and the order ``plan --workload`` gives the predictions (those predicted to fit by predicted
    time, then those that do not fit; :func:`stalesim.plan.llm.rank_key`)."""

    name: str
    measured_order: tuple[str, ...]
    predicted_order: tuple[str, ...]

    @property
    def measured_first(self) -> str:
        return self.measured_order[0]

    @property
    def predicted_first(self) -> str:
        return self.predicted_order[0]

    @property
    def agrees(self) -> bool:
        """Whether the schedule ranked first is the measured-fastest (the issue's check)."""
        return self.predicted_first == self.measured_first


def comparisons(data: Published, rows: list[dict[str, Any]]) -> list[Comparison]:
    """The file's multi-schedule comparisons, each ranked by the measurement and by the prediction.

    A row's speed is its published metric: iteration seconds rank ascending, the per-GPU rates
    descending; the prediction ranks as ``plan --workload`` does (fits first, then predicted
    iteration time, which for the same batch and GPUs orders as the rate does). A row that is not
    predicted ranks last, as a candidate that cannot apply."""
    from stalesim.plan.llm import rank_key

    by_id = {r["id"]: r for r in rows}
    groups: dict[str, list[str]] = {}
    for run in data.runs:
        if run.comparison:
            groups.setdefault(run.comparison, []).append(run.id)
    out = []
    for name, ids in groups.items():
        metric = by_id[ids[0]]["metric"]
        if any(by_id[i]["metric"] != metric for i in ids):
            raise StalesimError(f"runs.comparison {name!r}: its runs publish different metrics")
        sign = -1.0 if metric in FASTER_IS_MORE else 1.0

        def pred_key(i: str, sign: float = sign) -> tuple[bool, bool, float]:
            r = by_id[i]
            if r["status"] != "predicted" or r["predicted"] in ("", None):
                return rank_key("not predicted", False, 0.0)
            return rank_key(None, r["fits"] == "yes", sign * float(r["predicted"]))

        def pub_key(i: str, sign: float = sign) -> float:
            return sign * float(by_id[i]["published"])

        out.append(Comparison(name, tuple(sorted(ids, key=pub_key)), tuple(sorted(ids, key=pred_key))))
    return out


def to_csv(rows: list[dict[str, Any]]) -> str:
    return csv_text(rows, FIELDS)


def write_predictions(root: Path) -> Path:
    from stalesim.atomic import write_text_atomic

    return write_text_atomic(root / PREDICTED, to_csv(predict_rows(root)))


def read_predicted(root: Path) -> list[dict[str, str]]:
    with open(root / PREDICTED, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@dataclass(frozen=True)
class ErrorSummary:
    """Absolute percentage errors of one group of rows (None where the group has none): ``time_*``
    of the published metric (a speed, or a part metric such as one layer's ms or the ZeRO
    paper's model-state GB), ``memory_*`` of the measured memory per GPU."""

    rows: int
    predicted: int
    time_median: float | None
    time_max: float | None
    memory_median: float | None
    memory_max: float | None
    verdicts_right: int
    verdicts: int


def _stats(xs: list[float]) -> tuple[float | None, float | None]:
    return (statistics.median(xs), max(xs)) if xs else (None, None)


def error_summary(rows: list[dict[str, Any]]) -> ErrorSummary:
    """Median and max absolute error of time and memory, and the verdicts that are right."""
    done = [r for r in rows if r["status"] == "predicted"]
    t = [abs(float(r["error_pct"])) for r in done if r["error_pct"] not in ("", None)]
    m = [abs(float(r["memory_error_pct"])) for r in done if r["memory_error_pct"] not in ("", None)]
    v = [r["verdict"] for r in done if r["verdict"]]
    return ErrorSummary(len(rows), len(done), *_stats(t), *_stats(m), v.count("right"), len(v))


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m lab.reproduce.published", description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", action="store_true", help="rewrite predicted.csv from the data file and the code")
    g.add_argument("--check", action="store_true", help="exit 1 when the stored predicted.csv differs")
    args = ap.parse_args(argv)
    try:
        if args.write:
            print(write_predictions(Path(".")))
            return 0
        same = to_csv(predict_rows(Path("."))) == (Path(".") / PREDICTED).read_text(encoding="utf-8")
        print(f"{PREDICTED}: {'equals the code' if same else 'differs from the code (run --write)'}")
        return 0 if same else 1
    except StalesimError as exc:
        print(f"stalesim: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
