"""One rank: its device's action list from the IR, one method per action kind.

No schedule logic lives here: the order is ``sched.device_actions[rank]``, the
weight versions and mitigations are :class:`StageRuntime`'s (the same code the
emulator runs), and this module only moves tensors. The dispatcher calls one
``_exec_*`` method per action kind, named as the emulator's
(:data:`stalesim.schedule.dispatch.EXEC_METHODS`: ``_exec_forward``, ``_exec_loss``,
``_exec_backward``, ``_exec_backward_input``/``_exec_backward_weight`` for the two
halves of a split backward, ``_exec_update``, ``_exec_send_activation``, ...).

Inputs and labels: only stage 0 reads the data: each ``F`` reads just its
(worker, micro-batch) slice of batch t (``BatchStream.part``, bit-identical to
``shard`` of the whole batch, in a storage of its own). The labels of the
worker's slice of batch t travel once per batch and hop, with the first
activation of that batch (its own tag), so the last stage (every stage for
``local``) gets them from stage 0 and no second data stream exists that could
drift; micro-batches slice them.

Per action the loop does only what exactness, failure reports and the trace
need: the beacon write (a memcpy), two timestamps, the handler; labels are
precomputed, receives are posted where the precomputed plan says
(:func:`stalesim.schedule.comm.posting_plan`: a dict lookup per action), and the
memory sample (:class:`stalesim.executor.memory.MemorySampler`, unique storages as
:mod:`stalesim.runtime.memory` defines them) reads byte counts cached when each
tensor arrived.
"""

from __future__ import annotations

import datetime
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, cast

import torch
import torch.distributed as dist

from stalesim.errors import StalesimError
from stalesim.executor.faults import Beacon, FaultInjector
from stalesim.executor.measure import Recorder, label_of
from stalesim.executor.memory import MemorySampler
from stalesim.executor.strict import STRICT_ENV, StrictComm
from stalesim.executor.transport import ACT, GRAD, LABELS, Pending, Transport, tag_for
from stalesim.runtime.allreduce import pack, unpack_mean
from stalesim.runtime.data import shard
from stalesim.runtime.devio import LossSums, to_device
from stalesim.schedule import Action, Kind
from stalesim.schedule.actions import COMPUTE_KINDS
from stalesim.schedule.comm import Edge, edge_of, edges, label_carriers, posting_plan
from stalesim.schedule.dispatch import dispatch_table

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.executor.launch import DeviceSpec
    from stalesim.executor.tb_live import LiveLoss
    from stalesim.runtime.config import TrainConfig
    from stalesim.runtime.data import BatchStream
    from stalesim.runtime.stage import StageRuntime
    from stalesim.schedule import Schedule

#: The stage runtimes a rank holds, by (worker, stage).
Runtimes = dict[tuple[int, int], "StageRuntime"]
#: What ``dist.new_group`` returns: the group, or torch's ``GroupMember.NON_GROUP_MEMBER`` (-100)
#: on a rank outside it (every rank creates every group; a rank uses only its own edges')
NewGroup: TypeAlias = "dist.ProcessGroup | Literal[-100]"
#: Stage 0's batches: the run's stream, or a plain callable ``t -> (x, y)`` (tests)
Stream: TypeAlias = "BatchStream | Callable[[int], tuple[torch.Tensor, torch.Tensor]]"

# How many receives a rank keeps posted ahead of the action that consumes them.
RECV_AHEAD = 8
# Test only: "legacy" reproduces the layout before per-edge groups (one group per channel
# for all ranks, receives posted in list order), which NCCL (and strict mode) deadlocks on.
LAYOUT_ENV = "STALESIM_COMM_LAYOUT"


