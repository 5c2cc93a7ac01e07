"""Point-to-point and all-reduce transport for one rank, with deadlines.

Why it cannot deadlock (see docs/executor.md for the long form): the schedule's
unit-time dry run proves every device reaches the end of its list when sends
are *buffered* (never block) and a device blocks only on the data its next
action needs. This module gives exactly those semantics:

- a send is ``dist.isend`` and is waited on only where the IR proves it has
  completed (:func:`stalesim.schedule.completion.send_release`: after a later
  message from the same peer that the peer sent after receiving it), or where
  waiting cannot deadlock; the rest at the end. gloo reports a send complete only
  when it is waited on, so without this every sent tensor would stay alive until
  the end of the run;
- a receive is posted early (``dist.irecv``, the action list says what comes)
  and waited on only at its ``RECV_*`` action, i.e. just before the F/B that uses it;
- every message between two ranks has its own tag derived from the action key
  (gloo pairs messages by (source, tag), so posting order cannot mismatch them);
- on NCCL, which pairs by order per communicator, activations and gradients use
  two separate process groups (one direction each), so the k-th send on a
  (pair, direction) always meets the k-th receive, which both sides post in
  their list order (forwards and backwards of a stage are in batch order in
  every schedule).

Every wait has a deadline (``timeout``); a timed-out or broken wait raises
:class:`TransportError` naming the action and the peer rank.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

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

    work: Any
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
    fwd_group: Any = None  # NCCL: a group for activations (+labels), one for gradients
    bwd_group: Any = None
    ar_group: Any = None
    sends: dict[int, Pending] = field(default_factory=dict)  # id -> send not yet waited on
    bytes_sent: int = 0

    @property
    def _td(self) -> datetime.timedelta:
        return datetime.timedelta(seconds=self.timeout_s)

    # ------------------------------------------------------------------ p2p
    def post_recv(self, buf: torch.Tensor, src: int, tag: int, action: str, what: str,
                  group: Any = None) -> Pending:
        try:
            work = dist.irecv(buf, src=src, tag=tag, group=group)
        except RuntimeError as exc:
            raise self._error(exc, action, src, f"posting the receive of {what}") from None
        return Pending(work, buf, action, src, what)

    def send(self, tensor: torch.Tensor, dst: int, tag: int, action: str, what: str,
             group: Any = None, count: bool = True) -> Pending:
        """``isend``; the transport keeps the tensor until the send completes (``count``: the
        rank's memory accounting counts it meanwhile; labels are not counted)."""
        tensor = tensor.detach()
        if not tensor.is_contiguous():
            tensor = tensor.contiguous()
        try:
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
            p.work.wait(timeout=self._td)
        except RuntimeError as exc:
            raise self._error(exc, p.action, p.peer, f"waiting on {p.what}") from None
        return p.tensor

    def complete(self, p: Pending) -> None:
        """Wait for a send (the caller knows it has completed) and drop the tensor."""
        if self.sends.pop(id(p), None) is not None:
            self.wait(p)

    def flush(self) -> None:
        """Wait for every outstanding send (end of the list)."""
        for p in list(self.sends.values()):
            self.wait(p)
        self.sends.clear()

    # ------------------------------------------------------------- all-reduce
    def all_reduce_start(self, flat: torch.Tensor, action: str) -> Pending:
        try:
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
