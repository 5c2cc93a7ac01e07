"""stalesim.sim.rotation_cost: basis rotation's price in the simulator: each stage's
optimizer bytes are the runtime's own count (StageOptimizer.state_nbytes on the same
stage), the update grows by the FLOPs at the stage's forward rate, and ``simulate
--basis-rotation`` shows both; a profile of another model variant is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stalesim.errors import StalesimError
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.optim import StageOptimizer
from stalesim.runtime.rotation import rotation_flops
from stalesim.sim.model import NS, resolve_cuts, stage_costs
from stalesim.sim.rotation_cost import with_basis_rotation
from stalesim.workloads.profile import load_profile
from stalesim.workloads.zoo import build_model

ROOT = Path(__file__).resolve().parents[2]
GPT = ROOT / "docs/results/schedules_gptchar_h100/profile_mb64.json"
LENET = ROOT / "stalesim/data/shape_profiles/lenet5_b8_shape.json"


def _costs(path: Path, S: int):
    prof = load_profile(str(path))
    cuts, ppv = resolve_cuts(prof, S, None, prof.batch_size)
    return prof, stage_costs(prof, cuts, batch_size=prof.batch_size, action_batch=prof.batch_size, ppv=ppv)


@pytest.mark.parametrize("path,S", [(GPT, 4), (LENET, 3)])
def test_optimizer_bytes_are_the_runtimes_count(path, S):
    prof, costs = _costs(path, S)
    out = with_basis_rotation(costs, prof, freq=10, max_dim=10_000)
    model = build_model(prof.model)
    cfg = TrainConfig(model=prof.model, optimizer="adamw", basis_rotation=True, iterations=1,
                      dataset="shakespeare" if prof.model == "gpt-char" else "mnist").check()
    for s, (lo, hi) in enumerate(costs.layer_ranges):
        params = [p for i in range(lo, hi) for p in model.blocks[i].parameters()]
        assert out.optimizer_bytes[s] == StageOptimizer(params, cfg).state_nbytes()
        flops = sum(rotation_flops(tuple(p.shape), 10) for p in params if p.ndim == 2)
        at = prof.at_batch_size(costs.action_batch).layers[lo:hi]
        rate = sum(lp.flops for lp in at) / sum(lp.forward_s for lp in at)
        assert out.u_ns[s] - costs.u_ns[s] == pytest.approx(flops / rate * NS, abs=1)
    assert out.seq_ns - costs.seq_ns == sum(out.u_ns) - sum(costs.u_ns)
    # less often refreshed: cheaper per update, the same memory
    rare = with_basis_rotation(costs, prof, freq=100, max_dim=10_000)
    assert rare.optimizer_bytes == out.optimizer_bytes and all(a <= b for a, b in zip(rare.u_ns, out.u_ns))


def test_a_profile_of_another_variant_is_refused(tmp_path):
    d = json.loads(LENET.read_text())
    d["layers"][-1]["param_bytes"] += 4  # e.g. another number of classes
    bad = tmp_path / "p.json"
    bad.write_text(json.dumps(d))
    prof, costs = _costs(bad, 2)
    with pytest.raises(StalesimError, match="^basis_rotation: block 4"):
        with_basis_rotation(costs, prof, freq=10, max_dim=10_000)


def test_simulate_shows_the_cost(capsys):
    from stalesim.cli import main

    def run(*extra):
        assert main(["simulate", "--profile", str(GPT), "--schedule", "pipedream", "--stages", "4",
                     "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)

    plain, rot = run(), run("--basis-rotation")
    assert all(b > a for a, b in zip(plain["peak_memory_bytes"], rot["peak_memory_bytes"]))
    assert rot["iteration_time_s"] > plain["iteration_time_s"]
    extra = rot["basis_rotation"]  # what the mitigation adds, per stage
    assert "basis_rotation" not in plain and len(extra["factor_bytes"]) == 4
    assert all(b > 0 for b in extra["factor_bytes"]) and all(x > 0 for x in extra["update_extra_s"])
    assert [o - f for o, f in zip(extra["optimizer_state_bytes"], extra["factor_bytes"])] == \
        [2 * p for p in (924160, 793088, 793088, 859648)]  # Adam's two moments of the stages' parameters
    assert main(["simulate", "--profile", str(GPT), "--schedule", "pipedream", "--stages", "4", "-P", "2",
                 "--basis-rotation"]) == 2
    assert capsys.readouterr().err.strip() == \
        "stalesim: error: basis_rotation: priced for one pipeline; drop --replicas/--node"
