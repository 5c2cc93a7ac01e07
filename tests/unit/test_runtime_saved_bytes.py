"""SavedBytes: a hook-free forward's and a loss's saved bytes counted once per shape, under
keys no storage has."""

from __future__ import annotations

import torch
from torch import nn

from stalesim.runtime.saved_bytes import SavedBytes, record_storages, segment_storages


def test_plain_forward_counts_the_first_forward_of_a_shape_and_reuses_it():
    torch.manual_seed(0)
    mod = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    ptrs = {int(p.untyped_storage().data_ptr()): i for i, p in enumerate(mod.parameters())}
    sb = SavedBytes(-100, ptrs)
    x = torch.randn(2, 8)
    for _ in range(2):  # counted, then from the count
        y, io = sb.plain_forward(lambda: mod(x), x, None)
        # input 64 B, output 32 B, and the ReLU output (128 B) the second Linear saves
        assert sorted(io.values()) == [32, 64, 128]
    assert [k for k in io if k < 0] == [-102]  # one fresh key per record
    assert y.shape == (2, 4)


def test_the_loss_count_excludes_the_record_and_the_labels():
    sb = SavedBytes(0, {})
    out = torch.randn(2, 4, requires_grad=True)
    labels = torch.tensor([1, 2])
    storages = {int(out.untyped_storage().data_ptr()): 32}
    loss = sb.loss(lambda: nn.functional.cross_entropy(out, labels), out, labels, storages)
    assert loss.shape == ()
    assert storages[-1] == 32 + 4  # log-softmax and nll_loss's total weight


def test_record_storages_adds_io_and_kept_module_outputs_once():
    x, y, seg = torch.zeros(2), torch.zeros(3), torch.zeros(5)
    seen = record_storages({}, x, y, [(0, seg), (1, seg[1:])])
    assert sorted(seen.values()) == [8, 12, 20]
    segment_storages(seen, None)
    assert len(seen) == 3
