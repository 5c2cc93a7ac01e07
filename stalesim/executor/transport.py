"""Point-to-point and all-reduce transport for one rank, with deadlines.

Why it cannot deadlock (see docs/executor.md, "Point-to-point under NCCL", for the
long form): the schedule's unit-time dry run proves every device reaches the end
of its list when sends are *buffered* and a device blocks only on the data its
next action needs; NCCL does not buffer, so the executor also keeps NCCL's
ordering rules, which :func:`stalesim.schedule.comm_check.check_comm_order`
checks for every registered schedule:

- one process group per directed edge and channel
  (:func:`stalesim.schedule.comm.edges`): on each, this rank only sends or only
  receives, with one peer, so no receive of its own can queue ahead of one of its
  sends;
- receives are posted as :func:`stalesim.schedule.comm.posting_plan` says (each
  edge's in its sender's order, up to ``recv_ahead`` ahead) and waited on only at
  their ``RECV_*`` action, i.e. just before the F/B that uses them;
- a send is ``dist.isend`` and is waited on only where the IR proves it has
  completed or waiting cannot deadlock
  (:func:`stalesim.schedule.completion.send_release`); the rest at the end. gloo
  reports a send complete only when it is waited on, so without this every sent
  tensor would stay alive until the end of the run;
- every message between two ranks has its own tag derived from the action key
  (gloo pairs by (source, tag); NCCL ignores tags and pairs by order, which the
  plan makes the same pairing).

Waits: on gloo ``work.wait(timeout)``; on NCCL ``work.wait()`` without a timeout,
which only makes the compute stream wait for the NCCL stream (with a timeout,
ProcessGroupNCCL's ``WorkNCCL::wait`` busy-waits the host in 1 ms sleeps until the
op is done), so the deadline there is the process group's own (its ``timeout``,
enforced by its watchdog). Under ``STALESIM_STRICT_COMM=1`` the operations run on
:class:`stalesim.executor.strict.StrictComm` (NCCL's rules on gloo). A timed-out or broken
wait raises :class:`TransportError` naming the action and the peer rank.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.executor.strict import StrictComm, StrictWork

# Channels of one point-to-point action: the activation, the labels riding with
# it, the gradient.
ACT, LABELS, GRAD = 0, 1, 2
_T_WRAP = 4096  # batches in flight are far fewer; tags stay < 2**31
_M_WRAP = 65
_S_WRAP = 64


class TransportError(RuntimeError):
    """A receive, send or all-reduce that failed or missed its deadline."""

    def __init__(self, message: str, action: str | None = None, peer: int | None = None):
        super().__init__(message)
        self.action = action
        self.peer = peer


def tag_for(channel: int, stage: int, batch: int, micro: int | None) -> int:
    """Tag of one message, from the *sending* stage's action key and the channel.

    Unique among the messages a rank can have in flight with one peer (batch
    wraps at 4096, far beyond any pipeline depth), and below 2**31.
    """
    m = 0 if micro is None else (micro % (_M_WRAP - 1)) + 1
    return (((batch % _T_WRAP) * _M_WRAP + m) * _S_WRAP + stage % _S_WRAP) * 4 + channel


@dataclass
class Pending:
    """One posted non-blocking operation and what it is for (for error messages)."""

    work: Any  # dist.Work, a StrictWork, or what torch returns outside a group (None)
    tensor: torch.Tensor
    action: str
    peer: int | None
    what: str
    counted: bool = False  # a send whose storage the rank's memory accounting counts
    storage: int = 0
    nbytes: int = 0


@dataclass
class Transport:
    """Posts and completes the point-to-point messages and all-reduces of one rank."""

    rank: int
    timeout_s: float
    nccl: bool = False  # wait without a host-side timeout (see the module doc)
    strict: StrictComm | None = None  # NCCL's ordering enforced on gloo
    ar_group: dist.ProcessGroup | None = None  # None: the default group
    sends: dict[int, Pending] = field(default_factory=dict)  # id -> send not yet waited on
    bytes_sent: int = 0

    @property
    def _td(self) -> datetime.timedelta:
        return datetime.timedelta(seconds=self.timeout_s)

    # ------------------------------------------------------------------ p2p
    def post_recv(self, buf: torch.Tensor, src: int, tag: int, action: str, what: str,
                  group: dist.ProcessGroup | None = None) -> Pending:
        self._check_device(buf, action, src, f"receiving {what}")
        work: dist.Work | StrictWork | None
        try:
            if self.strict is not None:
                work = self.strict.recv(buf, src, tag, group)
            else:
                work = dist.irecv(buf, src=src, tag=tag, group=group)
        except RuntimeError as exc:
            raise self._error(exc, action, src, f"posting the receive of {what}") from None
        return Pending(work, buf, action, src, what)

    def send(self, tensor: torch.Tensor, dst: int, tag: int, action: str, what: str,
             group: dist.ProcessGroup | None = None, count: bool = True) -> Pending:
        """``isend``; the transport keeps the tensor until the send completes (``count``: the
        rank's memory accounting counts it meanwhile; labels are not counted)."""
        tensor = tensor.detach()
        if not tensor.is_contiguous():
            tensor = tensor.contiguous()
        self._check_device(tensor, action, dst, f"sending {what}")
        work: dist.Work | StrictWork | None
        try:
            if self.strict is not None:
                work = self.strict.send(tensor, dst, tag, group)
            else:
                work = dist.isend(tensor, dst=dst, tag=tag, group=group)
        except RuntimeError as exc:
            raise self._error(exc, action, dst, f"sending {what}") from None
        self.bytes_sent += tensor.numel() * tensor.element_size()
        p = Pending(work, tensor, action, dst, what)
        if count:
            st = tensor.untyped_storage()
            p.counted, p.storage, p.nbytes = True, int(st.data_ptr()), int(st.nbytes())
        self.sends[id(p)] = p
        return p

    def wait(self, p: Pending) -> torch.Tensor:
        """Block until ``p`` completes or its deadline passes."""
        try:
            if self.nccl:
                p.work.wait()  # a stream wait; the deadline is the process group's watchdog
            else:
                p.work.wait(timeout=self._td)
        except RuntimeError as exc:
            raise self._error(exc, p.action, p.peer, f"waiting on {p.what}") from None
        return p.tensor

    def complete(self, p: Pending) -> None:
        """Wait for a send (the caller knows it has completed) and drop the tensor."""
        if self.sends.pop(id(p), None) is not None:
            self.wait(p)

    def flush(self) -> None:
        """Wait for every outstanding send (end of the list); stop the strict lanes."""
        for p in list(self.sends.values()):
            self.wait(p)
        self.sends.clear()
        if self.strict is not None:
            self.strict.close()

    def _check_device(self, tensor: torch.Tensor, action: str, peer: int | None, doing: str) -> None:
        """Strict mode: NCCL only moves tensors on the rank's compute device."""
        why = self.strict.check_device(tensor) if self.strict is not None else None
        if why is not None:
            who = f" from/to rank {peer}" if peer is not None else ""
            raise TransportError(f"rank {self.rank}: {doing}{who} at action {action}: {why}",
                                 action=action, peer=peer)

    # ------------------------------------------------------------- all-reduce
    def all_reduce_start(self, flat: torch.Tensor, action: str) -> Pending:
        self._check_device(flat, action, None, "starting the gradient all-reduce")
        work: dist.Work | StrictWork | None
        try:
            if self.strict is not None:
                work = self.strict.all_reduce(flat, self.ar_group)
            else:
                work = dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self.ar_group, async_op=True)
        except RuntimeError as exc:
            raise self._error(exc, action, None, "starting the gradient all-reduce") from None
        return Pending(work, flat, action, None, "the gradient all-reduce")

    # ----------------------------------------------------------------- errors
    def _error(self, exc: BaseException, action: str, peer: int | None, doing: str) -> TransportError:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        low = text.lower()
        if "timed out" in low or "timeout" in low:
            why = f"timed out after {self.timeout_s:g} s"
        elif "closed" in low or "reset" in low or "broken pipe" in low or "connection" in low:
            why = "lost the connection (a peer rank died)"
        else:
            why = f"failed ({text[:200]})"
        who = f" from/to rank {peer}" if peer is not None else ""
        return TransportError(f"rank {self.rank}: {why} {doing}{who} at action {action}",
                              action=action, peer=peer)
