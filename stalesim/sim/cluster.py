"""Data x pipeline parallelism on a cluster: placement, replica classes, the replicated IR.

P data-parallel replicas of one pipeline schedule (each replica D devices, its
S stages placed as the schedule places them), gradients of each stage
all-reduced across the P replicas of that stage. Three pieces:

* :class:`Layout`: which node each (replica, device) sits on. ``pipeline``
  placement (default) numbers devices replica by replica, ``g = r D + d``, so a
  pipeline of D <= G devices stays inside one node when G is a multiple of D:
  the per-micro-batch activation and gradient transfers, which sit on the
  critical path, use the intra-node link, and only the once-per-batch gradient
  all-reduce crosses nodes. ``data`` placement, ``g = d P + r`` (Megatron-LM's
  rank order with tensor parallelism 1: data-parallel rank fastest), puts the
  replicas of one stage next to each other instead (all-reduces mostly inside a
  node, pipeline transfers between nodes).
* **Replica classes**: two replicas whose consecutive devices are on the same
  node exactly where each other's are behave identically (same link for every
  transfer; groups and costs are shared). :meth:`Layout.classes` groups the P
  replicas by that signature; the simulator runs one representative per class.
  Collectives couple replicas only through their start (the last member's
  ``AR``), and members of a class issue at the same instants, so waiting for
  the representatives equals waiting for everyone: exact, not an approximation.
* :func:`replicate`: the IR of K replicas of a built (lowered) pipeline schedule,
  with ``AR(s, t)`` right after the last action it depends on (the stage's last
  backward of batch t, per :func:`stalesim.schedule.deps.dependencies`) and
  ``ARW(s, t)`` right before ``U(s, t)``. Built with every replica it is the full
  cluster schedule the tests simulate against the shortcut.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from stalesim.errors import StalesimError
from stalesim.schedule.actions import Action, Kind, act
from stalesim.schedule.deps import dependencies
from stalesim.schedule.ir import Schedule
from stalesim.sim.events import CommPlan
from stalesim.sim.model import SimHardware, StageCosts

PLACEMENTS = ("pipeline", "data")


@dataclass(frozen=True)
class Layout:
    """P replicas of D devices on nodes of ``node_size`` devices (None: one node)."""

    replicas: int
    per_replica: int
    node_size: int | None = None
    placement: str = "pipeline"

    def __post_init__(self) -> None:
        for name in ("replicas", "per_replica"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise StalesimError(f"{name}: expected an integer >= 1, got {v!r}")
        if self.placement not in PLACEMENTS:
            raise StalesimError(f"placement: expected one of {', '.join(PLACEMENTS)}, got {self.placement!r}")

    @property
    def devices(self) -> int:
        return self.replicas * self.per_replica

    @property
    def nodes(self) -> int:
        return 1 if self.node_size is None else math.ceil(self.devices / self.node_size)

    def global_device(self, replica: int, device: int) -> int:
        if self.placement == "pipeline":
            return replica * self.per_replica + device
        return device * self.replicas + replica

    def node(self, replica: int, device: int) -> int:
        return 0 if self.node_size is None else self.global_device(replica, device) // self.node_size

    def group_per_node(self, device: int) -> list[int]:
        """Members per node of the all-reduce group of replica device slot ``device``."""
        return list(Counter(self.node(r, device) for r in range(self.replicas)).values())

    def classes(self, pairs: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        """(representative replica, replicas in the class) for each distinct signature:
        for every communicating device pair of a replica, whether both ends share a node."""
        first: dict[tuple[bool, ...], int] = {}
        count: Counter[tuple[bool, ...]] = Counter()
        for r in range(self.replicas):
            sig = tuple(self.node(r, a) == self.node(r, b) for a, b in pairs)
            first.setdefault(sig, r)
            count[sig] += 1
        return [(first[sig], count[sig]) for sig in first]

    def to_dict(self) -> dict[str, object]:
        return {"replicas": self.replicas, "devices_per_replica": self.per_replica,
                "devices": self.devices, "node_size": self.node_size, "nodes": self.nodes,
                "placement": self.placement}


def send_pairs(sched: Schedule) -> list[tuple[int, int]]:
    """Device pairs (sender, receiver) one replica's pipeline transfers use."""
    pairs: set[tuple[int, int]] = set()
    for d, acts in enumerate(sched.device_actions):
        for a in acts:
            if a.kind is Kind.SEND_F:
                pairs.add((d, sched.device_of(a.stage + 1, a.worker)))
            elif a.kind is Kind.SEND_B:
                pairs.add((d, sched.device_of(a.stage - 1, a.worker)))
    return sorted(pairs)


def _with_allreduce(base: Schedule, acts: list[Action], worker: int, allreduce: bool) -> list[Action]:
    """One device list of ``base`` as replica ``worker``: AR after its last dependency,
    ARW before the update."""
    after: dict[int, list[Action]] = {}
    if allreduce:
        pos = {a.key: i for i, a in enumerate(acts)}
        for a in acts:
            if a.kind is Kind.U:
                deps = [pos[k] for k in dependencies(base, act(Kind.AR, a.stage, a.batch)) if k in pos]
                if not deps:  # every dependency of an AR is on its stage's device
                    raise StalesimError(f"replicas: no backward of stage {a.stage} batch {a.batch} on its device")
                after.setdefault(max(deps), []).append(act(Kind.AR, a.stage, a.batch, None, worker))
    out: list[Action] = []
    for i, a in enumerate(acts):
        if allreduce and a.kind is Kind.U:
            out.append(act(Kind.ARW, a.stage, a.batch, None, worker))
        out.append(replace(a, worker=worker) if worker else a)
        out.extend(after.get(i, ()))
    return out


