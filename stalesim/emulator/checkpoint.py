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

What it reads of an emulation is the :class:`Checkpointable` interface (the replay
engine's public attributes and methods), so the engine's insides can change without
this module following.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import torch

from stalesim.atomic import torch_save_atomic
from stalesim.checkpoint_io import brief, mismatch, read_checkpoint, require_keys
from stalesim.emulator.state import Handoff, RunState
from stalesim.errors import StalesimError
from stalesim.runtime.stage import StageRuntime
from stalesim.runtime.stage_checkpoint import restore_runtimes, runtime_state

FORMAT = 1
KEYS = ("format", "config", "checkpoint_every", "run", "runtimes", "acts", "grads", "batch_left",
        "peak_inflight")


class Checkpointable(Protocol):
    """What a checkpoint saves and restores of an emulation (both emulators are one).

    ``state`` and ``handoff`` are restored in place (the engine's collaborators hold them);
    ``runs``: the runs trained at once (bounds the file's size)."""

    runs: int
    S: int
    P: int
    total: int
    device: torch.device
    checkpoint_every: int
    peak_inflight_bytes: int

    @property
    def state(self) -> RunState[Any, Any]: ...

    @property
    def handoff(self) -> Handoff: ...

    @property
    def rts(self) -> Mapping[tuple[int, int], StageRuntime]: ...

    def now(self) -> float: ...

    def checkpoint_config(self) -> dict[str, Any]: ...

    def loss_labels(self, t: int, worker: int, micro: int | None) -> torch.Tensor: ...

    def release_reserved(self, index: int) -> None: ...


def _rows(emu: Checkpointable) -> list[list[Any]]:
    """The runtimes as checkpoints store them: one list per worker, in stage order."""
    return [[emu.rts[(w, s)] for s in range(emu.S)] for w in range(emu.P)]


def save(emu: Checkpointable, path: Path) -> None:
    run = dataclasses.asdict(emu.state)
    run["elapsed"] = emu.now()
    hand = emu.handoff
    state: dict[str, Any] = {
        "format": FORMAT,
        "config": emu.checkpoint_config(),
        "checkpoint_every": emu.checkpoint_every,
        "run": run,
        # one row per worker, stage order (the format since the first checkpoint)
        "runtimes": [[runtime_state(rt) for rt in row] for row in _rows(emu)],
        "acts": hand.acts,
        "grads": hand.grads,
        "batch_left": hand.batch_left,
        "peak_inflight": emu.peak_inflight_bytes,
    }
    torch_save_atomic(state, path)


def load(emu: Checkpointable, path: Path) -> None:
    # bounded by what this run could have written: its length, its runs when batched, its tensors
    tensors = sum(len(rt.module.state_dict()) + (0 if rt.head is None else len(rt.head.state_dict()))
                  for rt in emu.rts.values())
    state = read_checkpoint(path, what="resume", map_location=emu.device, steps=emu.total,
                            runs=emu.runs, tensors=tensors)
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


def _apply(emu: Checkpointable, state: dict[str, Any]) -> None:
    emu.state.restore(state["run"])
    entries = [((w, s), rt, sv) for w, (row, srow) in enumerate(zip(_rows(emu), state["runtimes"]))
               for s, (rt, sv) in enumerate(zip(row, srow))]
    restore_runtimes(entries, lambda w, s, t, m: emu.loss_labels(t, w, m))
    emu.handoff.restore(acts=state["acts"], grads=state["grads"], batch_left=state["batch_left"])
    emu.peak_inflight_bytes = state["peak_inflight"]
    emu.release_reserved(emu.state.index - 1)
