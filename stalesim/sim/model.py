"""Simulator inputs, resolved to integers: per-stage costs in ns and the hardware model.

Everything the engine and the fast path need is computed here once, so both
consume *the same* integer numbers (which is why they can agree to 1e-9):

* :class:`SimHardware`: link latency (ns) and bandwidth, whether communication
  overlaps compute (copy engines), the CPU occupancy of a transfer, the
  all-reduce algorithm and the topology of the links.
* :class:`StageCosts`: per stage, forward/backward at the (micro-)batch size,
  update, loss, message and memory bytes, all from the profile's per-layer
  numbers summed over the stage's layers (``Profile.stage_layers``).

Time is integer nanoseconds: SimPy's clock would drift with float seconds, and
integer ticks make event and closed-form results compare exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stalesim.errors import StalesimError
from stalesim.units import fmt_bandwidth, fmt_seconds

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.workloads.hardware import Hardware, LinkSpec
    from stalesim.workloads.profile import Profile

NS = 1_000_000_000
TOPOLOGIES = ("p2p", "nic", "bus")


def to_ns(seconds: float) -> int:
    """Seconds -> integer nanoseconds (rounded)."""
    return round(seconds * NS)


@dataclass(frozen=True)
class SimCluster:
    """Nodes and the network between them, in the simulator's integer units.

    The intra-node link is the :class:`SimHardware`'s own link; ``inter_*`` is the
    network link between devices of different nodes (per device: one NIC per GPU).
    ``inter_algorithm`` times the inter-node phase of the hierarchical all-reduce
    (:meth:`SimHardware.group_allreduce_ns`).
    """

    node_size: int
    inter_link: str
    inter_latency_ns: int = 0
    inter_bandwidth_Bps: float = math.inf
    inter_algorithm: str = "ring"

    def __post_init__(self) -> None:
        if isinstance(self.node_size, bool) or not isinstance(self.node_size, int) or self.node_size < 1:
            raise StalesimError(f"cluster.node_size: expected an integer >= 1, got {self.node_size!r}")
        if not (self.inter_bandwidth_Bps > 0):
            raise StalesimError(f"cluster.inter_link.bandwidth_Bps: must be > 0, got {self.inter_bandwidth_Bps!r}")
        if self.inter_latency_ns < 0:
            raise StalesimError(f"cluster.inter_link.latency_s: must be >= 0, got {self.inter_latency_ns / NS!r}")
        if self.inter_algorithm not in ("ring", "tree"):
            raise StalesimError(
                f"cluster.inter_algorithm: expected ring or tree, got {self.inter_algorithm!r}")

    def serialize_ns(self, nbytes: float) -> int:
        if math.isinf(self.inter_bandwidth_Bps) or nbytes <= 0:
            return 0
        return to_ns(nbytes / self.inter_bandwidth_Bps)

    def to_dict(self) -> dict[str, Any]:
        return {"node_size": self.node_size, "inter_link": self.inter_link,
                "inter_latency_s": self.inter_latency_ns / NS,
                "inter_bandwidth_Bps": None if math.isinf(self.inter_bandwidth_Bps) else self.inter_bandwidth_Bps,
                "inter_algorithm": self.inter_algorithm}


@dataclass(frozen=True)
class SimHardware:
    """The hardware facts the simulator uses.

    ``topology``: ``p2p`` (default) = a dedicated full-duplex link per device
    pair, each direction a FIFO channel; ``nic`` = one egress channel per device
    (all of a device's sends queue on its NIC, receives are free); ``bus`` = one
    shared half-duplex channel for every transfer. A channel is held for
    ``bytes / bandwidth``; the message arrives ``latency`` after it leaves the
    channel (latency is pipelined, bandwidth is not). All-reduces use one FIFO
    "ring" channel (every step of a ring collective uses every link).
    """

    device: str
    link: str
    latency_ns: int = 0
    bandwidth_Bps: float = math.inf
    comm_overlaps_compute: bool = True
    cpu_comm_occupancy: float = 0.0
    allreduce_algorithm: str = "ring"
    topology: str = "p2p"
    memory_bytes: float | None = None
    notes: tuple[str, ...] = ()
    # a device blocked on a receive or an all-reduce resumes this long after the data is
    # there (thread wake-up); 0 when ``latency`` was measured to a blocked receiver already
    wake_ns: int = 0
    # a measured all-reduce (this worker count): alpha + bytes / bandwidth replaces the ring
    # formula when set (a CPU transport's collective is not the link's alpha-beta)
    allreduce_alpha_ns: int | None = None
    allreduce_bandwidth_Bps: float | None = None
    cluster: SimCluster | None = None  # nodes + network; None: every device on one node

    def __post_init__(self) -> None:
        if self.topology not in TOPOLOGIES:
            raise StalesimError(f"topology: expected one of {', '.join(TOPOLOGIES)}, got {self.topology!r}")
        if not (self.bandwidth_Bps > 0):
            raise StalesimError(f"link.bandwidth_Bps: must be > 0, got {self.bandwidth_Bps!r}")
        if self.latency_ns < 0:
            raise StalesimError(f"link.latency_s: must be >= 0, got {self.latency_ns / NS!r}")
        occ = self.cpu_comm_occupancy
        if not 0 <= occ <= 1:
            raise StalesimError(f"cpu_comm_occupancy: must be in [0, 1], got {occ!r}")
        if self.wake_ns < 0:
            raise StalesimError(f"wake_s: must be >= 0, got {self.wake_ns / NS!r}")
        if self.allreduce_algorithm not in ("ring", "tree"):
            raise StalesimError(f"allreduce.algorithm: expected ring or tree, got {self.allreduce_algorithm!r}")

    # ------------------------------------------------------------ construction
    @classmethod
    def ideal(cls, device: str = "profile device") -> SimHardware:
        """Zero latency, unlimited bandwidth: communication costs nothing."""
        return cls(device=device, link="ideal")

    @classmethod
    def from_hardware(cls, hw: Hardware, *, topology: str | None = None,
                      comm_overlaps_compute: bool | None = None,
                      cpu_comm_occupancy: float | None = None) -> SimHardware:
        """From a :class:`stalesim.workloads.hardware.Hardware` (catalog or JSON).

        ``topology`` defaults to the link's ``topology`` field (JSON extra) or ``p2p``.
        """
        link = hw.link
        topo = topology or str(link.extra.get("topology", "p2p"))
        return cls(
            device=hw.device.key or hw.device.name,
            link=link.key or link.name,
            latency_ns=to_ns(link.latency_s),
            bandwidth_Bps=link.bandwidth_Bps,
            comm_overlaps_compute=hw.comm_overlaps_compute if comm_overlaps_compute is None
            else comm_overlaps_compute,
            cpu_comm_occupancy=hw.cpu_comm_occupancy if cpu_comm_occupancy is None else cpu_comm_occupancy,
            allreduce_algorithm=hw.allreduce_algorithm,
            topology=topo,
            memory_bytes=hw.device.memory_bytes,
            cluster=None if hw.cluster is None else SimCluster(
                node_size=hw.cluster.node_size, inter_link=hw.cluster.inter_link.key or hw.cluster.inter_link.name,
                inter_latency_ns=to_ns(hw.cluster.inter_link.latency_s),
                inter_bandwidth_Bps=hw.cluster.inter_link.bandwidth_Bps,
                inter_algorithm=hw.cluster.inter_algorithm),
        )

    @classmethod
    def from_link(cls, device: str, link: LinkSpec, *, overlaps: bool, occupancy: float,
                  topology: str = "p2p", algorithm: str = "ring") -> SimHardware:
        """The profile's own device (not a catalog part) over a catalog link."""
        return cls(device=device, link=link.key or link.name, latency_ns=to_ns(link.latency_s),
                   bandwidth_Bps=link.bandwidth_Bps, comm_overlaps_compute=overlaps,
                   cpu_comm_occupancy=occupancy, allreduce_algorithm=algorithm, topology=topology)

    # ------------------------------------------------------------ costs
    @property
    def is_ideal(self) -> bool:
        return self.latency_ns == 0 and math.isinf(self.bandwidth_Bps)

    def serialize_ns(self, nbytes: float) -> int:
        """Time a message of ``nbytes`` holds its channel."""
        if math.isinf(self.bandwidth_Bps) or nbytes <= 0:
            return 0
        return to_ns(nbytes / self.bandwidth_Bps)

    def p2p_ns(self, nbytes: float) -> int:
        """One transfer alone on its link: latency + bytes / bandwidth."""
        return self.latency_ns + self.serialize_ns(nbytes)

    def allreduce_ns(self, nbytes: float, workers: int) -> int:
        """ring: 2(P-1)a + 2(P-1)/P n/b; tree: 2 ceil(log2 P)(a + n/b); 0 for P = 1."""
        p = int(workers)
        if p <= 1:
            return 0
        if self.allreduce_alpha_ns is not None:
            bw = self.allreduce_bandwidth_Bps
            return self.allreduce_alpha_ns + (0 if bw is None or math.isinf(bw) else to_ns(nbytes / bw))
        nb = 0.0 if math.isinf(self.bandwidth_Bps) else nbytes / self.bandwidth_Bps
        a = self.latency_ns
        if self.allreduce_algorithm == "ring":
            return 2 * (p - 1) * a + to_ns(2 * (p - 1) / p * nb)
        steps = 2 * math.ceil(math.log2(p))
        return steps * a + to_ns(steps * nb)

    def group_allreduce_ns(self, nbytes: float, per_node: Sequence[int]) -> int:
        """All-reduce over a group with ``per_node[i]`` members on its i-th node.

        Without a cluster every device shares one node: :meth:`allreduce_ns` over the
        members. With one: hierarchical (reduce-scatter inside each node over this
        hardware's link, all-reduce of each 1/k shard across the m nodes over the
        network, all-gather inside the node), the integer twin of
        :meth:`stalesim.workloads.hardware.ClusterSpec.allreduce_time`::

            2(k-1) a_i + 2(k-1)/k n b_i + [ring] 2(m-1) a_e + 2(m-1)/m (n/k) b_e
                                            [tree] 2 ceil(log2 m)(a_e + (n/k) b_e)

        (k: largest node share for the intra phase, smallest for the shard size).
        """
        counts = [int(c) for c in per_node if c > 0]
        members = sum(counts)
        if members <= 1:
            return 0
        c = self.cluster
        if c is None:
            return self.allreduce_ns(nbytes, members)
        k, k_min, m = max(counts), min(counts), len(counts)
        t = 0
        if k > 1:
            nb = 0.0 if math.isinf(self.bandwidth_Bps) else nbytes / self.bandwidth_Bps
            t += 2 * (k - 1) * self.latency_ns + to_ns(2 * (k - 1) / k * nb)
        if m > 1:
            nb = 0.0 if math.isinf(c.inter_bandwidth_Bps) else nbytes / k_min / c.inter_bandwidth_Bps
            if c.inter_algorithm == "ring":
                t += 2 * (m - 1) * c.inter_latency_ns + to_ns(2 * (m - 1) / m * nb)
            else:
                steps = 2 * math.ceil(math.log2(m))
                t += steps * c.inter_latency_ns + to_ns(steps * nb)
        return t

    def cpu_ns(self, comm_ns: int) -> int:
        """Compute time a transfer of ``comm_ns`` takes from a core (0 with copy engines)."""
        if self.comm_overlaps_compute or comm_ns <= 0:
            return 0
        return round(self.cpu_comm_occupancy * comm_ns)

    def describe(self) -> str:
        ov = "overlaps compute" if self.comm_overlaps_compute else \
            f"occupies the core {self.cpu_comm_occupancy:g} of its time"
        bw = fmt_bandwidth(self.bandwidth_Bps)
        text = (f"device {self.device}; link {self.link} (latency {fmt_seconds(self.latency_ns / NS)}, "
                f"bandwidth {bw}, topology {self.topology}); communication {ov}; "
                f"all-reduce {self.allreduce_algorithm}")
        c = self.cluster
        if c is not None:
            ibw = fmt_bandwidth(c.inter_bandwidth_Bps)
            text += (f"; nodes of {c.node_size} devices, link {self.link} inside a node, "
                     f"{c.inter_link} between nodes (latency {fmt_seconds(c.inter_latency_ns / NS)}, bandwidth {ibw}), "
                     f"hierarchical all-reduce ({c.inter_algorithm} across nodes)")
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device, "link": self.link, "latency_s": self.latency_ns / NS,
            "bandwidth_Bps": None if math.isinf(self.bandwidth_Bps) else self.bandwidth_Bps,
            "comm_overlaps_compute": self.comm_overlaps_compute,
            "cpu_comm_occupancy": self.cpu_comm_occupancy,
            "allreduce_algorithm": self.allreduce_algorithm, "topology": self.topology,
            "wake_s": self.wake_ns / NS,
            "allreduce_alpha_s": None if self.allreduce_alpha_ns is None else self.allreduce_alpha_ns / NS,
            "allreduce_bandwidth_Bps": self.allreduce_bandwidth_Bps, "notes": list(self.notes),
            **({} if self.cluster is None else {"cluster": self.cluster.to_dict()}),
        }


