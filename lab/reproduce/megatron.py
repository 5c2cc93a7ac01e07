"""Megatron-LM's Table 1 (Narayanan et al., SC21) predicted by the analytic LLM estimate.

Each published row (model shape, tensor- and pipeline-parallel size, GPUs, batch)
is predicted with one set of assumptions, the same for every row:

* hardware: DGX A100 80GB nodes from the catalog (8 GPUs, NVLink 3 through
  NVSwitch, one 200 Gb/s HDR InfiniBand NIC per GPU; the paper's Selene);
* data-parallel size = GPUs / (tp x pp); the micro-batch size, the interleaving
  depth and the data-parallel overlap of the paper's own launch script
  (``examples/sc21/run_table_1.sh`` of NVIDIA/Megatron-LM: ``MBS``,
  ``--num-layers-per-virtual-pipeline-stage``, ``DDP=torch|local``), read from
  the published-runs data file (:mod:`lab.reproduce.published`, rows of
  source ``sc21-t1``) so they are stated once; ``1f1b`` where the script has no
  virtual stages, ``interleaved-1f1b`` with V = layers per device / layers per
  virtual stage where it has; full activation recomputation (the script's
  ``--recompute-method uniform``; equation (3) counts the recomputed forward);
  mixed-precision Adam without ZeRO; no sequence parallelism (it came later);
* kernel efficiency: :data:`stalesim.sim.parallel.DEFAULT_EFFICIENCY`, stated
  once, never fitted per row.

The predicted teraFLOP/s per GPU is equation (3)'s FLOPs over the predicted
iteration time and the GPU count, exactly how the paper computes the published
column. ``python -m lab.reproduce.megatron`` writes ``predicted.csv``;
:func:`lab.reproduce.tables.megatron_table1` renders the RESULTS.md table from the stored files.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path
from typing import Any

from stalesim.atomic import csv_text

RES = Path("docs/results/megatron_table1")
FIELDS = ("workload", "tp", "pp", "dp", "gpus", "batch", "micro_batch", "chunks", "microbatches",
          "published_tflops_per_gpu",
          "predicted_tflops_per_gpu", "error_pct", "iteration_s", "bubble_pct", "memory_gb")


def published(root: Path) -> list[dict[str, str]]:
    with open(root / RES / "published.csv", newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


# the launch script's choices per model (run_table_1.sh) and the paper's code's (no asynchronous
# tensor-parallel all-reduce yet); the rest of a row is Table 1's
SCRIPT_FIELDS = ("micro_batch", "schedule", "chunks", "dp_overlap", "tp_overlap", "p2p_overlap")


def script_settings(root: Path) -> dict[str, dict[str, Any]]:
    """Per Table 1 model: the script's micro-batch, schedule, interleaving, DDP, TP and pipeline overlap, as the
    published-runs data file records them (one place for both checks)."""
    from lab.reproduce.published import load

    return {r.model: {k: r.plan[k] for k in SCRIPT_FIELDS if k in r.plan}
            for r in load(root).runs if r.source == "sc21-t1"}


def predict_rows(root: Path) -> list[dict[str, Any]]:
    """One predicted row per published one (module doc for the assumptions)."""
    from stalesim.sim.parallel import ParallelPlan, predict_llm
    from stalesim.workloads.hardware import hardware_from_node
    from stalesim.workloads.transformer import get_preset

    hw = hardware_from_node("dgx-a100")
    script = script_settings(root)
    out = []
    for r in published(root):
        tp, pp, gpus, batch = int(r["tp"]), int(r["pp"]), int(r["gpus"]), int(r["batch"])
        dp = gpus // (tp * pp)
        spec = get_preset(r["workload"])
        assert (spec.heads, spec.hidden, spec.layers) == (int(r["heads"]), int(r["hidden"]), int(r["layers"]))
        plan = ParallelPlan(tp=tp, pp=pp, dp=dp, global_batch=batch, recompute="full", **script[r["workload"]])
        p = predict_llm(spec, plan, hw)
        pub = float(r["published_tflops_per_gpu"])
        out.append({"workload": r["workload"], "tp": tp, "pp": pp, "dp": dp, "gpus": gpus, "batch": batch,
                    "micro_batch": plan.micro_batch, "chunks": plan.chunks,
                    "microbatches": plan.microbatches, "published_tflops_per_gpu": pub,
                    "predicted_tflops_per_gpu": round(p.hardware_tflops_per_gpu, 2),
                    "error_pct": round(100 * (p.hardware_tflops_per_gpu - pub) / pub, 2),
                    "iteration_s": round(p.iteration_s, 4), "bubble_pct": round(100 * p.bubble_fraction, 2),
                    "memory_gb": round(p.memory_bytes / 1e9, 2)})
    return out


def to_csv(rows: list[dict[str, Any]]) -> str:
    return csv_text(rows, FIELDS)


def write_predictions(root: Path) -> Path:
    from stalesim.atomic import write_text_atomic

    path = root / RES / "predicted.csv"
    write_text_atomic(path, to_csv(predict_rows(root)))
    return path


def error_stats(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """(median, max) of the absolute percentage errors."""
    errs = [abs(float(r["error_pct"])) for r in rows]
    return statistics.median(errs), max(errs)


# Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models"), Table 2:
# activation bytes per transformer layer (16-bit activations, dropout), as closed forms in s, b, h, a, t
KORTHIKANTI = RES.parent / "korthikanti_table2"
KORTHIKANTI_ROWS = (  # (technique, tp, sp, recompute, published closed form in s, b, h, a, t)
    ("no parallelism", 1, False, "none",
     lambda s, b, h, a, t: s * b * h * (34 + 5 * a * s / h)),
    ("tensor parallel (baseline)", 8, False, "none",
     lambda s, b, h, a, t: s * b * h * (10 + 24 / t + 5 * a * s / (h * t))),
    ("tensor + sequence parallel", 8, True, "none",
     lambda s, b, h, a, t: s * b * h * (34 / t + 5 * a * s / (h * t))),
    ("tensor parallel + selective recompute", 8, False, "selective",
     lambda s, b, h, a, t: s * b * h * (10 + 24 / t)),
    ("tensor + sequence parallel + selective recompute", 8, True, "selective",
     lambda s, b, h, a, t: s * b * h * 34 / t),
    ("full activation recompute", 8, False, "full",
     lambda s, b, h, a, t: 2 * s * b * h),
)
KORTHIKANTI_MODELS = ("gpt3-175b", "megatron-529.6b", "megatron-1t")


def korthikanti_rows() -> list[dict[str, Any]]:
    """Per-layer activation MB (micro-batch 1): the paper's closed form vs the tensor-by-tensor derivation."""
    from stalesim.workloads.transformer import get_preset, layer_activation_bytes

    out = []
    for name in KORTHIKANTI_MODELS:
        spec = get_preset(name)
        s, h, a = spec.seq, spec.hidden, spec.heads
        for tech, t, sp, rec, formula in KORTHIKANTI_ROWS:
            pub = formula(s, 1, h, a, t)
            ours = layer_activation_bytes(spec, 1, tp=t, sp=sp, recompute=rec)
            out.append({"workload": name, "technique": tech, "tp": t, "closed_form_mb": round(pub / 2**20, 3),
                        "derived_mb": round(ours / 2**20, 3), "error_pct": round(100 * (ours - pub) / pub, 4)})
    return out


def write_korthikanti(root: Path) -> Path:
    from stalesim.atomic import write_csv_atomic

    return write_csv_atomic(root / KORTHIKANTI / "activations.csv", korthikanti_rows())


if __name__ == "__main__":  # pragma: no cover
    print(write_predictions(Path(".")))
    print(write_korthikanti(Path(".")))
