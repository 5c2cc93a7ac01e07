"""What a checkpoint keeps of a :class:`~stalesim.runtime.stage.StageRuntime`, and how a resume
puts it back: the part the emulator's and the executor's checkpoints share.

Autograd graphs cannot be saved, so each in-flight forward is stored as its input and the
weights it read, and a resume recomputes it (and its loss, if LOSS had run) with those
weights; a split backward whose ``I`` ran gets its saved gradients back for ``W``. The
recomputation runs BatchNorm in training mode, so the buffers are put back afterwards. On
the CPU the recomputation is bitwise identical, so a resumed run's losses equal the
uninterrupted run's. Only the runtime's public attributes and methods are used here: the file formats
(and what else each consumer saves) stay in ``stalesim.emulator.checkpoint`` and
``stalesim.executor.checkpoint``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import torch

from stalesim.runtime.stage import StageRuntime
from stalesim.schedule import Action, Kind

#: ``(worker, stage, batch, micro) -> labels`` of an in-flight loss to recompute on resume.
LossLabels = Callable[[int, int, int, "int | None"], torch.Tensor]


def runtime_state(rt: StageRuntime) -> dict[str, Any]:
    """One runtime's checkpoint entry: its state, its in-flight forwards, the versions it
    used so far and its stash peak."""
    return {"state": stage_state_dict(rt), "inflight": rt.inflight_state(),
            "versions_used": list(rt.versions_used), "stash_peak": rt.stash_peak_bytes}


def stage_state_dict(rt: StageRuntime) -> dict[str, Any]:
    """Everything of a runtime but its in-flight graphs: weights, optimizer, version, stash,
    pending readers per version, gradient buffers and the mitigations' running delta."""
    return {
        "module": rt.module.state_dict(),
        "head": None if rt.head is None else rt.head.state_dict(),
        "optimizer": None if rt.optimizer is None else rt.opt.state_dict(),
        "version": rt.version,
        "stash": {v: [t.clone() for t in ws] for v, ws in rt.stash.items()},
        "need": dict(rt.need),
        "buffers": {t: [None if g is None else g.clone() for g in b] for t, b in rt.buffers.items()},
        "delta": None if rt.mit.delta is None else [d.clone() for d in rt.mit.delta],
    }


def load_stage_state(rt: StageRuntime, state: dict[str, Any]) -> None:
    """Put back :func:`stage_state_dict`'s ``state``; weights are copied in place, which keeps
    their storages (the version hooks' map from storage to parameter) valid. The stash and the
    gradient buffers are taken over, not copied (the runtime adds into its buffers in place),
    so ``state`` is consumed: it is read from a checkpoint file once per resume."""
    with torch.no_grad():
        for k, v in rt.module.state_dict().items():
            v.copy_(state["module"][k])
        if rt.head is not None:
            for k, v in rt.head.state_dict().items():
                v.copy_(state["head"][k])
    if rt.optimizer is not None and state["optimizer"] is not None:
        rt.opt.load_state_dict(state["optimizer"])
    rt.version = int(state["version"])
    rt.stash = {int(v): list(ws) for v, ws in state["stash"].items()}
    rt.need = Counter({int(k): int(c) for k, c in state["need"].items()})
    rt.buffers = {int(t): list(b) for t, b in state["buffers"].items()}  # taken over: ``state`` is consumed
    rt.mit.delta = state["delta"]


def restore_runtimes(entries: Sequence[tuple[tuple[int, int], StageRuntime, dict[str, Any]]],
                     loss_labels: LossLabels) -> None:
    """Put back ``(worker, stage), runtime, saved entry`` triples (:func:`runtime_state`'s).

    Every runtime's state is loaded before any graph is rebuilt, the graphs are rebuilt in
    ``entries`` order, batch then micro-batch within a runtime, and the BatchNorm buffers
    are restored last: the order both consumers have always resumed in."""
    for _key, rt, sv in entries:
        load_stage_state(rt, sv["state"])
        rt.versions_used = [tuple(x) for x in sv["versions_used"]]
        rt.stash_peak_bytes = sv["stash_peak"]
    for (w, s), rt, sv in entries:
        _rebuild_inflight(rt, w, s, sv["inflight"], loss_labels)
    with torch.no_grad():  # the recomputation ran BatchNorm in training mode
        for _key, rt, sv in entries:
            _copy_buffers(rt.module, sv["state"]["module"])
            if rt.head is not None:
                _copy_buffers(rt.head, sv["state"]["head"])


def _rebuild_inflight(rt: StageRuntime, w: int, s: int, inflight: dict[tuple[int, int | None], Any],
                      loss_labels: LossLabels) -> None:
    """Recompute each in-flight forward of one runtime with the weights it read."""
    for (t, m), rec in sorted(inflight.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        x = rec["x"].detach()
        if rec["x_requires_grad"]:
            x.requires_grad_(True)
        a = Action(Kind.F, s, t, m, w)
        rt.restore_forward(a, x, rec["weights"], rec["v_f"])
        if rec["has_loss"]:
            rt.loss(Action(Kind.LOSS, s, t, m, w), loss_labels(w, s, t, m))
        if "seg_grads" in rec:  # its I had run: waiting for W
            rt.restore_deferred(a, rec["seg_grads"], rec["v_b"], rec.get("grad_out"))


def _copy_buffers(module: torch.nn.Module, saved: dict[str, torch.Tensor]) -> None:
    for name, buf in module.named_buffers():
        buf.copy_(saved[name])
