"""``torch.compile`` of a wrapped model: the compiled loop reads the IR's versions and gives
the eager wrapped loop's losses (which equal ``stalesim emulate``'s: test_inject_*).

The pipeline works through module hooks, ``p.data`` swaps and saved-tensor hooks; a
compiled graph that baked a parameter's storage in, or skipped the hooks, would read the
live weights where the schedule reads a stash, and the losses would differ from the
eager loop's in the sixth digit. With ``aot_eager`` (torch's own kernels) the equality is
bit for bit; with inductor (its generated kernels) in float64 within 1e-12.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from stalesim.inject import StalePipeline

STEPS = 12


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 3)).double()


def _loop(schedule: str, backend: str | None, *, micro: int = 1, how: str = "after",
          **mitigations: bool) -> tuple[list[float], StalePipeline]:
    """``how``: compiled after wrapping (``torch.compile``), in place after wrapping
    (``module.compile()``), or before wrapping (the split then names ``_orig_mod.*``)."""
    torch._dynamo.reset()
    net: torch.nn.Module = _net()
    split = ["0", "2", "4"]
    if backend is not None and how == "before":
        net = torch.compile(net, backend=backend)
        split = [f"_orig_mod.{n}" for n in split]
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    pipe = StalePipeline(net, schedule, steps=STEPS, split=split, microbatches=micro, **mitigations)
    pipe.attach(opt)
    model = net
    if backend is not None and how == "in_place":
        net.compile(backend=backend)
    elif backend is not None and how == "after":
        model = torch.compile(net, backend=backend)
    g = torch.Generator().manual_seed(1)
    xs = torch.randn(STEPS, micro, 8, 4, generator=g, dtype=torch.float64)
    ys = torch.randint(0, 3, (STEPS, micro, 8), generator=g)
    losses = []
    for t in range(STEPS):
        for m in range(micro):
            loss = F.cross_entropy(model(xs[t, m]), ys[t, m]) / micro
            losses.append(loss.item())
            loss.backward()
        opt.step()
        opt.zero_grad()
    return losses, pipe


@pytest.mark.parametrize("schedule, micro, mitigations", [
    ("pipedream", 1, {}),
    ("stale", 1, {}),
    ("2bw", 2, {}),
    ("pipedream", 1, {"weight_prediction": True}),
])
def test_aot_eager_equals_the_eager_loop(schedule, micro, mitigations):
    ref, ref_pipe = _loop(schedule, None, micro=micro, **mitigations)
    got, pipe = _loop(schedule, "aot_eager", micro=micro, **mitigations)
    assert got == ref
    assert pipe.versions_match() and pipe.log.vf == ref_pipe.log.vf and pipe.log.vb == ref_pipe.log.vb


@pytest.mark.parametrize("how", ["in_place", "before"])
def test_compiled_in_place_or_before_wrapping_equals_the_eager_loop(how):
    ref, _ = _loop("stale", None)
    got, pipe = _loop("stale", "aot_eager", how=how)
    assert got == ref and pipe.versions_match()


def test_inductor_equals_the_eager_loop():
    ref, _ = _loop("pipedream", None)
    got, pipe = _loop("pipedream", "inductor")
    assert got == pytest.approx(ref, rel=1e-12, abs=0)
    assert pipe.versions_match()
    # a schedule that stashes moves the losses off the plain loop's: the equality is not vacuous
    plain, _ = _loop("gpipe", None)
    assert max(abs(a - b) for a, b in zip(got, plain)) > 1e-4