@dataclass(frozen=True)
class StageCosts:
    """Per-stage integer costs for one simulation.

    ``f_ns``/``b_ns``: forward/backward of one action (a micro-batch for
    micro-batched schedules, a worker's slice for data-parallel ones);
    ``bi_ns``/``bw_ns``: the two halves of a split backward (``I``: input
    gradient, ``W``: weight gradient), measured by the profiler or, when the
    profile has no split, ``b_ns`` cut by ``WEIGHT_GRAD_FRACTION`` (empty tuples
    mean that estimate too); ``wgrad_bytes``: what a deferred ``W`` keeps
    between its I and W (the output gradient of each block of the stage);
    ``u_ns``: the stage's optimizer update; ``loss_ns``: one LOSS action;
    ``msg_bytes[s]``: stage s's output per action (sent forward, and the same
    size comes back as the gradient); ``param_bytes``/``saved_bytes`` for
    memory; ``seq_ns``: one whole mini-batch on one device (the baseline).

    What a runtime spends per action besides the arithmetic, per action kind
    (``Kind`` value) and stage, as ``((kind, (ns per stage, ...)), ...)``
    (empty: nothing; see :meth:`gap_table`):

    * ``gap_ns``: the runtime's own time *after* each action of that kind before
      the next one starts (dispatch loop, bookkeeping); the device is busy but no
      action runs (utilization does not count it);
    * ``comm_ns``: the CPU time of a communication action itself (SEND_*: posting,
      before the message leaves; RECV_* and ARW: completing, after the data is
      there; AR: packing and starting the collective);
    * ``arrival_ns`` (RECV_* only): the compute a receiver loses to a message that
      arrives while it computes (its transport reads the bytes on the core it computes
      on). The event engine charges it to a receive that finds its message already
      there; a receive that blocked lost nothing to it (the wait is in the latency).

    ``buffer_bytes``: per stage, non-trainable state (BatchNorm statistics) for
    memory (empty: none). ``transient_bytes``: per action kind and stage, as
    ``((kind, (bytes per stage, ...)), ...)``, the CUDA bytes an action of that kind holds
    at its peak beyond the larger of the states before and after it (gradients of
    intermediate activations, cuDNN's workspace, the optimizer's temporaries);
    ``library_bytes``: the CUDA bytes of a device that no tensor of the run owns (cuBLAS's
    workspace per thread that runs matrix products, the allocator's rounding). Both from
    :func:`stalesim.runtime.memfacts.stage_cuda_memory_terms`; empty / 0 on a CPU, where
    the count is exact. ``optimizer_bytes``:
    per stage, the optimizer state the stage's optimizer holds once every parameter was
    updated (Adam: two moments, Muon's matrices: one, error feedback: one more), measured
    from the run's optimizer; empty: ``optimizer_state_factor`` x the parameter bytes.
    """

    f_ns: tuple[int, ...]
    b_ns: tuple[int, ...]
    u_ns: tuple[int, ...]
    loss_ns: int
    msg_bytes: tuple[int, ...]
    param_bytes: tuple[int, ...]
    saved_bytes: tuple[int, ...]
    seq_ns: int
    batch_size: int
    action_batch: int  # samples per F/B action (micro-batch or worker slice)
    cuts: tuple[int, ...] = ()
    ppv: tuple[int, ...] = ()
    layer_ranges: tuple[tuple[int, int], ...] = field(default_factory=tuple)
    gap_ns: tuple[tuple[str, tuple[int, ...]], ...] = ()
    comm_ns: tuple[tuple[str, tuple[int, ...]], ...] = ()
    buffer_bytes: tuple[int, ...] = ()
    # where the times come from, per batch size used: {"action_batch": CostSource dict,
    # "batch_size": CostSource dict} (stalesim.workloads.scaling); empty = given by hand
    cost_source: dict[str, Any] = field(default_factory=dict)
    bi_ns: tuple[int, ...] = ()
    bw_ns: tuple[int, ...] = ()
    wgrad_bytes: tuple[int, ...] = ()
    transient_bytes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    library_bytes: int = 0
    optimizer_bytes: tuple[int, ...] = ()  # measured optimizer state per stage (empty: factor x params)
    # per stage, the bytes of the end-of-batch data-parallel collective, timed as an all-reduce
    # (empty: param_bytes, the gradients' all-reduce); sharded data parallelism moves less there
    # (ZeRO-2: the updated weights' all-gather, ZeRO-3: nothing) and more per micro-batch
    allreduce_bytes: tuple[int, ...] = ()
    arrival_ns: tuple[tuple[str, tuple[int, ...]], ...] = ()
    # per stage, the saved inputs of the weight layers a deferred W reads, for a runtime that frees
    # the rest of a micro-batch's activations after its I (the zero-bubble implementation; empty:
    # the whole activation set stays until W, as stalesim's own runtime keeps it)
    w_input_bytes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        S = len(self.f_ns)
        for name in ("gap_ns", "comm_ns", "arrival_ns", "transient_bytes"):
            for kind, per in getattr(self, name):
                if len(per) != S or any(int(v) < 0 for v in per):
                    raise StalesimError(f"{name}[{kind}]: expected {S} values >= 0, got {list(per)}")
        if int(self.library_bytes) < 0:
            raise StalesimError(f"library_bytes: expected >= 0, got {self.library_bytes}")
        for name in ("buffer_bytes", "optimizer_bytes", "allreduce_bytes"):
            per = getattr(self, name)
            if per and len(per) != S:
                raise StalesimError(f"{name}: expected {S} values, got {len(per)}")

    @property
    def stages(self) -> int:
        return len(self.f_ns)

    def gap_table(self) -> dict[str, tuple[int, ...]]:
        """``gap_ns`` as {kind: per-stage ns}."""
        return {k: tuple(int(x) for x in v) for k, v in self.gap_ns}

    def transient_table(self) -> dict[str, tuple[int, ...]]:
        """``transient_bytes`` as {kind: per-stage bytes}."""
        return {k: tuple(int(x) for x in v) for k, v in self.transient_bytes}

    def comm_table(self) -> dict[str, tuple[int, ...]]:
        """``comm_ns`` as {kind: per-stage ns}."""
        return {k: tuple(int(x) for x in v) for k, v in self.comm_ns}

    def arrival_table(self) -> dict[str, tuple[int, ...]]:
        """``arrival_ns`` as {kind: per-stage ns}."""
        return {k: tuple(int(x) for x in v) for k, v in self.arrival_ns}

    def with_overheads(self, gap: dict[str, Sequence[int]] | None = None,
                       comm: dict[str, Sequence[int]] | None = None,
                       arrival: dict[str, Sequence[int]] | None = None) -> StageCosts:
        """A copy with these per-kind tables (kinds not given keep their values)."""
        from dataclasses import replace

        def merged(table: dict[str, tuple[int, ...]],
                   new: dict[str, Sequence[int]] | None) -> tuple[tuple[str, tuple[int, ...]], ...]:
            table.update({k: tuple(int(x) for x in v) for k, v in (new or {}).items()})
            return tuple(sorted(table.items()))

        return replace(self, gap_ns=merged(self.gap_table(), gap), comm_ns=merged(self.comm_table(), comm),
                       arrival_ns=merged(self.arrival_table(), arrival))

    def split_ns(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(I, W) per stage: the given halves, else B split by WEIGHT_GRAD_FRACTION."""
        if self.bi_ns and self.bw_ns:
            return self.bi_ns, self.bw_ns
        from stalesim.workloads.profile import WEIGHT_GRAD_FRACTION

        w = tuple(round(b * WEIGHT_GRAD_FRACTION) for b in self.b_ns)
        return tuple(b - x for b, x in zip(self.b_ns, w)), w

    def deferred_w_bytes(self) -> tuple[int, ...]:
        return self.wgrad_bytes or self.msg_bytes

    def dp_bytes(self) -> tuple[int, ...]:
        """Bytes each stage's end-of-batch data-parallel all-reduce moves (``allreduce_bytes``,
        else the parameters')."""
        return self.allreduce_bytes or self.param_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "cuts": list(self.cuts), "ppv": list(self.ppv),
            "layer_ranges": [list(r) for r in self.layer_ranges],
            "forward_s": [x / NS for x in self.f_ns], "backward_s": [x / NS for x in self.b_ns],
            "update_s": [x / NS for x in self.u_ns], "loss_s": self.loss_ns / NS,
            "message_bytes": list(self.msg_bytes), "param_bytes": list(self.param_bytes),
            "saved_bytes": list(self.saved_bytes), "action_batch": self.action_batch,
            "gap_s": {k: [x / NS for x in v] for k, v in self.gap_ns},
            "comm_cpu_s": {k: [x / NS for x in v] for k, v in self.comm_ns},
            "arrival_cpu_s": {k: [x / NS for x in v] for k, v in self.arrival_ns},
            "buffer_bytes": list(self.buffer_bytes),
            "cost_source": {k: dict(v) for k, v in self.cost_source.items()},
            "backward_input_s": [x / NS for x in self.split_ns()[0]],
            "backward_weight_s": [x / NS for x in self.split_ns()[1]],
        }


