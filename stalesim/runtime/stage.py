"""StageRuntime: what F / LOSS / B / U do to the tensors of one (worker, stage).

Shared by the emulator (all stages in one process) and the executor (one stage
per rank); only the transport of activations and gradients differs.

Weight versions, without model copies or parameter swapping:

* Forwards run on the **live** parameters (the IR guarantees v_F = current).
  They run under ``torch.autograd.graph.saved_tensors_hooks``: the pack hook
  replaces every saved tensor that shares storage with a stage parameter by a
  token ``(param index, size, stride, storage offset)``.
* A backward reads version v_B (``action.version``): the unpack hook turns each
  token into ``torch.as_strided`` of the tensor of version v_B of that parameter:
  the live tensor if v_B is current, else a stashed copy.
* ``U`` updates the live parameters **in place** with the stage's optimizer
  (:class:`~stalesim.runtime.optim.StageOptimizer`: SGD, Adam, AdamW or Muon) from the
  per-batch gradient buffer. Just before it overwrites version n, version n is
  cloned only if a pending backward (counted from the version table) still
  needs it; a stashed version is freed as soon as no pending backward needs it.
  Autograd's version-counter check never fires: the graph holds tokens, not the
  parameters.
* Gradients come from ``torch.autograd.grad(outputs, [input] + params, grad_out)``
  into a buffer per batch (never ``.grad``), because schedules such as 2BW
  interleave the backwards of two batches between updates.

Split backward (``I`` then a deferrable ``W``, the zero-bubble schedules), on
the (worker, stage)s whose schedule splits any backward: ``I`` walks the record's
autograd graph, finds for each parameter the nodes where its gradient leaves the
input-gradient part of the graph, asks autograd for the stage input's gradient
only (``retain_graph=True``) and keeps the gradient arriving at those nodes;
``W`` restarts autograd there and asks for the parameters only, which runs just
the weight-gradient kernels: nothing is computed twice
(:mod:`stalesim.workloads.graph_split` gives the method; any module structure
works). W unpacks the weight version its I read (the IR's v_W = v_B). A full
``B`` on such a stage is the ordinary backward. The arithmetic is the unsplit
backward's kernel by kernel.

The runtime keeps the version state (``version``, ``stash``, ``need``), the records and the
gradient buffers; its collaborators each own one mechanism: the saved-tensor hooks
(:mod:`stalesim.runtime.weight_tokens`), the records and buffers
(:mod:`stalesim.runtime.stage_record`), the memory accounting of records
(:mod:`stalesim.runtime.saved_bytes`) and the split backward
(:mod:`stalesim.runtime.split_backward`); the checkpoint state is
:mod:`stalesim.runtime.stage_checkpoint`'s.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from stalesim.runtime import split_backward
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.mitigations import Mitigations
from stalesim.runtime.muon import muon_mask
from stalesim.runtime.optim import StageOptimizer
from stalesim.runtime.saved_bytes import SavedBytes, record_storages
from stalesim.runtime.split_backward import Segments
from stalesim.runtime.stage_record import Inflight, accumulate
from stalesim.runtime.tasks import loss_fn, task_of
from stalesim.runtime.weight_tokens import WeightTokens, hooks_needed
from stalesim.schedule import Action, Schedule
from stalesim.schedule.liveness import backward_reads

_Inflight = Inflight  # the name stalesim.runtime.batched imports


class StageRuntime:
    """F/LOSS/B/U for one (worker, stage); see the module doc for the version mechanism.

    ``module``: the stage (``nn.Sequential``); ``head``: auxiliary head for
    ``local`` schedules (its parameters are part of the stage); ``lr_fn(t)``:
    base learning rate of the update fed by batch t (default ``cfg.lr``).
    """

    def __init__(
        self,
        module: nn.Module,
        *,
        stage: int,
        num_stages: int,
        schedule: Schedule,
        cfg: TrainConfig,
        device: torch.device | str | None = None,
        worker: int = 0,
        head: nn.Module | None = None,
        lr_fn: Callable[[int], float] | None = None,
    ) -> None:
        self.module = module
        self.head = head
        self.stage = stage
        self.num_stages = num_stages
        self.schedule = schedule
        self.cfg = cfg
        self.worker = worker
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.dtype = cfg.torch_dtype
        self.lr_fn = lr_fn or (lambda t: cfg.lr)
        self.is_loss_stage = schedule.local_loss or stage == num_stages - 1
        self.params: list[nn.Parameter] = [p for p in module.parameters() if p.requires_grad]
        self.names: list[str] = [n for n, p in module.named_parameters() if p.requires_grad]
        self._module_names = list(self.names)  # a functional call of the module takes these
        if head is not None:
            self.params += [p for p in head.parameters() if p.requires_grad]
            self.names += [f"head.{n}" for n, p in head.named_parameters() if p.requires_grad]
        self.tokens = WeightTokens(self.params)
        self.opt = self._make_optimizer()  # SGD/Adam/AdamW + optimizer-aware mitigations
        self.optimizer = self.opt.torch
        self.loss_fn = loss_fn(task_of(cfg))  # classification or next-token cross-entropy
        self.mit = self._make_mitigations()
        self.version = 0
        self.stash: dict[int, list[torch.Tensor]] = {}
        self.need: Counter[int] = backward_reads(schedule.table, stage, worker)
        self.inflight: dict[tuple[int, int | None], Inflight] = {}
        self.buffers: dict[int, list[torch.Tensor | None]] = {}
        self.versions_used: list[tuple[str, int]] = []
        self.stash_peak_bytes = 0
        # split backward (I / W): see the module doc
        self.split = (worker, stage) in schedule.split_stages()
        self.deferred: dict[tuple[int, int | None], Inflight] = {}
        if self.split and head is not None:
            raise RuntimeError("stalesim: a split backward needs a stage without an auxiliary head")
        self._captured: Segments | None = None  # set while a forward of a split stage runs
        # the hooks a hooked forward installs: attributes, so that one runtime's can be wrapped
        self._pack: Callable[[torch.Tensor], Any] = self.tokens.pack
        self._unpack: Callable[[Any], torch.Tensor] = self.tokens.unpack
        # the version hooks only where an update can fall between a forward and its
        # backward (or a mitigation changes the weights read); elsewhere autograd's own saved
        # parameters are the version the backward reads, bit for bit
        self.hooks_needed = hooks_needed(self.mit, schedule, stage, worker)
        self._bytes = SavedBytes(-((worker * num_stages + stage) << 40), self.tokens.param_ptrs)

    def _make_optimizer(self) -> Any:
        """The stage's optimizer (a batched runtime stacks K runs' optimizers)."""
        mask = muon_mask(self.module, output_stage=self.stage == self.num_stages - 1, head=self.head) \
            if self.cfg.optimizer == "muon" else None
        return StageOptimizer(self.params, self.cfg, muon_mask=mask)

    def _make_mitigations(self) -> Any:
        return Mitigations(self.cfg, self.schedule, self.stage, self.worker)

    # ---------------------------------------------------------------- weights
    def _bufs(self, base: Sequence[torch.Tensor]) -> list[torch.Tensor | None]:
        """Per-parameter step direction per unit lr (SGD: the momentum buffer) for a
        prediction that starts at the weights ``base``."""
        return self.opt.directions(base)

    def _backward_base(self, rec: Inflight, v_b: int) -> list[torch.Tensor]:
        """The weights a backward reads before any backward-side mitigation: its forward's
        predicted weights when the backward reuses them, else version v_B."""
        if rec.predicted and self.mit.backward_reuses_forward:
            return [w.detach() for w in rec.leaves]
        return self.weights_of(v_b)

    def _backward_weights(self, rec: Inflight, v_b: int, action: Action) -> list[torch.Tensor]:
        """The weights a backward of ``rec`` reads: :meth:`_backward_base`, then the
        backward-side mitigation, if any (its directions asked only when it predicts: Muon
        defines none, and Adam's cost a pass over the state)."""
        base = self._backward_base(rec, v_b)
        if self.mit.changes_backward:
            bufs = self._bufs(base) if self.mit.backward_predicts else [None] * len(base)
            base = self.mit.backward_weights(base, bufs, self.lr_fn(action.batch), action.batch, action.micro)
        return base

    def weights_of(self, version: int) -> list[torch.Tensor]:
        """The tensors of weight version ``version`` (live or stashed)."""
        if version == self.version:
            return [p.detach() for p in self.params]
        try:
            return self.stash[version]
        except KeyError:
            raise RuntimeError(
                f"stalesim: stage {self.stage} (worker {self.worker}) has no weight version "
                f"{version} (current {self.version}, stashed {sorted(self.stash)})"
            ) from None

    # ----------------------------------------------------------------- forward
    def forward(self, action: Action, x: torch.Tensor, *, weights: list[torch.Tensor] | None = None) -> torch.Tensor:
        """Run F(s, t, m) on stage input ``x``; the graph stays inside the runtime.

        ``x`` must require grad on stages > 0 (it is the leaf the input gradient is
        taken for). ``weights`` forces the weights read (checkpoint resume rebuilds
        an in-flight forward from the version it read).
        """
        if action.version is not None and action.version != self.version and weights is None:
            raise RuntimeError(
                f"stalesim: {action} reads version {action.version} but stage {self.stage} "
                f"is at version {self.version} (replay order broken)"
            )
        v_f = self.version if action.version is None else action.version
        predicted = False
        leaves: list[torch.Tensor] | None = None
        if weights is not None:
            leaves = [w.detach().requires_grad_(True) for w in weights]
            predicted = True
        elif self.mit.changes_forward:
            live = [p.detach() for p in self.params]
            pw = self.mit.forward_weights(live, self._bufs(live), self.lr_fn(action.batch), action.batch,
                                          action.micro)
            if pw is not None:
                leaves = [w.requires_grad_(True) for w in pw]
                predicted = True
        hooked = leaves is not None or self.hooks_needed or self.head is not None
        # split backward: a non-None list marks a split stage's record (I finds the cut on
        # the record's graph; nothing is appended here)
        segments: Segments | None = [] if self.split else None
        self._captured = segments
        try:
            if hooked:  # the saved storages are counted as they are packed
                seen: dict[int, int] = {}
                with self.tokens.packing(leaves, seen), \
                        torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                    y = _call(self.module, self._module_names, x, leaves)
                storages = record_storages(seen, x, y, segments)
            else:
                y, storages = self._bytes.plain_forward(lambda: self.module(x), x, segments)
        finally:
            self._captured = None
        self.inflight[_key(action)] = Inflight(
            x=x, y=y, leaves=leaves if leaves is not None else list(self.params), v_f=v_f,
            predicted=predicted, storages=storages, hooked=hooked, segments=segments,
        )
        self.versions_used.append((str(action.with_version(None)), v_f))
        return y

    def loss(self, action: Action, labels: torch.Tensor) -> torch.Tensor:
        """LOSS(s, t, m): micro-batch mean loss of the task divided by M; returns its value as a
        detached tensor on the device (a batched runtime: the ``[K]`` per-run values). Not read
        here: reading it would synchronise a GPU on every LOSS; the caller reads its values
        where it reports them (:mod:`stalesim.runtime.devio`)."""
        rec = self.inflight[_key(action)]
        out = rec.y
        if self.head is not None:
            leaves = rec.leaves[len(rec.leaves) - sum(1 for p in self.head.parameters() if p.requires_grad):]
            head_seen: dict[int, int] = {}
            with self.tokens.packing(rec.leaves if rec.predicted else None, head_seen), \
                    torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                if rec.predicted:
                    names = [n[len("head."):] for n in self.names if n.startswith("head.")]
                    out = torch.func.functional_call(self.head, dict(zip(names, leaves)), (out,), strict=False)
                else:
                    out = self.head(out)
            for k, v in head_seen.items():
                rec.storages.setdefault(k, v)
        M = self.schedule.microbatches if self.schedule.uses_micro else 1
        loss = self._bytes.loss(lambda: self.loss_fn(out, labels) / M, out, labels, rec.storages)
        return self._keep_loss(rec, loss)

    def _keep_loss(self, rec: Inflight, loss: torch.Tensor) -> torch.Tensor:
        """Store the loss the backward starts from; return its (detached) value."""
        rec.loss = loss
        return loss.detach()

    # ---------------------------------------------------------------- backward
    def backward(self, action: Action, grad_y: torch.Tensor | None) -> torch.Tensor | None:
        """B(s, t, m) reading weights of version v_B = ``action.version``.

        ``grad_y`` is None on a loss stage (backpropagate from the loss). The weight
        gradient is added to the batch-t buffer; returns the input gradient (None on
        stage 0 or when the input does not require grad).
        """
        rec = self.inflight.pop(_key(action))
        v_b = _backward_version(action, self.version, self.schedule)
        if rec.hooked:
            base: list[torch.Tensor] | None = self._backward_weights(rec, v_b, action)
        elif v_b != self.version:  # hooks_needed said no update falls between F and B
            raise RuntimeError(f"stalesim: {action} reads version {v_b}, stage is at {self.version} "
                               "(a hook-free forward cannot read an older version)")
        else:
            base = None
        outputs, grad_out = rec.backward_start(grad_y, action, "B")
        want_x = rec.x.requires_grad
        inputs = ([rec.x] if want_x else []) + rec.leaves
        with self.tokens.reading(base):  # None for hook-free records: nothing to unpack
            grads = torch.autograd.grad(outputs, inputs, grad_out, allow_unused=True)
        gx = grads[0] if want_x else None
        # the input gradient (sent on) and the incoming one may share a weight gradient's storage
        accumulate(self.buffers, action.batch, grads[1:] if want_x else grads, [gx, grad_out])
        self.versions_used.append((str(action.with_version(None)), v_b))
        self.release(v_b)
        return gx

    def reserve(self, version: int) -> None:
        """Keep ``version`` available (e.g. for a checkpoint) until :meth:`release`."""
        self.need[version] += 1

    def release(self, version: int) -> None:
        """One pending reader of ``version`` fewer; its stashed copy is freed with the last."""
        self.need[version] -= 1
        if self.need[version] <= 0:
            del self.need[version]
            self.stash.pop(version, None)

    # ---------------------------------------------- split backward (I / W)
    def backward_input(self, action: Action, grad_y: torch.Tensor | None) -> torch.Tensor | None:
        """I(s, t, m): the input gradient only, reading v_B = ``action.version``; the
        gradients where the parameters' part of the graph branches off are kept for
        :meth:`backward_weight`."""
        key = _key(action)
        rec = self.inflight.pop(key)
        if rec.segments is None:
            raise RuntimeError(f"stalesim: {action} on a stage whose forward kept no outputs")
        v_b = _backward_version(action, self.version, self.schedule)
        base = self._backward_weights(rec, v_b, action)
        if self.mit.changes_backward:
            rec.w_base = base
        outputs, grad_out = rec.backward_start(grad_y, action, "I")
        with self.tokens.reading(base):  # the cut is found on this record's own graph
            gx = split_backward.input_grad(rec, outputs, grad_out)
        rec.v_b = v_b
        rec.extra["grad_out"] = grad_out
        self.deferred[key] = rec
        self.versions_used.append((str(action.with_version(None)), v_b))
        return gx

    def backward_weight(self, action: Action) -> None:
        """W(s, t, m): the weight gradients of the backward whose I ran, added to the batch
        buffer; reads the version that I read."""
        rec = self.deferred.pop(_key(action))
        assert rec.v_b is not None
        base = rec.w_base if rec.w_base is not None else self.weights_of(rec.v_b)
        with self.tokens.reading(base):
            wgrads = split_backward.weight_grads(rec)
        grad_out = rec.extra.pop("grad_out", None)
        accumulate(self.buffers, action.batch, wgrads, [grad_out, *(rec.seg_grads or ())])
        self.versions_used.append((str(action.with_version(None)), rec.v_b))
        self.release(rec.v_b)

    def restore_deferred(self, action: Action, seg_grads: list[torch.Tensor | None], v_b: int,
                         grad_out: torch.Tensor | None = None) -> None:
        """On resume: the forward of ``action`` was just rebuilt (:meth:`restore_forward`,
        and its loss); its I had run before the checkpoint: keep it waiting for W."""
        key = _key(action)
        rec = self.inflight.pop(key)
        outputs, go = rec.backward_start(grad_out, action, "I")
        split_backward.restore_input_grad(rec, outputs, go, list(seg_grads))
        rec.v_b = v_b
        rec.extra["grad_out"] = grad_out
        self.deferred[key] = rec

    # ------------------------------------------------------------------ update
    def grads(self, batch: int) -> list[torch.Tensor]:
        """The batch-``batch`` gradient buffer (materialized; edit in place to all-reduce)."""
        buf = self.buffers.setdefault(batch, [None] * len(self.params))
        for i, g in enumerate(buf):
            if g is None:
                buf[i] = torch.zeros_like(self.params[i])
        return buf  # type: ignore[return-value]

    def lr_for(self, batch: int) -> float:
        return self.lr_fn(batch) * self.mit.lr_factor(batch)

    def update(self, action: Action) -> None:
        """U(s, t): optimizer step with the batch-t buffer; version n -> n + 1."""
        t = action.batch
        grads = self.grads(t)
        del self.buffers[t]
        n = self.version
        if self.need.get(n, 0) > 0 and n not in self.stash:
            self.stash[n] = [p.detach().clone() for p in self.params]
            self.stash_peak_bytes = max(self.stash_peak_bytes, self.stash_bytes())
        old = [p.detach().clone() for p in self.params] if self.mit.needs_old_weights else None
        if self.optimizer is not None:
            delayed = self._error_feedback_applies(t)
            self.opt.step(grads, self.lr_for(t), spike=self.mit.spike_coefficients(t), delayed=delayed)
        self.version = n + 1
        self.mit.record_step(old, [p.detach() for p in self.params])
        expected = self.schedule.table.upd.get((self.worker, self.stage, t))
        if expected is not None and expected != self.version:
            raise RuntimeError(f"stalesim: {action} produced version {self.version}, table says {expected}")
        self.versions_used.append((str(action), self.version))

    def _error_feedback_applies(self, batch: int) -> bool:
        """Whether the update fed by ``batch`` is delayed and error feedback is on."""
        return self.cfg.error_feedback and self.mit.batch_delay(batch) >= 1

    # ------------------------------------------------------------ bookkeeping
    def stash_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for ws in self.stash.values() for t in ws)

    def inflight_state(self) -> dict[tuple[int, int | None], dict[str, Any]]:
        """What rebuilds each in-flight forward: its input, the weights it read, and
        whether LOSS already ran. The weights of version v_F must still exist: a
        checkpointing caller :meth:`reserve`s them in advance (the schedule says
        which forwards are in flight at a checkpoint). ``torch.save`` stores tensors
        sharing a storage once."""
        return {key: rec.checkpoint_entry(self.weights_of)
                for key, rec in [*self.inflight.items(), *self.deferred.items()]}

    def restore_forward(self, action: Action, x: torch.Tensor, weights: list[torch.Tensor],
                        v_f: int) -> torch.Tensor:
        """Rebuild an in-flight forward on resume (recompute with the weights it read)."""
        y = self.forward(action.with_version(v_f), x, weights=[t.clone() for t in weights])
        self.versions_used.pop()  # the replayed F was logged before the checkpoint
        rec = self.inflight[_key(action)]
        rec.v_f = v_f
        rec.predicted = True
        return y


def _key(a: Action) -> tuple[int, int | None]:
    return (a.batch, a.micro)


def _call(module: nn.Module, names: list[str], x: torch.Tensor, leaves: list[torch.Tensor] | None) -> torch.Tensor:
    """The stage module on ``x``: with its own parameters, or with ``leaves`` in their place
    (a functional call; ``names``: the module's trainable parameters, in ``leaves`` order)."""
    if leaves is None:
        return module(x)
    mapping = dict(zip(names, leaves[:len(names)]))
    return torch.func.functional_call(module, mapping, (x,), strict=False)


def _backward_version(action: Action, current: int, schedule: Schedule) -> int:
    """The version v_B a backward reads (the current one when the action names none); under
    the latest-weights policy it must be the current one."""
    v_b = current if action.version is None else action.version
    if (not schedule.policy.backward_reads_forward_version and action.version is not None
            and v_b != current):
        raise RuntimeError(f"stalesim: {action} (latest policy) but stage is at version {current}")
    return v_b
