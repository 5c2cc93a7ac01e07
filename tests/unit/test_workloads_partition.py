"""PPV convention, stage splitting and the min-max partitioner (vs brute force)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from stalesim.errors import StalesimError
from stalesim.workloads.partition import (
    block_flops,
    cuts_to_ppv,
    default_ppv,
    min_max_partition,
    ppv_to_cuts,
    split_stages,
    weights_ppv_to_cuts,
)
from stalesim.workloads.zoo import build_model

# The paper's 4-stage (S = 2) PPVs; for ResNets they cut right after group 1.
PAPER_PPVS = [
    ("lenet5", 2, 2, "conv2"),
    ("alexnet", 3, 3, "conv3"),
    ("vgg16", 2, 2, "conv2"),
    ("resnet20", 7, 4, "g1b2"),
    ("resnet56", 19, 10, "g1b8"),
    ("resnet110", 37, 19, "g1b17"),
    ("resnet224", 75, 38, "g1b36"),
    ("resnet362", 121, 61, "g1b59"),
]


@pytest.mark.parametrize("name,k,cut,last_block", PAPER_PPVS)
def test_paper_ppvs(name: str, k: int, cut: int, last_block: str) -> None:
    model = build_model(name)
    assert ppv_to_cuts(model, [k]) == [cut]
    assert model.block_names[cut - 1] == last_block
    assert cuts_to_ppv(model, [cut]) == [k]
    if name.startswith("resnet"):
        n = (int(name[6:]) - 2) // 6
        assert k == 1 + 2 * n


def test_resnet56_ppv19_stage0_is_stem_plus_group1() -> None:
    model = build_model("resnet56")
    s0, s1 = split_stages(model, ppv=[19])
    names0 = [k for k, _ in s0.named_children()]
    assert names0 == ["stem"] + [f"g1b{i}" for i in range(9)]
    assert sum(isinstance(m, nn.Conv2d) for m in s0.modules()) == 19
    assert sum(isinstance(m, (nn.Conv2d, nn.Linear)) for m in s1.modules()) == 56 - 19


def test_bad_ppvs_name_the_value() -> None:
    model = build_model("resnet20")
    with pytest.raises(StalesimError, match=r"ppv\[0\]: 8 would split block 4"):
        ppv_to_cuts(model, [8])
    with pytest.raises(StalesimError, match=r"ppv\[1\].*strictly increasing.*got 7"):
        ppv_to_cuts(model, [7, 7])
    with pytest.raises(StalesimError, match=r"ppv\[0\]: 20 is out of range"):
        ppv_to_cuts(model, [20])
    with pytest.raises(StalesimError, match=r"ppv\[0\].*got 0"):
        ppv_to_cuts(model, [0])
    with pytest.raises(StalesimError, match=r"ppv\[0\]: expected an integer"):
        ppv_to_cuts(model, ["x"])  # type: ignore[list-item]
    with pytest.raises(StalesimError, match=r"cuts\[0\]"):
        cuts_to_ppv(model, [11])


def test_zero_weight_blocks_ride_with_previous_layer() -> None:
    # blocks: W, relu, W, relu, W  -> PPV 1 cuts after the relu (block index 2)
    assert weights_ppv_to_cuts([1, 0, 1, 0, 1], [1]) == [2]
    assert weights_ppv_to_cuts([1, 0, 1, 0, 1], [1, 2]) == [2, 4]
    assert weights_ppv_to_cuts([0, 1, 1], [1]) == [2]


@pytest.mark.parametrize("name,ppv", [("lenet5", [2]), ("resnet20", [7, 13]), ("vgg16", [2, 9])])
def test_split_stages_composes_exactly(name: str, ppv: list[int]) -> None:
    model = build_model(name, seed=1).eval()
    parts = split_stages(model, ppv=ppv)
    assert len(parts) == len(ppv) + 1
    x = torch.randn(4, *model.input_shape, generator=torch.Generator().manual_seed(0))
    y = x
    for p in parts:
        y = p(y)
    assert torch.equal(y, model(x))
    # stages share the model's parameters (no copies)
    ids = {id(p) for s in parts for p in s.parameters()}
    assert ids == {id(p) for p in model.parameters()}


def test_split_stages_by_count_and_errors() -> None:
    model = build_model("lenet5")
    parts = split_stages(model, stages=5)
    assert [len(p) for p in parts] == [1] * 5
    with pytest.raises(StalesimError, match="stages: 6 stages requested.*5 blocks"):
        split_stages(model, stages=6)
    with pytest.raises(StalesimError, match="exactly one"):
        split_stages(model, ppv=[2], stages=2)


def test_default_ppv_balances_flops() -> None:
    model = build_model("resnet20")
    flops = block_flops(model)
    assert len(flops) == 11 and all(f > 0 for f in flops)
    assert model._block_flops == flops  # cached
    ppv = default_ppv(model, 2)
    (cut,) = ppv_to_cuts(model, ppv)
    left, right = sum(flops[:cut]), sum(flops[cut:])
    # optimal: no other single cut has a smaller max
    best = min(max(sum(flops[:c]), sum(flops[c:])) for c in range(1, 11))
    assert max(left, right) == best
    assert default_ppv(model, 1) == []


def test_min_max_simple_and_comm_memory() -> None:
    p = min_max_partition([1, 1, 1, 1], 2)
    assert p.cuts == [2] and p.stage_costs == [2, 2] and p.bottleneck == 2
    # communication paid by the stage before the cut shifts the optimum
    p = min_max_partition([1, 1, 1, 1], 2, comm=[0, 5, 0])
    assert p.cuts == [1] and p.stage_costs == [1.0, 3.0]
    p = min_max_partition([4, 1, 1, 1, 1], 2, memory=[1, 1, 1, 1, 10], memory_limit=11)
    assert p.cuts == [3] and p.stage_memory == [3, 11] and p.stage_costs == [6, 2]
    with pytest.raises(StalesimError, match="memory_limit: no partition"):
        min_max_partition([1, 1, 1], 2, memory=[5, 5, 5], memory_limit=6)
    with pytest.raises(StalesimError, match=r"costs\[1\]: must be a finite number >= 0"):
        min_max_partition([1, -1], 1)
    with pytest.raises(StalesimError, match="stages: 3 stages requested"):
        min_max_partition([1, 1], 3)
    with pytest.raises(StalesimError, match="comm: expected 2 values"):
        min_max_partition([1, 1, 1], 2, comm=[1])


def test_min_max_memory_limit_changes_answer() -> None:
    costs = [1, 1, 1, 1]
    mem = [10, 1, 1, 1]
    assert min_max_partition(costs, 2, memory=mem).cuts == [2]
    p = min_max_partition(costs, 2, memory=mem, memory_limit=10)
    assert p.cuts == [1] and p.stage_memory == [10, 3] and p.bottleneck == 3


def test_ppv_with_weight_layers() -> None:
    p = min_max_partition([1, 2, 2, 2, 1], 2, weight_layers=[1, 2, 2, 2, 1])
    assert p.cuts == [2] and p.ppv == [3]  # tie 5/5 between cuts 2 and 3: earliest wins
    # a block without weight layers never starts a stage
    p = min_max_partition([1, 5, 1, 1], 2, weight_layers=[1, 0, 1, 1])
    assert p.cuts == [2] and p.ppv == [1] and p.stage_costs == [6, 2]


def _brute(costs, stages, mem, limit, comm):
    n = len(costs)
    best = math.inf
    for cuts in itertools.combinations(range(1, n), stages - 1):
        b = [0, *cuts, n]
        ok = True
        worst = 0.0
        for s in range(stages):
            i, j = b[s], b[s + 1]
            c = sum(costs[i:j]) + (comm[j - 1] if j < n else 0.0)
            if limit is not None and sum(mem[i:j]) > limit:
                ok = False
            worst = max(worst, c)
        if ok:
            best = min(best, worst)
    return best


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    n=st.integers(1, 10),
)
def test_min_max_matches_brute_force(data, n: int) -> None:
    costs = data.draw(st.lists(st.integers(0, 50).map(float), min_size=n, max_size=n))
    stages = data.draw(st.integers(1, n))
    comm = data.draw(st.lists(st.integers(0, 10).map(float), min_size=n - 1, max_size=n - 1))
    mem = data.draw(st.lists(st.integers(1, 20).map(float), min_size=n, max_size=n))
    limit = data.draw(st.one_of(st.none(), st.integers(1, 80).map(float)))
    expected = _brute(costs, stages, mem, limit, comm)
    if expected == math.inf:
        with pytest.raises(StalesimError):
            min_max_partition(costs, stages, memory=mem, memory_limit=limit, comm=comm)
        return
    p = min_max_partition(costs, stages, memory=mem, memory_limit=limit, comm=comm)
    assert p.bottleneck == pytest.approx(expected)
    assert len(p.cuts) == stages - 1 and p.cuts == sorted(set(p.cuts))
    if limit is not None:
        assert all(m <= limit for m in p.stage_memory)  # type: ignore[union-attr]
    assert sum(p.stage_costs) == pytest.approx(
        sum(costs) + sum(comm[c - 1] for c in p.cuts)
    )


def test_default_partition_works_on_a_float64_model():
    """split_stages(stages=S) must not depend on the model's dtype (FLOPs don't)."""
    from stalesim.workloads.partition import split_stages
    from stalesim.workloads.zoo import build_model

    m64 = build_model("lenet5", seed=0).double()
    m32 = build_model("lenet5", seed=0)
    assert [len(s) for s in split_stages(m64, stages=3)] == [len(s) for s in split_stages(m32, stages=3)]


# ---------------------------------------------------------------- the bisection path (huge inputs)
def _both(*args, **kw):
    """(DP result, bisection result) of the same problem (or the error each raises)."""
    import stalesim.workloads.partition as part

    out = []
    for budget in (10**18, 0):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(part, "DP_BUDGET", budget)
            try:
                p = min_max_partition(*args, **kw)
                out.append((p.cuts, p.ppv, p.stage_costs, p.stage_memory))
            except StalesimError as exc:
                out.append(("error", str(exc)))
    return out


@settings(max_examples=300, deadline=None, derandomize=True)
@given(data=st.data(), n=st.integers(1, 12))
def test_bisection_equals_the_dp_ties_included(data, n: int) -> None:
    """Large problems take bisection + greedy; it must give the DP's answer exactly: the
    same bottleneck and the same cuts (ties broken alike), with memory limits and blocks
    without weight layers. Small integer costs make ties common."""
    cost = st.one_of(st.integers(0, 4).map(float), st.sampled_from([0.1, 0.2, 0.3, 0.7, 1e-3]),
                     st.floats(0, 10, allow_nan=False))
    costs = data.draw(st.lists(cost, min_size=n, max_size=n))
    stages = data.draw(st.integers(1, n))
    mem = data.draw(st.one_of(st.none(), st.lists(st.integers(0, 5).map(float), min_size=n, max_size=n)))
    limit = data.draw(st.none() if mem is None else st.one_of(st.none(), st.integers(1, 15).map(float)))
    wl = data.draw(st.one_of(st.none(), st.lists(st.sampled_from([0, 1, 1, 2]), min_size=n, max_size=n)))
    dp, fast = _both(costs, stages, memory=mem, memory_limit=limit, weight_layers=wl)
    assert dp == fast


def test_large_partitions_are_exact_and_do_not_take_the_dp() -> None:
    """Bad-input probe: 10^4 layers into 100 stages hung in the O(S L^2) DP."""
    import stalesim.workloads.partition as part

    n, S = 10_000, 100
    p = min_max_partition([1.0] * n, S)
    assert p.cuts == list(range(100, n, 100)) and p.bottleneck == 100.0
    # one heavy layer: it gets a stage of its own, the rest is balanced around it
    costs = [1.0] * n
    costs[5000] = 500.0
    q = min_max_partition(costs, S)
    assert q.bottleneck == 500.0 and 5000 in q.cuts and 5001 in q.cuts
    assert S * n * n > part.DP_BUDGET


def test_large_partition_with_comm_is_refused_not_hung() -> None:
    with pytest.raises(StalesimError, match=r"communication costs takes O\(S x L\^2\)"):
        min_max_partition([1.0] * 10_000, 100, comm=[0.5] * 9_999)


def test_overflowing_totals_are_errors() -> None:
    with pytest.raises(StalesimError, match="costs: the total is not a finite number"):
        min_max_partition([1e308, 1e308], 2)


def test_ppv_to_cuts_on_a_long_profile_uses_the_last_boundary() -> None:
    wl = [1, 0, 0, 1, 2, 0, 1] * 10_000
    cuts = weights_ppv_to_cuts(wl, [1, 2, 40_000])
    cum = list(itertools.accumulate(wl))
    assert cuts[0] == 3 and cuts[1] == 4  # after the zero-weight blocks that follow layer 1
    assert cum[cuts[2] - 1] == 40_000 and wl[cuts[2]] > 0
    with pytest.raises(StalesimError, match=r"ppv\[0\]: 3 would split block 4"):
        weights_ppv_to_cuts(wl, [3])
