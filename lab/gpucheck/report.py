"""What a step records, and the campaign's ``summary.json`` / ``summary.md``.

Each step writes ``steps/<name>.json`` (atomically) when it ends; the summary is rebuilt from
every step record in the folder, so parts run one after another, or on different machines and
copied into one folder, add up to one summary (``--summarize`` rebuilds it alone).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from stalesim.atomic import write_json_atomic, write_text_atomic

STATUSES = ("pass", "fail", "error", "skip")


@dataclass
class Context:
    """What a step needs to know: ``dry`` (tiny CPU variant), the results folder, the dataset
    root (``$STALESIM_DATA``), the number of visible GPUs, and the device the step runs on."""

    out: Path
    dry: bool = False
    data_dir: str | None = None
    gpus: int = 0

    @property
    def device(self) -> str:
        return "cpu" if self.dry else "cuda:0"


@dataclass
class Check:
    """One verdict: ``value`` against ``limit`` (``ok``); an unenforced check is reported but
    does not fail the step (a GPU tolerance judged on a busy shared CPU, in the dry mode)."""

    name: str
    ok: bool
    value: Any = None
    limit: Any = None
    enforced: bool = True


@dataclass
class Outcome:
    """What a step function returns: its numbers, its checks, or a skip with the reason."""

    numbers: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    skipped: str | None = None

    def check(self, name: str, ok: bool, value: Any = None, limit: Any = None, enforced: bool = True) -> bool:
        self.checks.append(Check(name, bool(ok), _clean(value), _clean(limit), enforced))
        return bool(ok)


def status_of(outcome: Outcome) -> str:
    if outcome.skipped is not None:
        return "skip"
    return "fail" if any(c.enforced and not c.ok for c in outcome.checks) else "pass"


def _clean(v: Any) -> Any:
    """JSON-safe: NaN/inf -> None (summary.json is strict JSON), tuples -> lists."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def step_record(name: str, part: int, budget_s: int, status: str, wall_s: float, *, outcome: Outcome | None = None,
                error: str | None = None, dry: bool = False) -> dict[str, Any]:
    rec: dict[str, Any] = {"step": name, "part": part, "budget_s": budget_s, "status": status,
                           "wall_s": round(wall_s, 3), "over_budget": wall_s > budget_s, "dry": dry}
    if outcome is not None:
        rec["numbers"] = _clean(outcome.numbers)
        rec["checks"] = [asdict(c) for c in outcome.checks]
        if outcome.skipped is not None:
            rec["skipped"] = outcome.skipped
    if error is not None:
        rec["error"] = error
    return rec


def step_path(out: Path, name: str) -> Path:
    return out / "steps" / f"{name}.json"


def write_step(out: Path, rec: dict[str, Any]) -> Path:
    return write_json_atomic(step_path(out, rec["step"]), rec)


def read_steps(out: Path) -> list[dict[str, Any]]:
    recs = []
    for p in sorted((out / "steps").glob("*.json")):
        try:
            recs.append(json.loads(p.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            recs.append({"step": p.stem, "status": "error", "error": f"unreadable step record {p.name}"})
    return recs


def read_environment(out: Path) -> dict[str, Any] | None:
    """The environment the last part in ``out`` recorded (``environment.json``), if any."""
    try:
        return json.loads((out / "environment.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_summary(out: Path, env: dict[str, Any], plan: dict[str, Any], order: list[str]) -> dict[str, Any]:
    """summary.json + summary.md from the step records in ``out`` (campaign order first)."""
    recs = {r["step"]: r for r in read_steps(out)}
    steps = [recs[n] for n in order if n in recs] + [r for n, r in recs.items() if n not in order]
    counts = {s: sum(r.get("status") == s for r in steps) for s in STATUSES}
    summary = {"schema_version": 1, "environment": _clean(env), "plan": plan, "counts": counts,
               "ok": counts["fail"] == 0 and counts["error"] == 0, "steps": steps}
    write_json_atomic(out / "summary.json", summary)
    write_text_atomic(out / "summary.md", render_md(summary))
    return summary


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_fmt(x)}" for k, x in v.items())
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def render_md(summary: dict[str, Any]) -> str:
    env = summary["environment"]
    lines = ["# gpu-check summary", ""]
    mode = "dry (CPU, tiny variants)" if env.get("dry") else "GPU"
    lines += [f"- mode: {mode}",
              f"- GPU: {env.get('gpu_names') or 'none'} ({env.get('gpu_count', 0)} visible), "
              f"driver {env.get('driver') or 'n/a'}",
              f"- torch {env.get('torch')}, CUDA {env.get('cuda') or 'n/a'}, cuDNN {env.get('cudnn') or 'n/a'}, "
              f"Python {env.get('python')}",
              f"- precision: {_fmt(env.get('precision') or {})}",
              f"- missing packages: {', '.join(env.get('missing_packages') or []) or 'none'}",
              f"- counts: {_fmt(summary['counts'])}; ok: {summary['ok']}", ""]
    lines += ["| step | part | status | wall s | budget s | numbers |", "| --- | --- | --- | --- | --- | --- |"]
    for r in summary["steps"]:
        nums = _fmt(r.get("numbers", {})) if r.get("numbers") else r.get("skipped") or r.get("error") or ""
        lines.append(f"| {r['step']} | {r.get('part', '')} | {r['status']} | {r.get('wall_s', '')} | "
                     f"{r.get('budget_s', '')} | {nums.replace('|', '/')[:400]} |")
    lines += ["", "## Checks", ""]
    for r in summary["steps"]:
        for c in r.get("checks", []):
            mark = "ok" if c["ok"] else ("FAIL" if c["enforced"] else "miss (not enforced)")
            lines.append(f"- {r['step']}: {c['name']}: {mark} (value {_fmt(c['value'])}, limit {_fmt(c['limit'])})")
        if r.get("error"):
            lines.append(f"- {r['step']}: error: {r['error'].splitlines()[-1] if r['error'] else ''}")
    return "\n".join(lines) + "\n"