def uniform_costs(stages: int, f_ns: int, b_ns: int, u_ns: int = 0, *, loss_ns: int = 0,
                  msg_bytes: int = 0, param_bytes: int = 0, saved_bytes: int = 0,
                  batch_size: int = 1, action_batch: int = 1,
                  seq_ns: int | None = None, bi_ns: int | None = None,
                  bw_ns: int | None = None) -> StageCosts:
    """Identical stages (tests and benchmarks). ``bi_ns``/``bw_ns``: the split backward
    (default: ``b_ns`` split by WEIGHT_GRAD_FRACTION)."""
    S = stages
    if seq_ns is None:
        scale = batch_size // max(1, action_batch)
        seq_ns = S * (scale * (f_ns + b_ns) + u_ns) + loss_ns * scale
    split = bi_ns is not None and bw_ns is not None
    return StageCosts((f_ns,) * S, (b_ns,) * S, (u_ns,) * S, loss_ns, (msg_bytes,) * S,
                      (param_bytes,) * S, (saved_bytes,) * S, seq_ns, batch_size, action_batch,
                      bi_ns=(bi_ns,) * S if split else (),  # type: ignore[arg-type]
                      bw_ns=(bw_ns,) * S if split else ())  # type: ignore[arg-type]


def resolve_cuts(profile: Profile, stages: int | None, ppv: Sequence[int] | None,
                 batch_size: int) -> tuple[list[int], list[int]]:
    """Cuts and PPV from ``--ppv`` or the exact min-max partitioner (F+B+U cost)."""
    from stalesim.workloads.partition import (
        min_max_partition,
        weights_cuts_to_ppv,
        weights_ppv_to_cuts,
    )

    wl = profile.weight_layers
    if ppv is not None:
        ppv = list(ppv)
        if stages is not None and stages != len(ppv) + 1:
            raise StalesimError(
                f"ppv: {len(ppv)} entries give {len(ppv) + 1} stages, but --stages is {stages}"
            )
        cuts = weights_ppv_to_cuts(wl, ppv)
        return cuts, ppv
    S = stages or 1
    if profile.n_layers < S:
        raise StalesimError(
            f"stages: {S} stages requested but the profile has only {profile.n_layers} layers"
        )
    if S == 1:
        return [], []
    scaled = profile.at_batch_size(batch_size)
    part = min_max_partition(scaled.costs(), S, weight_layers=wl)
    try:
        ppv_out = weights_cuts_to_ppv(wl, part.cuts)
    except StalesimError:
        ppv_out = list(part.ppv)
    return list(part.cuts), ppv_out


