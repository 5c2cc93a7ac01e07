"""Basis rotation's update cost: measured on this machine vs what the simulator adds.

Run: ``python -m benchmarks.bench_rotation [--quick] [PROFILE.json] [STAGES]`` (default: the lenet5
CPU profile of docs/results/plan-check and 4 stages). Per stage of the profile's model, cut
as the simulator cuts it: the time of one AdamW update with and without basis rotation,
each averaged over ``freq`` = 10 updates (so one warm-started refresh is in every window;
the first decomposition is done before timing), as the median of interleaved repeats with
its spread; beside it the extra update time ``simulate --basis-rotation`` predicts for that
stage (stalesim.sim.rotation_cost: the rotation's FLOPs at the stage's forward rate).
Process CPU time, one thread, so other load on a shared machine inflates it little.
``--quick``: 2 repeats instead of 7.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FREQ = 10


def _window(opt, params, grads) -> float:
    """CPU seconds per update over FREQ updates."""
    t0 = time.process_time()
    for _ in range(FREQ):
        for p, g in zip(params, grads):
            p.grad = g
        opt.step()
    return (time.process_time() - t0) / FREQ


def measure(profile_path: str, stages: int, repeats: int = 7) -> list[dict]:
    import torch

    from stalesim.runtime.rotation import RotatedAdam
    from stalesim.sim.model import resolve_cuts, stage_costs
    from stalesim.sim.rotation_cost import with_basis_rotation
    from stalesim.workloads.profile import load_profile
    from stalesim.workloads.zoo import build_model

    torch.set_num_threads(1)
    prof = load_profile(profile_path)
    cuts, ppv = resolve_cuts(prof, stages, None, prof.batch_size)
    costs = stage_costs(prof, cuts, batch_size=prof.batch_size, action_batch=prof.batch_size, ppv=ppv)
    priced = with_basis_rotation(costs, prof, freq=FREQ, max_dim=10_000)
    model = build_model(prof.model)
    rows = []
    for s, (lo, hi) in enumerate(costs.layer_ranges):
        params = [p for i in range(lo, hi) for p in model.blocks[i].parameters()]
        if not params:
            continue
        gen = torch.Generator().manual_seed(s)
        grads = [torch.randn(p.shape, generator=gen) * 1e-2 for p in params]
        plain = torch.optim.AdamW(params, lr=0.0)
        rot = RotatedAdam(params, lr=0.0, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=True,
                          freq=FREQ)
        _window(plain, params, grads)
        _window(rot, params, grads)  # the first decomposition, and warm caches
        a, b = [], []
        for _ in range(repeats):  # interleaved
            a.append(_window(plain, params, grads))
            b.append(_window(rot, params, grads))
        extra = [y - x for x, y in zip(a, b)]
        rows.append({"stage": s, "blocks": [prof.layers[i].name for i in range(lo, hi)],
                     "adamw_us": statistics.median(a) * 1e6, "rotated_us": statistics.median(b) * 1e6,
                     "extra_us": statistics.median(extra) * 1e6,
                     "extra_spread_us": (min(extra) * 1e6, max(extra) * 1e6),
                     "predicted_extra_us": (priced.u_ns[s] - costs.u_ns[s]) / 1e3})
    return rows


def main(argv: list[str] | None = None) -> int:
    import argparse

    from stalesim.cli.common import positive_int

    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_rotation", description=__doc__.split("\n\n")[0])
    p.add_argument("profile", nargs="?", default=str(ROOT / "docs/results/plan-check/profile_here.json"))
    p.add_argument("stages", nargs="?", type=positive_int, default=4)
    p.add_argument("--quick", action="store_true", help="2 interleaved repeats instead of 7")
    args = p.parse_args(argv if argv is not None else [])
    path, stages = args.profile, args.stages
    print(f"profile {path}, {stages} stages, freq {FREQ}, one thread (CPU time per update)")
    print("stage  blocks                 AdamW us   rotated us   extra us [min, max]      predicted extra us")
    for r in measure(path, stages, repeats=2 if args.quick else 7):
        lo, hi = r["extra_spread_us"]
        print(f"{r['stage']:>5}  {','.join(r['blocks']):<20} {r['adamw_us']:>10.1f} {r['rotated_us']:>12.1f} "
              f"{r['extra_us']:>10.1f} [{lo:.1f}, {hi:.1f}] {r['predicted_extra_us']:>14.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
