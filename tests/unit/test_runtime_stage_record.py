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


def test_a_buffer_is_added_into_in_place_and_never_reallocated():
    """The first gradient becomes the buffer itself; later ones add into that storage, so no
    third tensor for the sum is ever made (peak: the buffer and one new gradient)."""
    g0 = torch.ones(1000)
    bufs: dict[int, list[torch.Tensor | None]] = {}
    accumulate(bufs, 0, [g0])
    ptr = g0.untyped_storage().data_ptr()
    assert bufs[0][0].untyped_storage().data_ptr() == ptr  # kept, not copied
    for k in range(3):
        accumulate(bufs, 0, [torch.full((1000,), float(k))])
    assert bufs[0][0].untyped_storage().data_ptr() == ptr
    assert torch.equal(bufs[0][0], torch.full((1000,), 1.0 + 0 + 1 + 2))


def test_a_gradient_autograd_shares_is_copied_before_it_is_added_into():
    """``a + b``: autograd returns one tensor as both gradients, and for a parameter added
    to the output it returns the incoming gradient itself; adding into either in place
    would change the other gradient, or the gradient sent on."""
    a = torch.zeros(3, requires_grad=True)
    b = torch.zeros(3, requires_grad=True)
    x = torch.zeros(3, requires_grad=True)
    gy = torch.ones(3)
    ga, gb, gx = torch.autograd.grad(a + b + x, [a, b, x], gy)
    assert ga.untyped_storage().data_ptr() == gb.untyped_storage().data_ptr()  # the case itself
    bufs: dict[int, list[torch.Tensor | None]] = {}
    accumulate(bufs, 0, [ga, gb], [gx, gy])
    accumulate(bufs, 0, [torch.full((3,), 2.0), torch.full((3,), 5.0)])
    assert torch.equal(bufs[0][0], torch.full((3,), 3.0)) and torch.equal(bufs[0][1], torch.full((3,), 6.0))
    assert torch.equal(gx, torch.ones(3)) and torch.equal(gy, torch.ones(3))  # untouched


def test_a_gradient_that_is_a_view_of_a_borrowed_tensor_is_copied():
    gy = torch.ones(4)
    bufs: dict[int, list[torch.Tensor | None]] = {}
    accumulate(bufs, 1, [gy[:2], torch.ones(2)], [gy])
    accumulate(bufs, 1, [torch.ones(2), torch.ones(2)])
    assert torch.equal(gy, torch.ones(4))
    assert torch.equal(bufs[1][0], torch.full((2,), 2.0)) and torch.equal(bufs[1][1], torch.full((2,), 2.0))


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