def replicate(base: Schedule, workers: int, *, allreduce: bool) -> Schedule:
    """``workers`` replicas of the lowered one-replica pipeline ``base`` (see the module doc).

    Every replica reads the same weight versions as replica 0 (its actions are
    copies), so the version table is derived once per replica by the IR's pass.
    """
    if not base.lowered or base.workers != 1 or base.data_parallel:
        raise StalesimError("replicas: replicate a built one-replica pipeline schedule")
    if workers == 1 and not allreduce:
        return base
    from stalesim.schedule.versions import annotate

    D, S = base.num_devices, base.stages
    lists: list[list[Action]] = []
    placement: list[list[int]] = []
    for w in range(workers):
        placement.append([w * D + base.device_of(s) for s in range(S)])
        lists.extend(_with_allreduce(base, acts, w, allreduce) for acts in base.device_actions)
    sched = replace(base, workers=workers, device_actions=lists, placement=placement, versions=None)
    if workers == 1:
        return replace(sched, versions=base.versions)
    return annotate(sched)


# gradient buckets of one stage (DDP's 25 MiB buckets over a 25 GB stage are 1,000): each is
# an event per batch, so a tiny bucket size would never finish
MAX_BUCKETS = 1024


def comm_plan(sched: Schedule, layout: Layout, reps: Sequence[int], costs: StageCosts, hw: SimHardware,
              *, bucket_bytes: int | None, stage_slot: Sequence[int]) -> CommPlan:
    """The engine's :class:`CommPlan` for ``sched`` = the representatives ``reps`` of
    ``layout`` (program device ``w D + d`` is replica ``reps[w]``'s device slot d).

    ``stage_slot[s]``: the device slot of stage s within a replica. The all-reduce of
    stage s runs over the group of that slot (``layout.group_per_node``), split into
    ``ceil(param_bytes / bucket_bytes)`` equal buckets (one per stage without
    ``bucket_bytes``), each timed by :meth:`SimHardware.group_allreduce_ns`.
    """
    D = layout.per_replica
    node_of = tuple(layout.node(reps[dev // D], dev % D) for dev in range(sched.num_devices))
    c = hw.cluster
    inter_ser = tuple(c.serialize_ns(b) for b in costs.msg_bytes) if c is not None else \
        tuple(hw.serialize_ns(b) for b in costs.msg_bytes)
    inter_lat = c.inter_latency_ns if c is not None else hw.latency_ns
    groups = {d: layout.group_per_node(d) for d in set(stage_slot)}
    buckets: list[tuple[int, ...]] = []
    for s, pb in enumerate(costs.dp_bytes()):
        k = max(1, math.ceil(pb / bucket_bytes)) if bucket_bytes and pb > 0 else 1
        if k > MAX_BUCKETS:
            raise StalesimError(f"bucket_bytes: {bucket_bytes} bytes cut stage {s}'s {pb:,} gradient bytes "
                                f"into {k:,} buckets (at most {MAX_BUCKETS:,}); use larger buckets")
        per = hw.group_allreduce_ns(pb / k, groups[stage_slot[s]]) if layout.replicas > 1 else 0
        buckets.append((per,) * k)
    return CommPlan(node_of=node_of, inter_ser=inter_ser, inter_latency_ns=inter_lat,
                    ar_buckets=tuple(buckets), ar_ring=tuple(stage_slot), members=sched.workers)


def with_cluster(hw: SimHardware, *, node: str | None = None, node_size: int | None = None,
                 inter_link: str | None = None, inter_algorithm: str | None = None) -> SimHardware:
    """``hw`` on a cluster: a catalog ``node`` (its size and network), or ``node_size`` and a
    catalog ``inter_link``; each given value overrides the node's or ``hw``'s own cluster.
    Unchanged when nothing is given."""
    from stalesim.sim.model import SimCluster, to_ns
    from stalesim.workloads.hardware import get_link, get_node

    size, inter = node_size, inter_link
    if node:
        spec = get_node(node)
        size = size or spec.node_size
        inter = inter or spec.inter_link.key
    c = hw.cluster
    if size is None and inter is None:
        if inter_algorithm and c is not None:
            return replace(hw, cluster=replace(c, inter_algorithm=inter_algorithm))
        if inter_algorithm:
            raise StalesimError("inter_algorithm: needs a cluster (a node, or a node size and an inter-node link)")
        return hw
    if c is None and (size is None or inter is None):
        missing = "inter_link" if inter is None else "node_size"
        raise StalesimError(f"{missing}: a cluster needs both a node size and an inter-node link (or a node)")
    algo = inter_algorithm or (c.inter_algorithm if c is not None else hw.allreduce_algorithm)
    if inter is not None:
        lnk = get_link(inter)
        cluster = SimCluster(node_size=size or (c.node_size if c is not None else 1),
                             inter_link=lnk.key or lnk.name, inter_latency_ns=to_ns(lnk.latency_s),
                             inter_bandwidth_Bps=lnk.bandwidth_Bps, inter_algorithm=algo)
    else:
        assert c is not None and size is not None
        cluster = replace(c, node_size=size, inter_algorithm=algo)
    return replace(hw, cluster=cluster)
