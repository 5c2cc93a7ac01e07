"""The in-flight record and the per-batch gradient buffer of a stage runtime."""

from __future__ import annotations

import pytest
import torch

from stalesim.runtime.stage_record import Inflight, accumulate
from stalesim.schedule import Action, Kind


def test_accumulate_sums_into_one_buffer_per_batch_keeping_missing_gradients_none():
    bufs: dict[int, list[torch.Tensor | None]] = {}
    accumulate(bufs, 3, [torch.ones(2), None])
    accumulate(bufs, 3, [torch.ones(2), torch.full((1,), 5.0)])
    accumulate(bufs, 3, [None, None])
    assert torch.equal(bufs[3][0], torch.full((2,), 2.0))
    assert torch.equal(bufs[3][1], torch.full((1,), 5.0))


def test_a_backward_starts_from_the_loss_or_the_output_gradient():
    x = torch.zeros(2, requires_grad=True)
    rec = Inflight(x=x, y=x * 2, leaves=[], v_f=0)
    a = Action(Kind.B, 0, 0)
    with pytest.raises(RuntimeError, match="LOSS must run before B"):
        rec.backward_start(None, a, "B")
    g = torch.ones(2)
    assert rec.backward_start(g, a, "B") == (rec.y, g)
    rec.loss = rec.y.sum()
    assert rec.backward_start(None, a, "B") == (rec.loss, None)


def test_the_checkpoint_entry_reads_version_v_f_unless_predicted_and_keeps_a_pending_w():
    x = torch.zeros(2, requires_grad=True)
    w = [torch.ones(2)]
    rec = Inflight(x=x, y=x * 2, leaves=w, v_f=4)
    entry = rec.checkpoint_entry(lambda v: [torch.full((2,), float(v))])
    assert list(entry) == ["x", "x_requires_grad", "v_f", "weights", "has_loss"]
    assert entry["x_requires_grad"] and not entry["has_loss"]
    assert torch.equal(entry["weights"][0], torch.full((2,), 4.0))
    rec.predicted, rec.seg_grads, rec.v_b = True, [None], 3
    entry = rec.checkpoint_entry(lambda v: [])
    assert torch.equal(entry["weights"][0], w[0])
    assert entry["seg_grads"] == [None] and entry["v_b"] == 3 and entry["grad_out"] is None