@dataclass
class RankContext:
    """Process-wide state of one rank: process group(s), device, deadline."""

    rank: int
    world: int
    local_rank: int
    device: torch.device
    backend: str
    timeout_s: float
    beacon: Beacon
    strict: bool = False  # STALESIM_STRICT_COMM: NCCL's ordering rules enforced on gloo
    groups: dict[Edge | str, NewGroup] = field(default_factory=dict)  # Edge (or legacy channel) -> group

    @classmethod
    def create(cls, *, rank: int, world: int, local_rank: int, devices: DeviceSpec,
               timeout_s: float, beacon: Beacon, rendezvous: dict[str, Any] | None = None) -> RankContext:
        """Join the process group: ``rendezvous`` is the launcher's (a private FileStore
        for local launches, see :mod:`stalesim.rendezvous`, whose type it keeps), ``None``
        means ``env://``."""
        kind = devices.get("kind", "cpu")
        if kind == "cuda":
            from stalesim.devices import rank_gpu

            dev = torch.device(rank_gpu(devices.get("ids"), local_rank, torch.cuda.device_count()))
            torch.cuda.set_device(dev)
            backend = "nccl"
        else:
            dev, backend = torch.device("cpu"), "gloo"
        td = datetime.timedelta(seconds=timeout_s)
        beacon.set("rendezvous")
        from stalesim.rendezvous import init_process_group

        init_process_group(rendezvous, backend=backend, rank=rank, world=world, timeout=td,
                           device_id=dev if backend == "nccl" else None)
        # strict mode emulates NCCL's rules on gloo; on NCCL itself the real rules apply
        return cls(rank, world, local_rank, dev, backend, timeout_s, beacon,
                   strict=env_flag(STRICT_ENV) and backend == "gloo")

    @property
    def legacy_layout(self) -> bool:
        return os.environ.get(LAYOUT_ENV, "") == "legacy"

    def edge_groups(self, sched: Schedule) -> dict[Edge, NewGroup]:
        """The process group of each edge the schedule uses (created on first use, kept for
        the next jobs). ``new_group`` is collective: every rank creates the missing groups
        in :func:`stalesim.schedule.comm.edges` order, which is the same on every rank
        because every rank runs the same jobs. gloo gets the same layout as NCCL (it would
        not need it, pairing by tag, but then the CPU runs exercise the GPU's layout; a
        two-rank gloo group costs about 7 ms once per process: docs/executor.md)."""
        td = datetime.timedelta(seconds=self.timeout_s)
        wanted = edges(sched)
        if self.legacy_layout:  # one group per channel, all ranks
            for ch in sorted({e.channel for e in wanted}):
                if ch not in self.groups:
                    self.groups[ch] = dist.new_group(backend=self.backend, timeout=td)
            return {e: self.groups[e.channel] for e in wanted}
        for e in wanted:
            if e not in self.groups:
                self.groups[e] = dist.new_group(ranks=[e.src, e.dst], backend=self.backend, timeout=td)
        return {e: self.groups[e] for e in wanted}

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


@dataclass
class _Store:
    """Tensors in flight on this rank, keyed by (worker, stage, batch, micro)."""

    inputs: dict = field(default_factory=dict)  # received activations (key of the consumer F)
    grads_in: dict = field(default_factory=dict)  # received gradients (key of the consumer B)
    outputs: dict = field(default_factory=dict)  # F outputs awaiting SEND_F / local F(s+1)
    grads_out: dict = field(default_factory=dict)  # B input-grads awaiting SEND_B / local B(s-1)
    labels: dict = field(default_factory=dict)  # (worker, batch) -> labels of the worker's slice
    label_uses: Counter = field(default_factory=Counter)


