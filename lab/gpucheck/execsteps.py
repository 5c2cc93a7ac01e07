"""Steps that run the executor: executor == emulator on one GPU (folded) and over NCCL on 2+
GPUs, and the memory model against what the ranks allocate."""

from __future__ import annotations

import math
from typing import Any

from lab.gpucheck.jobs import memory_cases, multi_gpu_cases, one_gpu_cases
from lab.gpucheck.plan import LOSS_REL_TOL, MEMORY_REL_TOL
from lab.gpucheck.report import Context, Outcome

# in the dry mode these run on a CPU rank; the others are built and checked only
DRY_ONE_GPU = ("1f1b", "zb-v")
# seconds a rank may wait on a peer (the executor's default): a hung NCCL call or a deadlock then
# costs a minute, and the fallback to one case at a time still fits the step's budget
PEER_TIMEOUT_S = 60.0


def run_jobs(cases: list[Any], devices: str, *, dry: bool,
             timeout_s: float = PEER_TIMEOUT_S) -> list[dict[str, Any]]:
    """Run every case on ``devices`` in one process group (one torch import and rendezvous);
    if that fails, each case alone, so one broken schedule is named and the others still report.
    A case that fails alone gets ``{"error": message}``."""
    from stalesim.errors import StalesimError
    from stalesim.executor import make_job, run_local

    def job(c: Any) -> dict[str, Any]:
        # deterministic kernels on the CPU (bitwise equal); on a GPU they need CUBLAS_WORKSPACE_CONFIG
        # and change which kernels run: the campaign measures the defaults, within LOSS_REL_TOL
        return make_job(c, keep_rows=True, deterministic=dry, evaluate=False, label=c.schedule)

    try:
        return list(run_local([job(c) for c in cases], devices, timeout_s=timeout_s))
    except StalesimError as exc:
        print(f"gpu-check: {len(cases)} case(s) on {devices} failed together ({exc}); one at a time", flush=True)
        if len(cases) == 1:
            return [{"error": str(exc)}]
    out = []
    for c in cases:
        try:
            out.append(run_local(job(c), devices, timeout_s=timeout_s))
        except StalesimError as exc:
            out.append({"error": str(exc)})
    return out


def emulate(cfg: Any, dry: bool) -> dict[str, Any]:
    """The emulator's summary of ``cfg`` on ``cfg.device`` (the reference for the executor)."""
    import torch

    from stalesim.emulator.replay import Emulator

    if not dry:
        return Emulator(cfg, progress=False).run()
    threads, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)  # as the CPU equivalence tests (and the executor's ranks): one thread,
    torch.use_deterministic_algorithms(True)  # deterministic kernels
    try:
        return Emulator(cfg, progress=False).run()
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(det)


def rel_diff(got: list[Any], want: list[Any]) -> float:
    """Largest relative difference per step; inf when lengths differ or a loss is not finite."""
    if len(got) != len(want) or not want:
        return math.inf
    worst = 0.0
    for a, b in zip(got, want):
        if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
            return math.inf
        worst = max(worst, abs(a - b) / max(abs(b), 1e-12))
    return worst


def _label(c: Any) -> str:
    return (f"{c.schedule}:{c.model}:S{c.num_stages}" + (f":P{c.workers}" if c.workers > 1 else "")
            + (f":{c.optimizer}" if c.optimizer != "sgd" else "")
            + "".join(f":{tag}" for tag, on in (("ef", c.error_feedback), ("wp", c.weight_prediction),
                                                 ("rot", c.basis_rotation)) if on))


def compare(o: Outcome, cases: list[Any], results: list[dict[str, Any]], where: str, dry: bool) -> None:
    """Per case: versions match the IR, staleness equals the IR's and the emulator's, losses equal
    the emulator's within LOSS_REL_TOL."""
    rows = {}
    for c, res in zip(cases, results):
        label = f"{where}: {_label(c)}"
        if "error" in res:
            o.check(label, False, res["error"][:300])
            rows[_label(c)] = {"error": res["error"][:300]}
            continue
        emu = emulate(c, dry)
        rel = rel_diff(res.get("losses", []), emu["losses"])
        same_ir = bool(res.get("versions_match_ir")) and res.get("staleness_measured") \
            == res.get("staleness_ir") == emu["staleness_ir"]
        rows[_label(c)] = {"max_rel_loss_diff": rel, "versions_match_ir": same_ir,
                           "iteration_time_s": res.get("iteration_time_s"), "device_kind": res.get("device_kind")}
        o.check(label, same_ir and rel <= LOSS_REL_TOL, rel, LOSS_REL_TOL)
        print(f"{label}: max relative loss difference {rel:.3g}, versions match: {same_ir}", flush=True)
    o.numbers.setdefault("cases", {}).update(rows)