def stage_costs(profile: Profile, cuts: Sequence[int], *, batch_size: int, action_batch: int,
                loss_s: float = 0.0, ppv: Sequence[int] = ()) -> StageCosts:
    """Sum the profile's layers per stage at ``action_batch`` (and at ``batch_size`` for the baseline)."""
    from stalesim.workloads.partition import stage_ranges

    at = profile.at_batch_size(action_batch)
    small = at.stage_layers(list(cuts))
    ranges = stage_ranges(list(cuts), profile.n_layers)
    full = profile.at_batch_size(batch_size).stage_layers(list(cuts))
    loss_ns = to_ns(loss_s * action_batch / batch_size) if loss_s else 0
    seq = sum(to_ns(st.forward_s) + to_ns(st.backward_s) + to_ns(st.update_s) for st in full)
    seq += to_ns(loss_s) if loss_s else 0
    return StageCosts(
        f_ns=tuple(to_ns(st.forward_s) for st in small),
        b_ns=tuple(to_ns(st.backward_s) for st in small),
        u_ns=tuple(to_ns(st.update_s) for st in small),
        loss_ns=loss_ns,
        msg_bytes=tuple(int(st.output_bytes) for st in small),
        param_bytes=tuple(int(st.param_bytes) for st in small),
        saved_bytes=tuple(int(st.saved_bytes) for st in small),
        seq_ns=seq,
        batch_size=batch_size,
        action_batch=action_batch,
        cuts=tuple(cuts), ppv=tuple(ppv),
        layer_ranges=tuple(ranges),
        cost_source={"action_batch": profile.cost_source(action_batch).to_dict(),
                     "batch_size": profile.cost_source(batch_size).to_dict()},
        bi_ns=tuple(to_ns(st.backward_split()[0]) for st in small),
        bw_ns=tuple(to_ns(st.backward_split()[1]) for st in small),
        wgrad_bytes=tuple(sum(int(lp.output_bytes) for lp in at.layers[a:b]) for a, b in ranges),
    )