class Rank:
    """Executes one device's action list (see the module doc)."""

    def __init__(self, ctx: RankContext, sched: Schedule, cfg: TrainConfig, runtimes: Runtimes,
                 stream: Stream | None, out_shapes: list[tuple[int, ...]], *, faults: FaultInjector | None = None,
                 start_index: int = 0, label_shape: tuple[int, ...] = ()) -> None:
        self.ctx = ctx
        self.sched = sched
        self.cfg = cfg
        self.rts = runtimes
        self.stream = stream
        self.out_shapes = out_shapes
        self.label_shape = tuple(label_shape)  # per sample: () classes, (T,) next-token targets
        self.actions: list[Action] = sched.device_actions[ctx.rank]
        self.S = sched.stages
        self.P = sched.workers
        self.M = sched.microbatches if sched.uses_micro else 1
        self.micro_size = cfg.batch_size // (self.P * self.M)
        self.dtype = cfg.torch_dtype
        self.device = ctx.device
        # every edge of the schedule: this rank reads only its own edges', whose groups it is a
        # member of (the others hold NON_GROUP_MEMBER)
        self.groups = cast("dict[Edge, dist.ProcessGroup]", ctx.edge_groups(sched))
        strict = StrictComm(ctx.rank, ctx.device, ctx.timeout_s) if ctx.strict else None
        self.tr = Transport(ctx.rank, ctx.timeout_s, nccl=ctx.backend == "nccl", strict=strict)
        self.rec = Recorder(device=ctx.device, cuda=ctx.device.type == "cuda", actions=self.actions)
        self.faults = faults or FaultInjector(ctx.rank)
        self.store = _Store()
        self.posted: dict[tuple, tuple[Pending, Pending | None]] = {}  # RECV key -> its posted receives
        self.ar: dict[tuple[int, int, int], tuple[Pending, list[torch.Tensor], torch.Tensor]] = {}
        # LOSS values stay on the device until the results are gathered (a read per LOSS
        # would synchronise the last stage's GPU, a wait the stage profiles never had)
        self.losses = LossSums()
        # receives: posted exactly where the plan says (NCCL pairs them by order, the memory
        # model counts their buffers from there); messages go on their edge's group
        self.plan = posting_plan(sched, recv_ahead=RECV_AHEAD,
                                 order="list" if ctx.legacy_layout else "sender")
        self.post_before = self.plan.before[ctx.rank]
        self.group_at = {i: self.groups.get(edge_of(sched, a)) for i, a in enumerate(self.actions)
                         if a.kind in (Kind.SEND_F, Kind.SEND_B, Kind.RECV_F, Kind.RECV_B)}
        self.index = start_index
        self.texts = [label_of(a) for a in self.actions]  # trace labels, computed once
        self.rec.texts = self.texts
        # the first SEND_F / RECV_F of each (worker, batch) carries that batch's labels
        self.carries_labels = label_carriers(self.actions)
        for i, a in enumerate(self.actions):
            if i < start_index:
                continue
            if a.kind is Kind.LOSS or (a.kind is Kind.SEND_F and i in self.carries_labels):
                self.store.label_uses[(a.worker, a.batch)] += 1
        self.part = self.cfg.batch_size // self.P  # a worker's slice of the global batch
        # memory sampled after each compute action (CPU; CUDA reports the allocator's peak)
        self.memory = MemorySampler(self.rts, store=self.store, sends=self.tr.sends, allreduces=self.ar,
                                    local_loss=sched.local_loss, momentum=bool(cfg.momentum),
                                    enabled=ctx.device.type != "cuda")
        # sends are waited on where the IR proves them complete (see transport's module doc)
        from stalesim.schedule.completion import send_release

        release = send_release(sched, plan=self.plan)
        self.release_after: dict[int, list[int]] = {}
        for i, j in release[ctx.rank].items():
            self.release_after.setdefault(j, []).append(i)
        if ctx.backend == "nccl" and not ctx.legacy_layout:
            # a schedule from outside the registry (torch_interop, a CSV) is checked before
            # it can hang a GPU run: the same verdict on every rank, a one-line error
            from stalesim.schedule.comm_check import check_comm_order

            check_comm_order(sched, self.plan, release=release)
        self.sent: dict[int, list[Pending]] = {}  # send index -> its messages not yet waited on
        self._handlers = dispatch_table(self)  # the emulator's method names (stalesim.schedule.dispatch)
        # hook (checkpointing): called with the index just finished
        self.on_action_done: Callable[[int], None] | None = None
        self.live_loss: LiveLoss | None = None  # run --tensorboard: on the loss rank
        self.loss_labels: dict[tuple, torch.Tensor] = {}  # labels of losses whose B is pending
        self.retain_sends: dict[int, list[int]] = {}  # send index -> checkpoints that re-send it
        self.retained: dict[int, list] = {}
        self.resend: list[tuple[Action, list[torch.Tensor]]] = []  # resume: sends to repeat
        self.restart_ar: list[Action] = []  # resume: all-reduces to start again
        self.cur = start_index

    # ---------------------------------------------------------------- the loop
    def run(self) -> None:
        acts = self.actions
        handlers = self._handlers
        beacon = self.ctx.beacon
        rec = self.rec
        check = self.faults.check if self.faults else None
        self._post_resumed()
        self._resume_comm()
        post_before = self.post_before
        texts = self.texts
        compute = COMPUTE_KINDS
        track_memory = self.memory.track
        for i in range(self.index, len(acts)):
            a = acts[i]
            label = texts[i]
            beacon.set(label)
            if check is not None:
                check(label)
            self.cur = i
            st = rec.begin()
            try:
                posts = post_before.get(i)
                if posts is not None:
                    for r in posts:
                        self._post(acts[r], r)
                handlers[a.kind](a)
            except StalesimError:
                raise
            except RuntimeError as exc:
                if getattr(exc, "action", None):
                    raise
                raise type(exc)(f"rank {self.ctx.rank}: {exc} at action {label}") from exc
            rec.end(i, st)
            self.index = i + 1
            done = self.release_after.get(i)
            if done is not None:
                for j in done:
                    for p in self.sent.pop(j, ()):
                        self.tr.complete(p)
            if a.kind in compute:
                track_memory()
            if self.on_action_done is not None:
                self.on_action_done(i)
        beacon.set("finishing (waiting for the last sends)")
        self.tr.flush()
        if self.live_loss is not None:
            self.live_loss.close()

    def _resume_comm(self) -> None:
        """After a resume: repeat the sends the peers had not received, restart all-reduces."""
        for a, tensors in self.resend:
            w, s, t, m = a.worker, a.stage, a.batch, a.micro
            label = label_of(a)
            if a.kind is Kind.SEND_F:
                dst = self.sched.device_of(s + 1, w)
                group = self.groups.get(edge_of(self.sched, a))
                self.tr.send(tensors[0], dst, tag_for(ACT, s, t, m), label, "a re-sent activation", group)
                if len(tensors) > 1:
                    self.tr.send(tensors[1], dst, tag_for(LABELS, s, t, None), label, "re-sent labels",
                                 group, count=False)
            else:
                self.tr.send(tensors[0], self.sched.device_of(s - 1, w), tag_for(GRAD, s, t, m), label,
                             "a re-sent gradient", self.groups.get(edge_of(self.sched, a)))
        self.resend = []
        for a in self.restart_ar:
            self._exec_allreduce_start(a)
        self.restart_ar = []

    def _keep_sent(self, a: Action, tensors: list[torch.Tensor]) -> None:
        for k in self.retain_sends.get(self.cur, ()):
            self.retained.setdefault(k, []).append((str(a), [t.detach() for t in tensors]))

    # ------------------------------------------------------------- receiving
    def _post_resumed(self) -> None:
        """On resume, post what the plan posted before the resume point and the checkpoint
        did not consume, in plan order: each edge's first receives are then exactly the
        messages the peers re-send (:meth:`_resume_comm`), in their send order."""
        for i in sorted(j for j in self.post_before if j < self.index):
            for r in self.post_before[i]:
                if r >= self.index:
                    self._post(self.actions[r], r)

    def _post(self, a: Action, index: int) -> None:
        w, s, t, m = a.worker, a.stage, a.batch, a.micro
        label = self.texts[index]
        if a.kind is Kind.RECV_F:
            src = self.sched.device_of(s - 1, w)
            buf = torch.empty((self.micro_size, *self.out_shapes[s - 1]), dtype=self.dtype, device=self.device)
            group = self.group_at[index]
            p = self.tr.post_recv(buf, src, tag_for(ACT, s - 1, t, m), label,
                                  f"the activation of {s - 1}F{t}", group)
            q = None
            if index in self.carries_labels:
                lab = torch.empty((self.part, *self.label_shape), dtype=torch.int64, device=self.device)
                q = self.tr.post_recv(lab, src, tag_for(LABELS, s - 1, t, None), label,
                                      f"the labels of batch {t}", group)
            self.posted[a.key] = (p, q)
            self.memory.posted(("F", w, s, t, m), buf)
        else:
            src = self.sched.device_of(s + 1, w)
            buf = torch.empty((self.micro_size, *self.out_shapes[s]), dtype=self.dtype, device=self.device)
            p = self.tr.post_recv(buf, src, tag_for(GRAD, s + 1, t, m), label,
                                  f"the gradient of {s + 1}B{t}", self.group_at[index])
            self.posted[a.key] = (p, None)
            self.memory.posted(("B", w, s, t, m), buf)

    # --------------------------------------------------------------- compute
    def _input(self, w: int, t: int, m: int | None) -> torch.Tensor:
        """Stage 0's input of F(w, t, m): that slice of batch t only, as ``shard`` by worker
        then micro-batch would cut it (the emulator's order), in a storage of its own."""
        lo = w * self.part + (m or 0) * self.micro_size
        part = getattr(self.stream, "part", None)
        if part is not None:
            x = part(t, lo, lo + self.micro_size)
        else:  # a plain callable stream
            assert self.stream is not None  # a rank holding stage 0 has one (run_job)
            x = self.stream(t)[0][lo:lo + self.micro_size].clone()
        return to_device(x, self.device)  # pinned + asynchronous on CUDA

    def _labels(self, w: int, t: int) -> torch.Tensor:
        """Labels of the worker's slice of batch t (stage 0 reads them from the stream)."""
        key = (w, t)
        y = self.store.labels.get(key)
        if y is None:
            lab = getattr(self.stream, "labels", None)
            if lab is not None:
                y = lab(t)
            else:
                assert self.stream is not None  # a rank holding stage 0 has one (run_job)
                y = self.stream(t)[1]
            if self.P > 1:
                y = shard(y, self.P, w)
            y = self.store.labels[key] = to_device(y, self.device)
        return y

    def _exec_forward(self, a: Action) -> None:
        w, s, t, m = a.worker, a.stage, a.batch, a.micro
        st = self.store
        if s == 0:
            x = self._input(w, t, m)
            if self.store.label_uses.get((w, t)):
                self._labels(w, t)
        else:
            prev = (w, s - 1, t, m)
            if prev in st.outputs:  # previous stage on this rank
                x = st.outputs.pop(prev).detach()
            else:
                x = st.inputs.pop((w, s, t, m))
                self.memory.consumed(("F", w, s, t, m))  # the record holds it from now on
            if not self.sched.local_loss:
                x.requires_grad_(True)
        y_out = self.rts[(w, s)].forward(a, x)
        if s < self.S - 1:
            st.outputs[(w, s, t, m)] = y_out

    def _exec_loss(self, a: Action) -> None:
        key = (a.worker, a.batch)
        labels = self.store.labels[key]
        if self.M > 1 or a.micro is not None:
            labels = shard(labels, self.M, a.micro or 0)
        value = self.rts[(a.worker, a.stage)].loss(a, labels)
        self.losses.add((a.worker, a.stage, a.batch), value)
        if self.live_loss is not None:
            self.live_loss.loss_done(a.worker, a.stage, a.batch)
        self.loss_labels[(a.worker, a.stage, a.batch, a.micro)] = labels
        self._used_labels(key)

    def _used_labels(self, key: tuple) -> None:
        uses = self.store.label_uses
        uses[key] -= 1
        if uses[key] <= 0:
            del uses[key]
            self.store.labels.pop(key, None)

    def _output_grad(self, a: Action) -> torch.Tensor | None:
        """The gradient of stage ``a.stage``'s output for ``a``'s (micro-)batch: None on the
        loss stage, else from the next stage on this rank or from the receive."""
        w, s, t, m = a.worker, a.stage, a.batch, a.micro
        if self.rts[(w, s)].is_loss_stage:
            return None
        st = self.store
        nxt = (w, s + 1, t, m)
        if nxt in st.grads_out:
            return st.grads_out.pop(nxt)
        self.memory.consumed(("B", w, s, t, m))  # the backward's record holds it from now on
        return st.grads_in.pop((w, s, t, m))

    def _exec_backward(self, a: Action) -> None:
        w, s, t, m = a.worker, a.stage, a.batch, a.micro
        rt = self.rts[(w, s)]
        st = self.store
        gx = rt.backward(a, self._output_grad(a))
        self.loss_labels.pop((w, s, t, m), None)
        if s > 0 and not self.sched.local_loss and gx is not None:
            st.grads_out[(w, s, t, m)] = gx

    def _exec_backward_input(self, a: Action) -> None:
        """Input gradient only (split backward); the output gradient arrives as for B."""
        w, s, t, m = a.worker, a.stage, a.batch, a.micro
        st = self.store
        gx = self.rts[(w, s)].backward_input(a, self._output_grad(a))
        if s > 0 and not self.sched.local_loss and gx is not None:
            st.grads_out[(w, s, t, m)] = gx

    def _exec_backward_weight(self, a: Action) -> None:
        """The deferred weight gradient; the loss labels are no longer needed after it."""
        self.rts[(a.worker, a.stage)].backward_weight(a)
        self.loss_labels.pop((a.worker, a.stage, a.batch, a.micro), None)

    def _exec_update(self, a: Action) -> None:
        self.rts[(a.worker, a.stage)].update(a)

    # ---------------------------------------------------------- point to point
    def _exec_send_activation(self, a: Action) -> None:
        w, s, t, m = a.worker, a.stage, a.batch, a.micro
        y = self.store.outputs.pop((w, s, t, m))
        dst = self.sched.device_of(s + 1, w)
        label = self.texts[self.cur]
        group = self.group_at[self.cur]
        sent = [self.tr.send(y, dst, tag_for(ACT, s, t, m), label, f"the activation of {label}", group)]
        self.sent[self.cur] = sent
        if self.cur not in self.carries_labels:
            if self.retain_sends:
                self._keep_sent(a, [y])
            return
        key = (w, t)
        labels = self.store.labels[key]
        sent.append(self.tr.send(labels, dst, tag_for(LABELS, s, t, None), label, f"the labels of batch {t}",
                                 group, count=False))
        if self.retain_sends:
            self._keep_sent(a, [y, labels])
        self._used_labels(key)

    def _exec_recv_activation(self, a: Action) -> None:
        p, q = self.posted.pop(a.key)  # the plan posts a receive no later than right before its RECV
        x = self.tr.wait(p)
        self.store.inputs[(a.worker, a.stage, a.batch, a.micro)] = x
        if q is not None:
            self.store.labels[(a.worker, a.batch)] = self.tr.wait(q)

    def _exec_send_grad(self, a: Action) -> None:
        w, s, t, m = a.worker, a.stage, a.batch, a.micro
        g = self.store.grads_out.pop((w, s, t, m))
        label = self.texts[self.cur]
        self.sent[self.cur] = [self.tr.send(g, self.sched.device_of(s - 1, w), tag_for(GRAD, s, t, m), label,
                                            f"the gradient of {label}", self.group_at[self.cur])]
        if self.retain_sends:
            self._keep_sent(a, [g])

    def _exec_recv_grad(self, a: Action) -> None:
        p, _ = self.posted.pop(a.key)
        self.store.grads_in[(a.worker, a.stage, a.batch, a.micro)] = self.tr.wait(p)

    # -------------------------------------------------------------- all-reduce
    def _exec_allreduce_start(self, a: Action) -> None:
        gs = self.rts[(a.worker, a.stage)].grads(a.batch)
        flat = pack(gs, self.cfg.compression, dtype=self.dtype, device=self.device)
        p = self.tr.all_reduce_start(flat, label_of(a))
        self.ar[(a.worker, a.stage, a.batch)] = (p, gs, flat)

    def _exec_allreduce_wait(self, a: Action) -> None:
        p, gs, flat = self.ar.pop((a.worker, a.stage, a.batch))
        p.action = label_of(a)
        self.tr.wait(p)
        unpack_mean(flat, gs, self.P)


def env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")

