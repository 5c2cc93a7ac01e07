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
the (worker, stage)s whose schedule splits any backward: during the forward a
hook on every module that owns parameters (conv, linear, norm, ...) keeps that
module's output. ``I`` asks autograd for the gradient w.r.t. the stage input
*and* those outputs only (``torch.autograd.grad(y, [x, out_1, ...], g,
retain_graph=True)``): the backward runs down to the input, no weight gradient
is computed, and each parameter-owning module's output gradient g_j is kept.
``W`` then asks each such module for its weight gradients from its own output
(``torch.autograd.grad(out_j, params_j, g_j)``), which runs just that module's
weight-gradient kernel: nothing is computed twice. W unpacks the weight
version its I read (the IR's v_W = v_B). Parameters used outside their own
module's forward (none in the zoo) get theirs from the stage output in W, a
second walk. A full ``B`` on such a stage is the ordinary backward. The
arithmetic is the unsplit backward's kernel by kernel.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from stalesim.runtime.config import TrainConfig
from stalesim.runtime.mitigations import Mitigations
from stalesim.runtime.muon import muon_mask
from stalesim.runtime.optim import StageOptimizer
from stalesim.runtime.tasks import loss_fn, task_of
from stalesim.schedule import Action, Schedule
from stalesim.schedule.liveness import backward_reads, updates_during_backward_wait

_TOKEN = "stalesim-param"


@dataclass
class _Inflight:
    """A forward whose backward has not run yet."""

    x: torch.Tensor  # stage input (requires_grad for s > 0)
    y: torch.Tensor  # stage output (graph attached)
    leaves: list[torch.Tensor]  # tensors the forward read as weights (params or predicted)
    v_f: int
    predicted: bool = False
    loss: torch.Tensor | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # memory accounting (stalesim.runtime.memory): storage key -> bytes of the input, the
    # output and every non-parameter tensor autograd saved (negative keys: counted bytes
    # of a hook-free forward, from the first forward of that shape)
    storages: dict[int, int] = field(default_factory=dict)
    hooked: bool = True  # ran under the version hooks (a backward may read another version)
    # split backward: the outputs of the stage's parameter-owning modules (module index,
    # output) kept by the forward hooks; after I, the gradient at each of them
    segments: list[tuple[int, torch.Tensor]] | None = None
    seg_grads: list[torch.Tensor | None] | None = None
    v_b: int | None = None
    w_base: list[torch.Tensor] | None = None  # backward weights a mitigation made at I


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
        if head is not None:
            self.params += [p for p in head.parameters() if p.requires_grad]
            self.names += [f"head.{n}" for n, p in head.named_parameters() if p.requires_grad]
        self._ptr: dict[int, int] = self._ptr_map(self.params)
        self.opt = self._make_optimizer()  # SGD/Adam/AdamW + optimizer-aware mitigations
        self.optimizer = self.opt.torch
        self.loss_fn = loss_fn(task_of(cfg))  # classification or next-token cross-entropy
        self.mit = self._make_mitigations()
        self.version = 0
        self.stash: dict[int, list[torch.Tensor]] = {}
        self.need: Counter[int] = backward_reads(schedule.table, stage, worker)
        self.inflight: dict[tuple[int, int | None], _Inflight] = {}
        self.buffers: dict[int, list[torch.Tensor | None]] = {}
        self.versions_used: list[tuple[str, int]] = []
        self.stash_peak_bytes = 0
        # split backward (I / W): see the module doc
        self.split = (worker, stage) in schedule.split_stages()
        self.deferred: dict[tuple[int, int | None], _Inflight] = {}
        self._captured: list[tuple[int, torch.Tensor]] | None = None  # set during a split forward
        if self.split:
            self._init_split()
        # set while a forward / backward runs, read by the hooks
        self._pack_ptr: dict[int, int] = self._ptr
        self._unpack_weights: Sequence[torch.Tensor] | None = None
        # the version hooks only where an update can fall between a forward and its
        # backward (or a mitigation changes the weights read); elsewhere autograd's own saved
        # parameters are the version the backward reads, bit for bit
        self.hooks_needed = self._hooks_needed()
        self._seen: dict[int, int] | None = None  # saved storages counted by _pack
        self._saved_cache: dict[tuple, int] = {}  # input shape -> saved bytes (hook-free forwards)
        # counted-not-seen keys (< 0), disjoint between the runtimes of one rank (several
        # stages share a device with virtual stages or fold: the accounting merges their dicts)
        self._uid = -((worker * num_stages + stage) << 40)

    def _make_optimizer(self) -> Any:
        """The stage's optimizer (a batched runtime stacks K runs' optimizers)."""
        mask = muon_mask(self.module, output_stage=self.stage == self.num_stages - 1, head=self.head) \
            if self.cfg.optimizer == "muon" else None
        return StageOptimizer(self.params, self.cfg, muon_mask=mask)

    def _make_mitigations(self) -> Any:
        return Mitigations(self.cfg, self.schedule, self.stage, self.worker)

    # ------------------------------------------------------------------ hooks
    @staticmethod
    def _storage_ptr(t: torch.Tensor) -> int | None:
        try:
            ptr = t.untyped_storage().data_ptr()
        except (RuntimeError, NotImplementedError):
            return None
        return ptr or None

    @classmethod
    def _ptr_map(cls, tensors: Sequence[torch.Tensor]) -> dict[int, int]:
        """Storage address -> index, for the tensors that have a storage."""
        out: dict[int, int] = {}
        for i, t in enumerate(tensors):
            ptr = cls._storage_ptr(t)
            if ptr is not None:
                out[ptr] = i
        return out

    def _hooks_needed(self) -> bool:
        """True when some update of this stage runs while one of its forwards awaits its
        backward (a schedule fact, :func:`updates_during_backward_wait`), or a mitigation
        changes the weights a forward or backward reads."""
        if self.mit.changes_forward or self.mit.changes_backward:
            return True
        return updates_during_backward_wait(self.schedule, self.stage, self.worker)

    def _pack(self, t: torch.Tensor) -> Any:
        ptr = self._storage_ptr(t)
        i = self._pack_ptr.get(ptr) if ptr is not None else None
        if i is None:
            if self._seen is not None and ptr is not None:
                self._seen[ptr] = t.untyped_storage().nbytes()
            return t
        base = self.params[i] if self._pack_ptr is self._ptr else self._cur_leaves[i]
        return (_TOKEN, i, tuple(t.size()), tuple(t.stride()), t.storage_offset() - base.storage_offset())

    def _unpack(self, obj: Any) -> torch.Tensor:
        if isinstance(obj, tuple) and len(obj) == 5 and obj[0] == _TOKEN:
            _, i, size, stride, off = obj
            if self._unpack_weights is None:
                raise RuntimeError("stalesim: saved weight unpacked outside a stage backward")
            w = self._unpack_weights[i]
            return w.as_strided(size, stride, w.storage_offset() + off)
        return obj

    # ---------------------------------------------------------------- helpers
    def _key(self, a: Action) -> tuple[int, int | None]:
        return (a.batch, a.micro)

    def _bufs(self, base: Sequence[torch.Tensor]) -> list[torch.Tensor | None]:
        """Per-parameter step direction per unit lr (SGD: the momentum buffer) for a
        prediction that starts at the weights ``base``."""
        return self.opt.directions(base)

    def _backward_bufs(self, base: Sequence[torch.Tensor]) -> list[torch.Tensor | None]:
        """Directions for a backward-side prediction; none asked when the backward does not
        predict (Muon defines none, and Adam's costs a pass over the state)."""
        return self._bufs(base) if self.mit.backward_predicts else [None] * len(base)

    def _backward_base(self, rec: _Inflight, v_b: int) -> list[torch.Tensor]:
        """The weights a backward reads before any backward-side mitigation: its forward's
        predicted weights when the backward reuses them, else version v_B."""
        if rec.predicted and self.mit.backward_reuses_forward:
            return [w.detach() for w in rec.leaves]
        return self.weights_of(v_b)

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

    def _call(self, x: torch.Tensor, leaves: list[torch.Tensor] | None) -> torch.Tensor:
        if leaves is None:
            return self.module(x)
        n_mod = len(self.params) - (sum(1 for p in self.head.parameters() if p.requires_grad) if self.head else 0)
        mapping = dict(zip(self.names[:n_mod], leaves[:n_mod]))
        return torch.func.functional_call(self.module, mapping, (x,), strict=False)

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
        # split backward: the forward hooks keep the parameter-owning modules' outputs
        segments: list[tuple[int, torch.Tensor]] | None = [] if self.split else None
        self._captured = segments
        try:
            if hooked:
                y, storages = self._hooked_forward(x, leaves)
            else:
                y, storages = self._plain_forward(x)
        finally:
            self._captured = None
        self.inflight[self._key(action)] = _Inflight(
            x=x, y=y, leaves=leaves if leaves is not None else list(self.params), v_f=v_f,
            predicted=predicted, storages=storages, hooked=hooked, segments=segments,
        )
        self.versions_used.append((str(action.with_version(None)), v_f))
        return y

    def _hooked_forward(self, x: torch.Tensor, leaves: list[torch.Tensor] | None
                        ) -> tuple[torch.Tensor, dict[int, int]]:
        """The forward under the version hooks; counts the saved storages as it packs them."""
        self._cur_leaves = leaves if leaves is not None else self.params
        self._pack_ptr = self._ptr if leaves is None else self._ptr_map(leaves)
        seen: dict[int, int] = {}
        self._seen = seen
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                y = self._call(x, leaves)
        finally:
            self._pack_ptr = self._ptr
            self._seen = None
        _io_storages(seen, x, y)
        _segment_storages(seen, self._captured)
        return y, seen

    def _plain_forward(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[int, int]]:
        """A forward with no hooks. The bytes autograd saves depend only on the input's
        shape and dtype: counted (with a counting hook) on the first forward of each."""
        from stalesim.runtime.memory import saved_counter

        key = (tuple(x.shape), x.dtype, x.requires_grad)
        extra = self._saved_cache.get(key)
        if extra is None:
            seen: dict[int, int] = {}
            pack, unpack = saved_counter(set(self._ptr), seen)
            with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
                y = self._call(x, None)
            io: dict[int, int] = {}
            _io_storages(io, x, y)
            # a split stage's record also keeps its modules' outputs (those autograd did not save)
            _segment_storages(seen, self._captured)
            extra = self._saved_cache[key] = sum(v for k, v in seen.items() if k not in io)
            io[self._next_uid()] = extra
            return y, io
        y = self._call(x, None)
        io = {}
        _io_storages(io, x, y)
        io[self._next_uid()] = extra
        return y, io

    def _next_uid(self) -> int:
        """A key no storage has (data pointers are >= 0): one per counted-not-seen entry."""
        self._uid -= 1
        return self._uid

    def loss(self, action: Action, labels: torch.Tensor) -> torch.Tensor:
        """LOSS(s, t, m): micro-batch mean loss of the task divided by M; returns its value as a
        detached tensor on the device (a batched runtime: the ``[K]`` per-run values). Not read
        here: reading it would synchronise a GPU on every LOSS; the caller reads its values
        where it reports them (:mod:`stalesim.runtime.devio`)."""
        rec = self.inflight[self._key(action)]
        out = rec.y
        if self.head is not None:
            leaves = rec.leaves[len(rec.leaves) - sum(1 for p in self.head.parameters() if p.requires_grad):]
            self._cur_leaves = rec.leaves
            if rec.predicted:
                self._pack_ptr = self._ptr_map(rec.leaves)
            head_seen: dict[int, int] = {}
            self._seen = head_seen
            try:
                with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                    if rec.predicted:
                        names = [n[len("head."):] for n in self.names if n.startswith("head.")]
                        out = torch.func.functional_call(self.head, dict(zip(names, leaves)), (out,), strict=False)
                    else:
                        out = self.head(out)
            finally:
                self._pack_ptr = self._ptr
                self._seen = None
            for k, v in head_seen.items():
                rec.storages.setdefault(k, v)
        M = self.schedule.microbatches if self.schedule.uses_micro else 1
        key = ("loss", tuple(out.shape), out.dtype)
        extra = self._saved_cache.get(key)
        if extra is None:  # the bytes the loss saves: counted once per shape
            from stalesim.runtime.memory import saved_counter

            seen: dict[int, int] = {}
            skip = set(self._ptr) | set(rec.storages) | {int(labels.untyped_storage().data_ptr())}
            pack, unpack = saved_counter(skip, seen)
            with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
                loss = self.loss_fn(out, labels) / M
            extra = self._saved_cache[key] = sum(seen.values())
        else:
            loss = self.loss_fn(out, labels) / M
        rec.storages[self._next_uid()] = extra
        return self._keep_loss(rec, loss)

    def _keep_loss(self, rec: _Inflight, loss: torch.Tensor) -> torch.Tensor:
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
        key = self._key(action)
        rec = self.inflight.pop(key)
        v_b = self.version if action.version is None else action.version
        if (not self.schedule.policy.backward_reads_forward_version and action.version is not None
                and v_b != self.version):
            raise RuntimeError(f"stalesim: {action} (latest policy) but stage is at version {self.version}")
        if rec.hooked:
            base = self._backward_base(rec, v_b)
            if self.mit.changes_backward:
                base = self.mit.backward_weights(base, self._backward_bufs(base), self.lr_fn(action.batch),
                                                 action.batch, action.micro)
        elif v_b != self.version:  # _hooks_needed said no update falls between F and B
            raise RuntimeError(f"stalesim: {action} reads version {v_b}, stage is at {self.version} "
                               "(a hook-free forward cannot read an older version)")
        else:
            base = None
        if grad_y is None:
            if rec.loss is None:
                raise RuntimeError(f"stalesim: {action} has no loss (LOSS must run before B)")
            outputs, grad_out = rec.loss, None
        else:
            outputs, grad_out = rec.y, grad_y
        want_x = rec.x.requires_grad
        inputs = ([rec.x] if want_x else []) + rec.leaves
        self._unpack_weights = base  # None for hook-free records: nothing to unpack
        try:
            grads = torch.autograd.grad(outputs, inputs, grad_out, allow_unused=True)
        finally:
            self._unpack_weights = None
        gx = grads[0] if want_x else None
        wgrads = grads[1:] if want_x else grads
        self._accumulate(action.batch, wgrads)
        self.versions_used.append((str(action.with_version(None)), v_b))
        self._release(v_b)
        return gx

    def _accumulate(self, batch: int, wgrads: Any) -> None:
        """Add weight gradients to batch ``batch``'s buffer (micro-batches, or a split
        backward's W, accumulate into one gradient per batch; ``U`` applies it)."""
        buf = self.buffers.get(batch)
        if buf is None:
            self.buffers[batch] = [None if g is None else g.detach() for g in wgrads]
            return
        for i, g in enumerate(wgrads):
            if g is not None:
                prev = buf[i]
                buf[i] = g.detach() if prev is None else prev + g

    def _release(self, version: int) -> None:
        self.need[version] -= 1
        if self.need[version] <= 0:
            del self.need[version]
            self.stash.pop(version, None)

    def reserve(self, version: int) -> None:
        """Keep ``version`` available (e.g. for a checkpoint) until :meth:`release`."""
        self.need[version] += 1

    def release(self, version: int) -> None:
        self._release(version)

    # ---------------------------------------------- split backward (I / W)
    def _init_split(self) -> None:
        if self.head is not None:
            raise RuntimeError("stalesim: a split backward needs a stage without an auxiliary head")
        self._captured = None
        index = {id(p): i for i, p in enumerate(self.params)}
        self._owner_params: list[list[int]] = []  # per owning module: indices into self.params
        covered: set[int] = set()
        for mod in self.module.modules():
            own = [index[id(p)] for p in mod.parameters(recurse=False) if id(p) in index]
            if not own:
                continue
            k = len(self._owner_params)
            self._owner_params.append(own)
            covered.update(own)
            mod.register_forward_hook(self._capture_hook(k))
        # parameters no module's own forward uses (W takes them from the stage output)
        self._rest_params = [i for i in range(len(self.params)) if i not in covered]

    def _capture_hook(self, k: int) -> Callable[..., None]:
        def hook(_mod: nn.Module, _inp: Any, out: Any) -> None:
            if self._captured is not None:
                if not isinstance(out, torch.Tensor):
                    raise RuntimeError("stalesim: a split backward needs modules with tensor outputs")
                self._captured.append((k, out))
        return hook

    def backward_input(self, action: Action, grad_y: torch.Tensor | None) -> torch.Tensor | None:
        """I(s, t, m): the input gradient only, reading v_B = ``action.version``; the
        gradients at the parameter-owning modules' outputs are kept for
        :meth:`backward_weight`."""
        key = self._key(action)
        rec = self.inflight.pop(key)
        if rec.segments is None:
            raise RuntimeError(f"stalesim: {action} on a stage whose forward kept no outputs")
        v_b = self.version if action.version is None else action.version
        if (not self.schedule.policy.backward_reads_forward_version and action.version is not None
                and v_b != self.version):
            raise RuntimeError(f"stalesim: {action} (latest policy) but stage is at version {self.version}")
        base = self._backward_base(rec, v_b)
        if self.mit.changes_backward:
            base = self.mit.backward_weights(base, self._backward_bufs(base), self.lr_fn(action.batch), action.batch,
                                             action.micro)
            rec.w_base = base
        if grad_y is None:
            if rec.loss is None:
                raise RuntimeError(f"stalesim: {action} has no loss (LOSS must run before I)")
            outputs, grad_out = rec.loss, None
        else:
            outputs, grad_out = rec.y, grad_y
        want_x = rec.x.requires_grad
        inputs = ([rec.x] if want_x else []) + [o for _, o in rec.segments]
        self._unpack_weights = base
        try:
            grads = torch.autograd.grad(outputs, inputs, grad_out, retain_graph=True, allow_unused=True)
        finally:
            self._unpack_weights = None
        gx = grads[0] if want_x else None
        rec.seg_grads = list(grads[1:] if want_x else grads)
        rec.v_b = v_b
        rec.extra["grad_out"] = grad_out
        self.deferred[key] = rec
        self.versions_used.append((str(action.with_version(None)), v_b))
        return gx

    def backward_weight(self, action: Action) -> None:
        """W(s, t, m): the weight gradients of the backward whose I ran, added to the batch
        buffer; reads the version that I read."""
        key = self._key(action)
        rec = self.deferred.pop(key)
        assert rec.segments is not None and rec.seg_grads is not None and rec.v_b is not None
        base = rec.w_base if rec.w_base is not None else self.weights_of(rec.v_b)
        wgrads: list[torch.Tensor | None] = [None] * len(rec.leaves)
        self._unpack_weights = base
        try:
            if self._rest_params:  # first, while the whole graph is still there
                outputs = rec.loss if rec.extra.get("grad_out") is None else rec.y
                assert outputs is not None
                got = torch.autograd.grad(outputs, [rec.leaves[i] for i in self._rest_params],
                                          rec.extra.get("grad_out"), retain_graph=True, allow_unused=True)
                for i, gw in zip(self._rest_params, got):
                    wgrads[i] = gw
            for (k, out), g in zip(rec.segments, rec.seg_grads):
                if g is None:
                    continue
                idx = self._owner_params[k]
                got = torch.autograd.grad(out, [rec.leaves[i] for i in idx], g, allow_unused=True)
                for i, gw in zip(idx, got):
                    if gw is not None:
                        wgrads[i] = gw if wgrads[i] is None else wgrads[i] + gw  # type: ignore[operator]
        finally:
            self._unpack_weights = None
        rec.extra.pop("grad_out", None)
        self._accumulate(action.batch, wgrads)
        self.versions_used.append((str(action.with_version(None)), rec.v_b))
        self._release(rec.v_b)

    def restore_deferred(self, action: Action, seg_grads: list[torch.Tensor | None], v_b: int,
                         grad_out: torch.Tensor | None = None) -> None:
        """On resume: the forward of ``action`` was just rebuilt (:meth:`restore_forward`,
        and its loss); its I had run before the checkpoint: keep it waiting for W."""
        key = self._key(action)
        rec = self.inflight.pop(key)
        assert rec.segments is not None and len(rec.segments) == len(seg_grads)
        rec.seg_grads = list(seg_grads)
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

    def state_dict(self) -> dict[str, Any]:
        """Everything but in-flight graphs: weights, optimizer, stash, buffers, counters."""
        return {
            "module": self.module.state_dict(),
            "head": None if self.head is None else self.head.state_dict(),
            "optimizer": None if self.optimizer is None else self.opt.state_dict(),
            "version": self.version,
            "stash": {v: [t.clone() for t in ws] for v, ws in self.stash.items()},
            "need": dict(self.need),
            "buffers": {t: [None if g is None else g.clone() for g in b] for t, b in self.buffers.items()},
            "delta": None if self.mit.delta is None else [d.clone() for d in self.mit.delta],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with torch.no_grad():  # copy in place: keeps storages (the hook's map) valid
            for k, v in self.module.state_dict().items():
                v.copy_(state["module"][k])
            if self.head is not None:
                for k, v in self.head.state_dict().items():
                    v.copy_(state["head"][k])
        if self.optimizer is not None and state["optimizer"] is not None:
            self.opt.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
        self.stash = {int(v): list(ws) for v, ws in state["stash"].items()}
        self.need = Counter({int(k): int(c) for k, c in state["need"].items()})
        self.buffers = {int(t): list(b) for t, b in state["buffers"].items()}
        self.mit.delta = state["delta"]

    def inflight_state(self) -> dict[tuple[int, int | None], dict[str, Any]]:
        """What rebuilds each in-flight forward: its input, the weights it read, and
        whether LOSS already ran. The weights of version v_F must still exist: a
        checkpointing caller :meth:`reserve`s them in advance (the schedule says
        which forwards are in flight at a checkpoint). ``torch.save`` stores tensors
        sharing a storage once."""
        out = {}
        for key, rec in [*self.inflight.items(), *self.deferred.items()]:
            out[key] = {
                "x": rec.x.detach(),
                "x_requires_grad": rec.x.requires_grad,
                "v_f": rec.v_f,
                "weights": [w.detach() for w in rec.leaves] if rec.predicted
                else self.weights_of(rec.v_f),
                "has_loss": rec.loss is not None,
            }
            if rec.seg_grads is not None:  # I ran, W pending (split backward)
                out[key]["seg_grads"] = [None if g is None else g.detach() for g in rec.seg_grads]
                out[key]["v_b"] = rec.v_b
                go = rec.extra.get("grad_out")
                out[key]["grad_out"] = None if go is None else go.detach()
        return out

    def restore_forward(self, action: Action, x: torch.Tensor, weights: list[torch.Tensor],
                        v_f: int) -> torch.Tensor:
        """Rebuild an in-flight forward on resume (recompute with the weights it read)."""
        y = self.forward(action.with_version(v_f), x, weights=[t.clone() for t in weights])
        self.versions_used.pop()  # the replayed F was logged before the checkpoint
        rec = self.inflight[self._key(action)]
        rec.v_f = v_f
        rec.predicted = True
        return y


def _segment_storages(seen: dict[int, int], segments: list[tuple[int, torch.Tensor]] | None) -> None:
    """Add the storages of the module outputs a split stage's record keeps for W."""
    for _, o in segments or ():
        st = o.untyped_storage()
        if st.nbytes():
            seen.setdefault(int(st.data_ptr()), int(st.nbytes()))


def _io_storages(seen: dict[int, int], x: torch.Tensor, y: torch.Tensor) -> None:
    """Add the storages of a forward's input and output (the record keeps both alive)."""
    for t in (x, y):
        st = t.untyped_storage()
        n = st.nbytes()
        if n:
            seen[int(st.data_ptr())] = int(n)
