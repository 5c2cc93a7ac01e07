"""What basis rotation costs a stage on the simulated device (``simulate --basis-rotation``).

Basis rotation (:mod:`stalesim.runtime.rotation`) keeps, per rotated matrix of r x c, two
r x r and two c x c matrices beyond Adam's two moments, and adds to every update two Gram
products, three two-sided rotations and, every ``freq`` updates, a power step with a QR
per side (:func:`~stalesim.runtime.rotation.rotation_flops`). Both follow from the matrix
shapes, which a profile does not hold: the profile's zoo model is rebuilt (cheap: no data,
no training) and each block's matrices read off it; its parameter bytes must be the
profile's, so a profile of another variant of the model is refused instead of priced wrong.

Memory: each stage's optimizer state (``StageCosts.optimizer_bytes``) becomes Adam's two
moments plus the factors and bases, exactly the runtime's ``StageOptimizer.state_nbytes``.
Time: the FLOPs are matrix products, so they are timed at the rate the stage's own forward
achieves on the device being simulated (forward FLOPs / forward time of the profile at the
action batch, re-timed by ``--target``), and added to the stage's update (and once per
stage to the sequential baseline the speed-up is measured against). The profile's
update is the SGD step it measured; Adam's extra element-wise work is not added here.
The one-off first eigendecomposition is left out (amortised over a run it is nothing).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from stalesim.errors import StalesimError
from stalesim.sim.model import NS, StageCosts


def block_rotation_facts(profile: Any, *, freq: int, max_dim: int) -> list[tuple[int, float]]:
    """Per block of ``profile``'s model: (bytes of the rotation's state, FLOPs per update)."""
    import torch

    from stalesim.runtime.rotation import rotation_flops, rotation_nbytes
    from stalesim.workloads.zoo import build_model

    try:
        model = build_model(profile.model)
    except (StalesimError, KeyError, ValueError):
        raise StalesimError(f"basis_rotation: needs the profile's matrix shapes; {profile.model!r} is not a "
                            "zoo model to rebuild them from") from None
    if len(model.blocks) != profile.n_layers:
        raise StalesimError(f"basis_rotation: the profile has {profile.n_layers} blocks, model "
                            f"{profile.model!r} has {len(model.blocks)}")
    esize = torch.empty((), dtype=getattr(torch, profile.dtype, torch.float32)).element_size()
    out = []
    for i, (block, lp) in enumerate(zip(model.blocks, profile.layers)):
        params = [p for p in block.parameters() if p.requires_grad]
        if sum(p.numel() for p in params) * esize != lp.param_bytes:
            raise StalesimError(f"basis_rotation: block {i} ({lp.name}) of the profile holds {lp.param_bytes} "
                                f"parameter bytes, the rebuilt {profile.model!r} a different count (another "
                                "variant, e.g. its number of classes); profile the model as run")
        nbytes = sum(rotation_nbytes(p, max_dim) // p.element_size() for p in params) * esize
        out.append((nbytes, sum(rotation_flops(tuple(p.shape), freq, max_dim) for p in params)))
    return out


def with_basis_rotation(costs: StageCosts, profile: Any, *, freq: int, max_dim: int,
                        moments: int = 2) -> StageCosts:
    """``costs`` (built from ``profile``) with the rotation's state in each stage's optimizer
    bytes (plus Adam's ``moments`` copies of the parameters) and its amortised matrix
    products in each stage's update time (see the module doc)."""
    facts = block_rotation_facts(profile, freq=freq, max_dim=max_dim)
    at = profile.at_batch_size(costs.action_batch)
    total_flops = sum(lp.flops for lp in at.layers)
    total_f = sum(lp.forward_s for lp in at.layers)
    opt, upd = [], []
    for s, (lo, hi) in enumerate(costs.layer_ranges):
        nbytes = sum(facts[i][0] for i in range(lo, hi))
        flops = sum(facts[i][1] for i in range(lo, hi))
        f_flops = sum(at.layers[i].flops for i in range(lo, hi))
        f_s = sum(at.layers[i].forward_s for i in range(lo, hi))
        if f_flops > 0 and f_s > 0:
            rate = f_flops / f_s
        elif total_flops > 0 and total_f > 0:
            rate = total_flops / total_f
        else:
            raise StalesimError("basis_rotation: the profile has no forward FLOPs to time matrix products by")
        opt.append(moments * costs.param_bytes[s] + nbytes)
        upd.append(costs.u_ns[s] + round(flops / rate * NS))
    # the sequential baseline (speed-up) runs the same optimizer: it pays every stage's share once
    seq = costs.seq_ns + sum(u - u0 for u, u0 in zip(upd, costs.u_ns)) if costs.seq_ns else costs.seq_ns
    return replace(costs, optimizer_bytes=tuple(opt), u_ns=tuple(upd), seq_ns=seq)
