"""A Hugging Face model in a user's loop (skipped without the optional transformers package).

No emulator runs a Hugging Face model, so the reference here is the definition itself, for
a stashing schedule (pipedream: the backward reads the forward's version): keep every
version of the whole model, and at step t load version v_F(s, t) of each stage into a copy,
run forward and backward there, and step the live model with those gradients.
"""

from __future__ import annotations

import copy

import pytest
import torch

from stalesim.errors import StalesimError
from stalesim.inject import StalePipeline

transformers = pytest.importorskip("transformers")

STEPS, S = 6, 3


def _gpt2(tie: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=32, n_positions=16, n_embd=16, n_layer=2, n_head=2,
                                  tie_word_embeddings=tie, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(cfg).double().train()


SPLIT = [["transformer.wte", "transformer.wpe", "transformer.h.0"], ["transformer.h.1"],
         ["transformer.ln_f", "lm_head"]]


def _batch(t: int) -> torch.Tensor:
    return torch.randint(0, 32, (4, 12), generator=torch.Generator().manual_seed(t))


def test_gpt2_follows_the_version_table_exactly():
    net = _gpt2(tie=False)
    ref_net = copy.deepcopy(net)
    pipe = StalePipeline(net, "pipedream", steps=STEPS, split=SPLIT)
    opt = pipe.attach(torch.optim.AdamW(net.parameters(), lr=1e-2))
    ref_opt = torch.optim.AdamW(ref_net.parameters(), lr=1e-2)
    names = pipe.split.names
    history = [dict((n, p.detach().clone()) for n, p in ref_net.named_parameters())]
    for t in range(STEPS):
        ids = _batch(t)
        loss = net(input_ids=ids, labels=ids).loss  # the user's loop: the model's own loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        # the reference: a copy holding each stage's version v_F(s, t)
        old = copy.deepcopy(ref_net)
        with torch.no_grad():
            params = dict(old.named_parameters())
            for s in range(S):
                for n in names[s]:
                    params[n].copy_(history[pipe.table.v_f(s, t)][n])
        ref_loss = old(input_ids=ids, labels=ids).loss
        ref_loss.backward()
        for (_, p), (_, q) in zip(ref_net.named_parameters(), old.named_parameters()):
            p.grad = q.grad
        ref_opt.step()
        ref_opt.zero_grad()
        history.append(dict((n, p.detach().clone()) for n, p in ref_net.named_parameters()))
        assert loss.item() == ref_loss.item()
    assert all(torch.equal(p, q) for p, q in zip(net.parameters(), ref_net.parameters()))
    assert pipe.versions_match() and pipe.table.staleness() == [2, 1, 0]


def test_gpt2_tied_embeddings_across_stages_are_one_line():
    with pytest.raises(StalesimError, match="'lm_head.weight' of stage 2 is also 'transformer.wte.weight' of "
                                            "stage 0; a parameter shared between two stages is not supported"):
        StalePipeline(_gpt2(tie=True), "pipedream", steps=STEPS, split=SPLIT)
    with pytest.raises(StalesimError, match="shared between two stages"):
        StalePipeline(_gpt2(tie=True), "pipedream", steps=STEPS, stages=S)
