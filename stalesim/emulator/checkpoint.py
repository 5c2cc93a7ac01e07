"""Exact checkpoints of a running emulation (atomic: tmp file + ``os.replace``).

Autograd graphs cannot be saved, so a checkpoint stores, besides weights,
optimizer state, weight-version stash, gradient buffers and the hand-off
queues, each **in-flight forward's input and the weight tensors it read**
(the emulator reserves those versions in advance: the schedule says which
forwards will be in flight at each checkpoint). Resume rebuilds every in-flight
graph by recomputing that forward with those weights (and its loss, if LOSS had
run), then restores the BatchNorm buffers the recomputation touched. On CPU the
recomputation is bitwise identical, so a resumed run produces bitwise the same
losses as an uninterrupted one (tested).

A checkpoint holds only tensors and plain data and is read with
``weights_only=True`` through the bounded reader of :mod:`stalesim.checkpoint_io`
(size from the run's length, nesting): a file that is not ours is a one-line
error within a second, never code execution.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from stalesim.atomic import torch_save_atomic
from stalesim.checkpoint_io import brief, mismatch, read_checkpoint, require_keys
from stalesim.errors import StalesimError
from stalesim.schedule import Action, Kind

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.emulator.replay import Emulator

FORMAT = 1
KEYS = ("format", "config", "checkpoint_every", "run", "runtimes", "acts", "grads", "batch_left",
        "peak_inflight")


def _rows(emu: Emulator) -> list[list[Any]]:
    """The runtimes as checkpoints store them: one list per worker, in stage order."""
    return [[emu.rts[(w, s)] for s in range(emu.S)] for w in range(emu.P)]


def save(emu: Emulator, path: Path) -> None:
    st = emu.state
    run = dataclasses.asdict(st)
    run["elapsed"] = emu._now()
    state: dict[str, Any] = {
        "format": FORMAT,
        "config": emu.checkpoint_config(),
        "checkpoint_every": emu.checkpoint_every,
        "run": run,
        # one row per worker, stage order (the format since the first checkpoint)
        "runtimes": [[{"state": rt.state_dict(), "inflight": rt.inflight_state(),
                       "versions_used": list(rt.versions_used), "stash_peak": rt.stash_peak_bytes}
                      for rt in row] for row in _rows(emu)],
        "acts": emu._acts,
        "grads": emu._grads,
        "batch_left": emu._batch_left,
        "peak_inflight": emu.peak_inflight_bytes,
    }
    torch_save_atomic(state, path)


def load(emu: Emulator, path: Path) -> None:
    # bounded by what this run could have written: its length, its runs when batched, its tensors
    tensors = sum(len(rt.module.state_dict()) + (0 if rt.head is None else len(rt.head.state_dict()))
                  for rt in emu.rts.values())
    state = read_checkpoint(path, what="resume", map_location=emu.device, steps=emu.total,
                            runs=getattr(emu, "K", 1), tensors=tensors)
    if state.get("format") != FORMAT:
        raise StalesimError(f"resume: checkpoint {path} has format {brief(state.get('format'))}, "
                            f"expected {FORMAT}")
    require_keys(state, KEYS, path, "resume")
    if not isinstance(state["config"], dict):
        raise StalesimError(f"resume: {path} is not a stalesim checkpoint (config is not a dict)")
    mine = emu.checkpoint_config()
    for k, v in state["config"].items():
        if mine.get(k) != v:
            raise StalesimError(f"resume: {str(k)[:60]} is {brief(mine.get(k))} but the checkpoint was made "
                                f"with {brief(v)}")
    if state["checkpoint_every"] != emu.checkpoint_every:
        raise StalesimError(
            f"resume: checkpoint_every is {emu.checkpoint_every} but the checkpoint was made with "
            f"{brief(state['checkpoint_every'])} (it decides which weight versions are kept)")
    try:
        _apply(emu, state)
    except StalesimError:
        raise
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError, AttributeError) as exc:
        raise mismatch(path, "resume", exc) from None


def _apply(emu: Emulator, state: dict[str, Any]) -> None:
    run = state["run"]
    emu.state = type(emu.state)(**run)
    saved_modules = []
    for row, srow in zip(_rows(emu), state["runtimes"]):
        for rt, sv in zip(row, srow):
            rt.load_state_dict(sv["state"])
            rt.versions_used = list(sv["versions_used"])
            rt.stash_peak_bytes = sv["stash_peak"]
            saved_modules.append((rt, sv["state"]))
    # rebuild the in-flight graphs: recompute each forward with the weights it read
    for r, (row, srow) in enumerate(zip(_rows(emu), state["runtimes"])):
        for s, (rt, sv) in enumerate(zip(row, srow)):
            for (t, m), rec in sorted(sv["inflight"].items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
                x = rec["x"]
                if rec["x_requires_grad"]:
                    x = x.detach().requires_grad_(True)
                a = Action(Kind.F, s, t, m, r)
                rt.restore_forward(a, x, rec["weights"], rec["v_f"])
                if rec["has_loss"]:
                    labels = emu._slice(emu._labels(t), r, m)
                    rt.loss(Action(Kind.LOSS, s, t, m, r), labels)
                if "seg_grads" in rec:  # its I had run: waiting for W
                    rt.restore_deferred(a, rec["seg_grads"], rec["v_b"],
                                       rec.get("grad_out"))
    # the recomputation ran BatchNorm in training mode: put its buffers back
    with torch.no_grad():
        for rt, sv in saved_modules:
            for name, buf in rt.module.named_buffers():
                buf.copy_(sv["module"][name])
            if rt.head is not None:
                for name, buf in rt.head.named_buffers():
                    buf.copy_(sv["head"][name])
    emu._acts = state["acts"]
    emu._grads = state["grads"]
    emu._batch_left = state["batch_left"]
    emu.peak_inflight_bytes = state["peak_inflight"]
    for w, s, v in emu._ck_release.get(emu.state.index - 1, []):
        emu.rts[(w, s)].release(v)