def one_gpu_step(ctx: Context) -> Outcome:
    """Every foldable schedule with all stages on one device, against the emulator on that device."""
    cases = one_gpu_cases(ctx.device)
    from stalesim.schedule import get_spec, schedule_names

    o = Outcome(numbers={"built": len(cases), "devices": "cpu:1" if ctx.dry else "cuda:0",
                         "not_foldable": [n for n in schedule_names() if get_spec(n).data_parallel]})
    if ctx.dry:
        cases = [c for c in cases if c.schedule in DRY_ONE_GPU and c.model == "lenet5"]
    o.numbers["ran"] = len(cases)
    results = run_jobs(cases, o.numbers["devices"], dry=ctx.dry)
    compare(o, cases, results, "1 device folded", ctx.dry)
    return o


def multi_gpu_step(ctx: Context) -> Outcome:
    """Every schedule at S = #GPUs (NCCL), at S = 3 with 3+ GPUs, the virtual-stage ones on 2; the
    dry mode builds and checks every config of a 3-GPU machine and runs none (the CPU suite's
    equivalence tests run them on gloo)."""
    by_count = multi_gpu_cases(3 if ctx.dry else ctx.gpus)
    o = Outcome(numbers={"rank_counts": sorted(by_count), "built": {str(n): len(c) for n, c in by_count.items()}})
    if ctx.dry:
        o.check("configs resolve", all(len(c) for c in by_count.values()), sum(map(len, by_count.values())))
        return o
    for n, cases in by_count.items():
        results = run_jobs(cases, "cuda:" + ",".join(map(str, range(n))), dry=False)
        compare(o, cases, results, f"{n} GPUs (nccl)", dry=False)
    return o


def predicted_peaks(cfg: Any, device: str = "cpu") -> list[int]:
    """The memory model's peak per device, with stage facts measured on ``device`` as the
    executor counts them (validate's recipe, :func:`stalesim.validate.costmodel.predicted_peaks`)."""
    from stalesim.executor.rank import RECV_AHEAD
    from stalesim.validate.costmodel import predicted_peaks as model_peaks

    return model_peaks(cfg, device=device, recv_ahead=RECV_AHEAD)


def memory_step(ctx: Context) -> Outcome:
    """Predicted peak bytes vs the rank's peak (``cuda.max_memory_allocated`` on a GPU; the bytes
    it counts, on a CPU) per schedule; goal: within MEMORY_REL_TOL."""
    cases = memory_cases(ctx.device, ctx.dry)
    devices = "cpu:1" if ctx.dry else "cuda:0"
    results = run_jobs(cases, devices, dry=ctx.dry)
    o = Outcome(numbers={"devices": devices})
    rows = {}
    for c, res in zip(cases, results):
        label = _label(c)
        if "error" in res:
            o.check(label, False, res["error"][:300])
            continue
        measured = int(res["peak_memory_bytes"]["0"])
        predicted = predicted_peaks(c, device="cpu" if ctx.dry else "cuda:0")[0]
        rel = abs(predicted - measured) / measured
        rows[label] = {"predicted_bytes": predicted, "measured_bytes": measured, "rel_error": rel,
                       # what was allocated when the run started: the static state, or more if an
                       # earlier job of the worker left something behind
                       "run_start_allocated_bytes": (res.get("run_start_allocated_bytes") or {}).get("0")}
        o.numbers["measured_as"] = "cuda.max_memory_allocated" if not ctx.dry else "bytes the rank counts"
        o.check(f"{label}: predicted vs measured peak", rel <= MEMORY_REL_TOL, rel, MEMORY_REL_TOL)
    o.numbers["cases"] = rows
    return o
