"""The bytes one rank holds, sampled after every compute action on the CPU.

Counted as :mod:`stalesim.runtime.memory` defines them (unique storages) and split into
the memory model's components (:mod:`stalesim.sim.memory`): static (parameters, buffers,
optimizer state), the weight stash, gradient buffers, activations (the records of the
in-flight forwards), the gradients a deferred ``W`` keeps, and communication buffers
(posted receives, sends not yet complete, all-reduce buffers, outputs awaiting a send).
On CUDA the allocator's own peak is reported instead (``stalesim.executor.job``), so sampling is
off there. Byte counts are cached when a tensor arrives, so a sample reads sizes only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

import torch

from stalesim.runtime.memory import add_storage, module_static_bytes

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.executor.transport import Pending
    from stalesim.runtime.stage import StageRuntime

#: A receive buffer's (storage key, bytes).
Storage = tuple[int, int]


class Mailboxes(Protocol):
    """The rank's tensors in flight that a sample reads (:class:`stalesim.executor.rank.Rank`'s
    store), keyed by (worker, stage, batch, micro)."""

    inputs: dict[tuple[int, ...], torch.Tensor]
    grads_in: dict[tuple[int, ...], torch.Tensor]
    outputs: dict[tuple[int, ...], torch.Tensor]
    grads_out: dict[tuple[int, ...], torch.Tensor]


def storage_of(t: torch.Tensor) -> Storage:
    """(storage key, bytes) of a tensor's storage."""
    st = t.untyped_storage()
    return int(st.data_ptr()), int(st.nbytes())


class MemorySampler:
    """One rank's memory count and its peak (see the module doc).

    ``store``: the rank's mailboxes (``inputs``, ``grads_in``, ``outputs``, ``grads_out``);
    ``sends``: its transport's incomplete sends; ``allreduces``: its open all-reduces
    (``key -> (pending, gradients, flat buffer)``). All three are read live at each sample."""

    def __init__(self, runtimes: Mapping[tuple[int, int], StageRuntime], *, store: Mailboxes,
                 sends: Mapping[int, Pending],
                 allreduces: Mapping[tuple[int, int, int], tuple[Pending, list[torch.Tensor], torch.Tensor]],
                 local_loss: bool,
                 momentum: bool, enabled: bool = True) -> None:
        self.rts = runtimes
        self.store = store
        self.sends = sends
        self.allreduces = allreduces
        self.local_loss = local_loss
        self.momentum = momentum
        self.enabled = enabled
        self.peak_bytes = 0
        self.static_bytes = 0
        self.peak_parts: dict[str, int] | None = {}  # components at the peak (None: not kept)
        # receive buffers by the key of the action that consumes them; a gradient's bytes
        # are its parameter's, per runtime
        self.msg_mem: dict[tuple, Storage] = {}
        self.grad_bytes = {key: [p.numel() * p.element_size() for p in rt.params]
                           for key, rt in runtimes.items()}

    def posted(self, key: tuple, buf: torch.Tensor) -> None:
        """A receive buffer posted for the action ``key`` (``("F"|"B", w, s, t, m)``)."""
        self.msg_mem[key] = storage_of(buf)

    def consumed(self, key: tuple) -> None:
        """The action ``key`` took its received tensor: its record counts it from now on."""
        self.msg_mem.pop(key, None)

    def init_static(self) -> None:
        """Parameters, buffers and optimizer state (momentum counted from the start)."""
        st = module_static_bytes([m for rt in self.rts.values() for m in (rt.module, rt.head)],
                                 momentum=self.momentum)
        opt = 0
        for rt in self.rts.values():
            if rt.optimizer is not None:
                for state in rt.optimizer.state.values():
                    opt += sum(v.untyped_storage().nbytes() for v in state.values()
                               if isinstance(v, torch.Tensor))
        # optimizer state appears at the first update: count it up front, per parameter as the
        # memory model does (SGD momentum: one copy; Adam/AdamW: two; Muon's matrices: one;
        # error feedback: one more)
        expected = sum(rt.opt.state_nbytes() for rt in self.rts.values())
        self.static_bytes = st["params"] + st["buffers"] + max(opt, expected)

    def now(self, parts: dict[str, int] | None = None) -> int:
        """Bytes the rank holds now, by unique storage; ``parts`` (if given) receives them by
        component (the memory model's)."""
        seen: dict[int, int] = {}
        deferred: dict[int, int] = {}  # the gradients a deferred W reads
        stash = grads = ar = 0
        for key, rt in self.rts.items():
            for rec in rt.inflight.values():
                seen.update(rec.storages)
            for rec in rt.deferred.values():  # split backward: I ran, W pending
                seen.update(rec.storages)
                for g in [*(rec.seg_grads or ()), rec.extra.get("grad_out")]:
                    if g is not None:
                        deferred[int(g.untyped_storage().data_ptr())] = int(g.untyped_storage().nbytes())
            if rt.stash:
                stash += rt.stash_bytes()
            gb = self.grad_bytes[key]
            for buf in rt.buffers.values():  # a gradient has its parameter's size
                grads += sum(b for g, b in zip(buf, gb) if g is not None)
        acts = sum(seen.values())
        dw = sum(v for k, v in deferred.items() if k not in seen)
        seen.update(deferred)
        seen.update(self.msg_mem.values())
        st = self.store
        if st.grads_out or (st.outputs and self.local_loss):
            self._add_waiting(seen)  # an input gradient awaiting SEND_B (outputs are records' y)
        for p in self.sends.values():
            if p.counted:
                seen[p.storage] = p.nbytes
        for _, _, flat in self.allreduces.values():
            ar += flat.untyped_storage().nbytes()
        total = self.static_bytes + stash + grads + ar + sum(seen.values())
        if parts is not None:
            parts.update(static=self.static_bytes, stash=stash, gradients=grads, activations=acts,
                         deferred_w=dw, comm_buffers=total - self.static_bytes - stash - grads - acts - dw)
        return total

    def _add_waiting(self, seen: dict[int, int]) -> None:
        """Add the storages of the tensors waiting in the mailboxes (labels are not counted)."""
        st = self.store
        for d in (st.inputs, st.grads_in, st.outputs, st.grads_out):
            for t in d.values():
                if isinstance(t, torch.Tensor):
                    add_storage(seen, t)

    def track(self) -> None:
        """Sample now and keep the peak (and its components)."""
        if not self.enabled:
            return
        n = self.now()
        if n > self.peak_bytes:
            self.peak_bytes = n
            if self.peak_parts is not None:
                self.now(self.peak_parts)
