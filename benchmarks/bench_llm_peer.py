"""The published LLM runs side by side: stalesim's prediction and the ``llm-analysis`` package's.

``llm-analysis`` (Cheng Li, PyPI ``llm-analysis``; the analytic estimate a user would pick
instead) times a training iteration as the model's FLOPs (forward, twice that for the
backward, the recomputed forward) over ``flops_efficiency`` x the GPU's peak x the model-
parallel size, times the gradient-accumulation steps: no pipeline bubble and no data-
parallel or ZeRO collective in the iteration time. It is run at its own suggested
efficiency, 0.5 ("FLOPS efficiency achieved by Megatron-LM is ~0.5 for LLM training", the
comment on its ``FLOPS_EFFICIENCY`` constant, whose value is 1.0), on the rows stalesim
predicts (``docs/results/published_runs/predicted.csv``), with each row's shape,
parallel sizes, micro-batch, recomputation and ZeRO stage, and its catalog GPU (memory as
the row states it). Both tools' answers are converted to the published metric the same
way: equation (3)'s FLOPs (Narayanan et al. 2021) over the iteration time for TFLOP/s per
GPU, tokens over time for tokens/s, one layer's FLOPs over the per-GPU rate for layer ms.

    pip install 'stalesim[bench]'            # llm-analysis, pinned
    python -m benchmarks.bench_llm_peer --write

writes ``docs/results/published_runs/peer.csv`` and ``peer.md``; without ``llm-analysis``
installed it says so and exits 0. Goal: stalesim ahead of the peer on the median and the
max absolute time error over the same rows.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stalesim.atomic import csv_text

if TYPE_CHECKING:
    from stalesim.sim.llm_plan import ParallelPlan
    from stalesim.workloads.hardware import Hardware
    from stalesim.workloads.transformer import TransformerSpec

RES = Path("docs/results/published_runs")
PEER_CSV = RES / "peer.csv"
PEER_MD = RES / "peer.md"
# llm-analysis's own statement of what Megatron-LM reaches (its constant.py comment)
PEER_EFFICIENCY = 0.5
# stalesim catalog device -> llm-analysis gpu_configs name (same part)
PEER_GPU = {"a100-80gb-sxm": "a100-sxm-80gb", "h100-sxm": "h100-sxm-80gb"}
FIELDS = ("id", "source", "metric", "published", "stalesim", "stalesim_error_pct", "peer", "peer_error_pct",
          "memory_published_gib", "stalesim_memory_gib", "peer_memory_gib", "outcome", "stalesim_fits", "peer_fits")
GIB = 2**30


@dataclass(frozen=True)
class PeerAnswer:
    value: float | None  # None: the row published only whether it fit
    memory_gib: float | None
    fits: bool | None


def available() -> bool:
    try:
        import llm_analysis  # noqa: F401
    except ImportError:
        return False
    return True


def _peer_analysis(spec: TransformerSpec, plan: ParallelPlan, hw: Hardware) -> Any:
    from llm_analysis.analysis import LLMAnalysis
    from llm_analysis.config import (
        ModelConfig,
        ParallelismConfig,
        get_dtype_config_by_name,
        get_gpu_config_by_name,
    )

    ffn = spec.ffn_dim
    model = ModelConfig(name=spec.name, num_layers=spec.layers, n_head=spec.heads, hidden_dim=spec.hidden,
                        vocab_size=spec.vocab, max_seq_len=spec.seq, num_key_value_heads=spec.n_kv_heads,
                        ffn_embed_dim=ffn, expansion_ratio=ffn / spec.hidden)
    gpu = get_gpu_config_by_name(PEER_GPU[hw.device.key])
    gpu = replace(gpu, mem_per_GPU_in_GB=hw.device.memory_bytes / GIB)
    par = ParallelismConfig(tp_size=plan.tp, pp_size=plan.pp, dp_size=plan.dp, sp_size=plan.tp if plan.sp else 1)
    return LLMAnalysis(model, gpu, get_dtype_config_by_name("w16a16e16"), par, flops_efficiency=PEER_EFFICIENCY)


def peer_answer(metric: str, spec: TransformerSpec, plan: ParallelPlan, hw: Hardware) -> PeerAnswer:
    """llm-analysis's answer for one row, in the row's published metric."""
    from llm_analysis.analysis import ActivationRecomputation, DSZeRO

    from stalesim.workloads.transformer import narayanan_flops

    peer_modes = {"none": ActivationRecomputation.NONE, "selective": ActivationRecomputation.SELECTIVE,
                  "full": ActivationRecomputation.FULL}
    if plan.recompute not in peer_modes or plan.recompute_every > 1:
        return PeerAnswer(None, None, None)  # torchtitan's op-level or every-N-th-layer recomputation: no peer mode
    a = _peer_analysis(spec, plan, hw)
    rec = peer_modes[plan.recompute]
    if metric == "layer_ms":
        b, s = plan.micro_batch, spec.seq
        f = a.get_num_flops_fwd_per_layer(b, s)
        extra = {"none": 0.0, "full": f, "selective": a.get_num_flops_total_selective_recompute_attn(b, s)
                 / spec.layers}[plan.recompute]
        per_gpu = plan.tp * a.get_TFLOPS_per_gpu() * 1e12
        return PeerAnswer(1e3 * (3 * f + extra) / per_gpu, None, None)
    out = a.training(batch_size_per_gpu=plan.micro_batch, global_batch_size=plan.batch, seq_len=spec.seq,
                     activation_recomputation=rec, ds_zero=DSZeRO(plan.zero),
                     flash_attn=spec.attention == "flash", softmax_dropout=spec.dropout,
                     mlp_gated_linear_units=spec.ffn_type == "swiglu")
    it = float(out["latency_per_iter"])
    mem = float(out["(weight+op_state+grad+act)_memory_per_gpu"]) / GIB
    fits = float(out["memory_left_per_gpu"]) >= 0
    value: float | None
    if not metric:
        value = None
    elif metric == "iteration_s":
        value = it
    elif metric == "model_state_gb":  # weights, gradients and optimizer state, as the ZeRO paper counts
        value = float(out["(weight+op_state+grad)_memory_per_gpu"]) / 1e9
    elif metric == "tokens_per_s_per_gpu":
        value = plan.batch * spec.seq / it / plan.gpus
    elif metric == "samples_per_s_per_gpu":
        value = plan.batch / it / plan.gpus
    else:  # tflops_per_gpu: the paper's equation (3) over the time, as for stalesim's answer
        value = narayanan_flops(spec, plan.batch) / it / plan.gpus / 1e12
    return PeerAnswer(value, mem, fits)


def _abs_errors(rows: list[dict[str, Any]], col: str) -> list[float]:
    return [abs(float(r[col])) for r in rows if r[col] not in ("", None)]


def compare(root: Path) -> list[dict[str, Any]]:
    """One row per published run that stalesim predicts: both tools beside the published value."""
    from lab.reproduce.published import PART_METRICS, hardware_for, load, plan_for, read_predicted, spec_for

    logging.getLogger("llm_analysis").setLevel(logging.ERROR)
    from llm_analysis.logger import logger

    logger.setLevel(logging.ERROR)
    data = load(root)
    runs = {r.id: r for r in data.runs}
    out = []
    for p in read_predicted(root):
        if p["status"] != "predicted":
            continue
        run = runs[p["id"]]
        if run.comparison:
            # one schedule of a multi-schedule comparison: llm-analysis times no pipeline schedule
            # (no bubble), so it answers every schedule of the setup alike and cannot rank them
            out.append(peer_row(p, PeerAnswer(None, None, None)))
            continue
        spec, plan, hw = spec_for(data, run.model), plan_for(run), hardware_for(run)
        ans = peer_answer(p["metric"], spec, plan, hw)
        if p["metric"] in PART_METRICS:  # a part of a run (as stalesim's row): no memory or verdict
            ans = PeerAnswer(ans.value, None, None)
        out.append(peer_row(p, ans))
    return out


def peer_row(p: dict[str, str], ans: PeerAnswer) -> dict[str, Any]:
    """One side-by-side row: stalesim's stored prediction ``p`` and the peer's answer."""
    pub = float(p["published"]) if p["published"] else None
    peer = "" if ans.value is None else round(ans.value, 4)
    err = "" if ans.value is None or pub is None else round(100 * (ans.value - pub) / pub, 2)
    return {"id": p["id"], "source": p["source"], "metric": p["metric"], "published": p["published"],
            "stalesim": p["predicted"], "stalesim_error_pct": p["error_pct"], "peer": peer,
            "peer_error_pct": err,
            "memory_published_gib": p["memory_published_gib"],
            "stalesim_memory_gib": p["memory_predicted_gib"],
            "peer_memory_gib": "" if ans.memory_gib is None else round(ans.memory_gib, 2),
            "outcome": p["outcome"], "stalesim_fits": p["fits"],
            "peer_fits": "" if ans.fits is None else ("yes" if ans.fits else "no")}


def summary_md(rows: list[dict[str, Any]]) -> str:
    """Median and max absolute time error per source and over all rows, both tools, on the rows
    both answer (a row the peer cannot express is counted apart)."""
    lines = ["| rows | n | stalesim median / max | llm-analysis median / max |", "| --- | ---: | ---: | ---: |"]
    both = [r for r in rows if r["stalesim_error_pct"] not in ("", None) and r["peer_error_pct"] not in ("", None)]
    groups = {s: [r for r in both if r["source"] == s] for s in dict.fromkeys(r["source"] for r in both)}
    groups["**all**"] = both
    for name, rs in groups.items():
        s, p = _abs_errors(rs, "stalesim_error_pct"), _abs_errors(rs, "peer_error_pct")
        lines.append(f"| {name} | {len(s)} | {statistics.median(s):.1f} % / {max(s):.1f} % | "
                     f"{statistics.median(p):.1f} % / {max(p):.1f} % |")
    oom = [r for r in rows if r["outcome"] == "oom"]
    wrong = {k: sum(1 for r in rows if r[f"{k}_fits"] and r["outcome"]
                    and (r[f"{k}_fits"] == "yes") != (r["outcome"] == "trained")) for k in ("stalesim", "peer")}
    lines += ["", f"fits verdicts wrong: stalesim {wrong['stalesim']}, llm-analysis {wrong['peer']} "
                  f"(of {sum(1 for r in rows if r['outcome'])} rows with an outcome, {len(oom)} out of memory)",
              f"rows the peer cannot express (no recomputation mode for them, or a schedule comparison: "
              f"it times no pipeline schedule): "
              f"{sum(1 for r in rows if r['stalesim_error_pct'] not in ('', None) and r not in both)}",
              f"llm-analysis at flops_efficiency {PEER_EFFICIENCY}; "
              "command: `python -m benchmarks.bench_llm_peer --write`"]
    return "\n".join(lines) + "\n"


def to_csv(rows: list[dict[str, Any]]) -> str:
    return csv_text(rows, FIELDS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_llm_peer", description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help="store peer.csv and peer.md under docs/results")
    ap.add_argument("--quick", action="store_true", help="the same run (it takes about a second)")
    args = ap.parse_args(argv)
    if not available():
        print("llm-analysis is not installed (pip install 'stalesim[bench]'): peer comparison skipped")
        return 0
    from importlib.metadata import version

    root = Path(".")
    rows = compare(root)
    md = f"llm-analysis {version('llm-analysis')}\n\n" + summary_md(rows)
    print(md, end="")
    if args.write:
        from stalesim.atomic import write_text_atomic

        write_text_atomic(root / PEER_CSV, to_csv(rows))
        write_text_atomic(root / PEER_MD, md)
        print(json.dumps({"wrote": [str(PEER_CSV), str(PEER_MD)]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
