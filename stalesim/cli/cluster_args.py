"""Cluster flags shared by ``simulate`` and ``sweep``: nodes, links, placement, buckets.

``-P/--workers`` (alias ``--replicas``) is the data-parallel degree for every
schedule: the workers of ``dp``/``pipe-sgd`` (each holds all stages) or the
replicas of a pipeline schedule (each replica is S devices). A cluster is given
by a catalog node (``--node dgx-h100``), by ``--node-size G --inter-link KIND``
(the intra-node link is ``--link``/``--intra-link``), or by a hardware JSON with a
``cluster`` section (``--hardware``).
"""

from __future__ import annotations

import argparse
from typing import Any

from stalesim.cli.common import float_type, positive_int
from stalesim.cli.flagcheck import catalog_type

# a bucket of at most 1 TiB (DDP's default is 25 MiB)
_bucket_mb = float_type(0.0, 2.0**20, lo_open=True)


def add_cluster_args(p: argparse.ArgumentParser, *, replicas_alias: bool = True) -> None:
    if replicas_alias:
        p.add_argument("--replicas", type=positive_int, dest="workers", metavar="P", default=argparse.SUPPRESS,
                       help="alias of -P/--workers: the data-parallel degree (replicas of a pipeline "
                            "schedule, workers of dp/pipe-sgd)")
    g = p.add_argument_group("cluster (data x pipeline parallelism on nodes)")
    g.add_argument("--node", type=catalog_type("node"), default=None, metavar="KIND",
                   help="catalog node (dgx-h100, dgx-h200, dgx-a100): its device, node size, "
                        "intra-node and network links")
    g.add_argument("--node-size", type=positive_int, default=None, metavar="G", help="devices per node")
    g.add_argument("--intra-link", type=catalog_type("link"), default=None, metavar="KIND",
                   help="catalog link between devices of a node (same as --link)")
    g.add_argument("--inter-link", type=catalog_type("link"), default=None, metavar="KIND",
                   help="catalog link between nodes, per device (e.g. ib-ndr)")
    g.add_argument("--inter-algorithm", choices=("ring", "tree"), default=None,
                   help="all-reduce across nodes (default: ring)")
    g.add_argument("--placement", choices=("pipeline", "data"), default="pipeline",
                   help="pipeline: a replica's devices are consecutive (a pipeline stays in a node "
                        "when G is a multiple of its devices, default); data: the replicas of a "
                        "stage are consecutive (Megatron-LM's rank order)")
    g.add_argument("--bucket-mb", type=_bucket_mb, default=None, metavar="MB",
                   help="gradient bucket size in MiB (DDP's default is 25): buckets all-reduce while the "
                        "stage's last backward still runs; default: one bucket per stage")
    g.add_argument("--no-symmetry", action="store_true",
                   help="simulate every replica and every batch (slow; the shortcut is exact)")


def cluster_link_defaults(args: argparse.Namespace) -> None:
    """Fill ``node_device``/``--link`` from ``--node`` and ``--intra-link`` (before the hardware is resolved)."""
    from stalesim.errors import StalesimError
    from stalesim.workloads.hardware import catalog, get_node

    if args.intra_link:
        if getattr(args, "link", None) and args.link != args.intra_link:
            raise StalesimError(f"--intra-link: {args.intra_link!r} contradicts --link {args.link!r}")
        args.link = args.intra_link
    if args.node:
        spec = get_node(args.node)
        entry = catalog()["nodes"][spec.key]
        if getattr(args, "hardware", None):
            raise StalesimError("--node: give either a catalog node or --hardware, not both")
        # the node's device, not a --target: a profile for that device (or a synthetic one) is used
        # as it is, any other is re-timed by the roofline, exactly as for a hardware JSON naming
        # the same node (stalesim.workloads.retime)
        args.node_device = entry["device"]
        if not getattr(args, "link", None):
            args.link = entry["intra_link"]


def attach_cluster(args: argparse.Namespace, hw: Any) -> Any:
    """The SimHardware with the cluster the flags describe (unchanged without cluster flags)."""
    from stalesim.sim.cluster import with_cluster

    return with_cluster(hw, node=args.node, node_size=args.node_size, inter_link=args.inter_link,
                        inter_algorithm=args.inter_algorithm)


def cluster_options(args: argparse.Namespace) -> dict[str, Any]:
    """SimOptions fields from the flags (``replicas`` is set by the caller from -P)."""
    return {"placement": args.placement,
            "bucket_bytes": None if args.bucket_mb is None else max(1, round(args.bucket_mb * 2 ** 20)),
            "symmetry": not args.no_symmetry}
