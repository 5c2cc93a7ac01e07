"""The kernel-efficiency table of the lent GPU (``stalesim calibrate --gemm``), kept with the results.

The table is what the LLM estimate's by-shape model reads for this GPU class
(docs/llm-efficiency.md): the step writes it to the results folder as
``kernels-<catalog key>.json``, to be stored as package data beside
``ceilings.json``. Checks: every shape measured a positive efficiency no
higher than the catalog peak allows (5% for clock boost and timer resolution),
and the best GEMM reaches half the peak (MAMF figures are 80-87%: far below
half means a throttled or shared GPU, whose table should not be stored). The
dry mode runs the tiny CPU grid and checks the file reads back.
"""

from __future__ import annotations

from lab.gpucheck.report import Context, Outcome
from stalesim.atomic import write_text_atomic

# measured efficiency above the catalog peak by more than this is a timing or catalog error
_PEAK_SLACK = 1.05
_MIN_BEST_GEMM = 0.5


def kernels_step(ctx: Context) -> Outcome:
    import json

    from stalesim.workloads.hardware import get_device
    from stalesim.workloads.kernel_calibration import measure_kernels
    from stalesim.workloads.kernel_efficiency import ceilings, load_table

    data = measure_kernels(repeats=3)
    path = ctx.out / f"kernels-{data['device_key']}.json"
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")
    table = load_table(path)
    effs = [r["efficiency"] for r in data["gemm"]] + [r["efficiency"] for r in data["attention"]]
    best = max(r["efficiency"] for r in data["gemm"])
    o = Outcome(numbers={"device": data["device"], "device_key": data["device_key"], "dtype": data["dtype"],
                         "gemm_shapes": len(table.gemm), "attention_shapes": len(table.attention),
                         "best_gemm_efficiency": best,
                         "published_gemm_ceiling": ceilings(get_device(data["device_key"]), data["dtype"]).gemm,
                         "file": path.name})
    o.check("every shape measured", all(e > 0 for e in effs) and len(table.gemm) == len(data["gemm"]),
            len(effs), "> 0 each")
    if ctx.dry:
        return o
    o.check("no shape above the peak", max(effs) <= _PEAK_SLACK, max(effs), _PEAK_SLACK)
    o.check("the best GEMM reaches half the peak", best >= _MIN_BEST_GEMM, best, _MIN_BEST_GEMM)
    return o
