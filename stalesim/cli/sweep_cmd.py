"""``stalesim sweep``: simulate a grid of schedules/stages/micro-batches/hardware, ranked."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stalesim.cli.cluster_args import add_cluster_args
from stalesim.cli.common import add_extrapolate_arg, int_list, int_type, positive_int, print_json
from stalesim.cli.launch_args import add_launcher_args, launch_spec_from_args, refuse_launcher_flags
from stalesim.cli.llm_args import add_llm_args
from stalesim.launch.jobs import LOCAL, LaunchSpec
from stalesim.limits import MAX_JOBS


def _positive_list(text: str) -> list[int]:
    vals = int_list(text)
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 1, got {text!r}")
    return vals


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep", help="simulate a grid of configurations in parallel and rank them by throughput",
        description="Simulate every combination of --schedules x --stages (or --ppv-candidates) "
                    "x --microbatches x --workers x --targets x --links (fast path by default) "
                    "in --jobs processes; print a table ranked by throughput with memory and "
                    "staleness beside it; optionally write CSV/JSON.")
    p.add_argument("--profile", default=None, metavar="PROFILE.json",
                   help="per-layer profile (or --workload NAME: an analytic transformer)")
    from stalesim.cli.flagcheck import catalog_type, choice_type, list_of
    from stalesim.schedule import schedule_names

    p.add_argument("--schedules", required=True, type=list_of(choice_type(schedule_names, "schedule")),
                   metavar="A,B",
                   help="comma-separated schedule names")
    p.add_argument("--stages", "-S", type=_positive_list, default=[], metavar="2,4,8")
    p.add_argument("--ppv-candidates", type=int_list, nargs="+", default=[], metavar="PPV",
                   help="explicit partitions, e.g. --ppv-candidates 2,5 3,6 4 (each PPV gives S=len+1)")
    p.add_argument("--microbatches", "-M", type=_positive_list, default=[1], metavar="1,4")
    p.add_argument("--workers", "-P", "--replicas", type=_positive_list, default=[1], metavar="1,2,4",
                   help="data-parallel degree: workers of dp/pipe-sgd, replicas of a pipeline schedule")
    p.add_argument("--stages-per-device", "-V", type=_positive_list, default=None, metavar="1,2,4",
                   help="virtual stages per device for the interleaved schedules (S/V devices); "
                        "default: each schedule's own (2 for interleaving, ZB-V, DualPipeV)")
    p.add_argument("--targets", type=list_of(catalog_type("device")), default=None, metavar="KIND,KIND",
                   help="catalog devices to predict for (roofline from the profile); "
                        "default: the profile's own")
    p.add_argument("--links", type=list_of(catalog_type("link")), default=None, metavar="KIND,KIND",
                   help="catalog links; default: ideal")
    p.add_argument("--calibration", default=None, metavar="CAL.json",
                   help="this machine's calibrated cost terms (as `simulate --calibration`; needs "
                        "--method event and no --targets)")
    p.add_argument("--batch-size", "-B", type=positive_int, default=None)
    p.add_argument("--batches", "-N", type=positive_int, default=None,
                   help="mini-batches per simulation (default: enough for a steady state)")
    add_cluster_args(p, replicas_alias=False)
    p.add_argument("--method", choices=("fast", "event"), default="fast",
                   help="closed-form fast path (default) or the event simulation")
    p.add_argument("--jobs", "-j", type=int_type(1, MAX_JOBS), default=1, help="worker processes")
    p.add_argument("--top", type=positive_int, default=30, help="rows printed (the CSV has all)")
    p.add_argument("--csv", default=None, metavar="OUT.csv", help="write every row as CSV")
    p.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    p.add_argument("--plot", default=None, metavar="OUT.png",
                   help="write speed-up vs devices (.png/.svg/.pdf); markers show which costs were "
                        "measured, interpolated, extrapolated or roofline, red rings the warnings")
    add_extrapolate_arg(p)
    add_llm_args(p, lists=True)
    p.add_argument("--out", default=None, metavar="DIR",
                   help="sweep folder: the points run as --launcher jobs (logs/), their rows kept in rows.jsonl, "
                        "and the same sweep run again simulates only the points without a row (needed by "
                        "--launcher slurm|ray)")
    add_launcher_args(p, tensorboard=False)
    p.add_argument("--dp", type=_positive_list, dest="workers", default=argparse.SUPPRESS, metavar="1,2,4",
                   help="alias of -P: data-parallel degrees")
    from stalesim.cli.flagcheck import declare

    declare("sweep", p)  # its defaults tell the flag checks which flags were given
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from stalesim.cli.cluster_args import cluster_options
    from stalesim.cli.llm_args import check_llm_flags
    from stalesim.cli.simulate_cmd import read_cli_calibration
    from stalesim.cost.apply import Predictor
    from stalesim.cost.calibration import defaults_line
    from stalesim.errors import StalesimError
    from stalesim.sim.cluster import with_cluster
    from stalesim.sim.model import SimHardware
    from stalesim.sim.sweep import grid, plot, sweep, table, write_csv
    from stalesim.workloads.hardware import catalog, get_device, get_link, get_node
    from stalesim.workloads.profile import load_profile

    check_llm_flags(args)
    if args.workload is not None:
        refuse_launcher_flags(args, "--workload (closed forms in this process)")
        return _run_workload(args)
    cal = read_cli_calibration(argparse.Namespace(**{**vars(args), "target": args.targets}))
    prof = load_profile(args.profile)
    if args.intra_link:
        if args.links and args.links != [args.intra_link]:
            raise StalesimError(f"--intra-link: {args.intra_link!r} contradicts --links")
        args.links = [args.intra_link]
    force_retime = args.targets is not None  # a node's own device re-times only a profile not for it
    if args.node:
        entry = catalog()["nodes"][get_node(args.node).key]
        args.targets = args.targets or [entry["device"]]
        args.links = args.links or [entry["intra_link"]]
    cluster = {"node": args.node, "node_size": args.node_size, "inter_link": args.inter_link,
               "inter_algorithm": args.inter_algorithm, **cluster_options(args)}
    with_cluster(SimHardware.ideal(), node=args.node, node_size=args.node_size,  # bad values fail once, here
                 inter_link=args.inter_link, inter_algorithm=args.inter_algorithm)
    devices = args.targets or [None]
    links = args.links or [None]
    for d in devices:
        if d is not None:
            get_device(d)  # unknown names fail here, once, naming the field
    for lk in links:
        if lk is not None:
            get_link(lk)
    points = grid(args.schedules, args.stages, microbatches=args.microbatches,
                  workers=args.workers, ppv_candidates=args.ppv_candidates,
                  devices=devices, links=links,
                  stages_per_device=args.stages_per_device or [None])
    launch, out_dir = _placement(args)
    rows = sweep(prof, points, jobs=args.jobs, launcher=launch, out=out_dir, method=args.method,
                 batch_size=args.batch_size,
                 batches=args.batches, extrapolate=args.extrapolate, cluster=cluster,
                 force_retime=force_retime, predictor=None if cal is None else Predictor(cal))
    if rows and all(r["error"] for r in rows):  # nothing to rank is a failure, not an empty table
        from stalesim.errors import StalesimError

        r = rows[0]
        raise StalesimError(f"no configuration of the grid can be simulated ({len(rows)} tried); "
                            f"{r['schedule']} S={r['stages']} M={r['microbatches']} P={r['workers']}: "
                            f"{r['error']}")
    if args.csv:
        write_csv(args.csv, rows)
    if args.plot:
        plot(rows, args.plot)
    if args.json:
        print_json(rows)
        for r in rows:  # stdout stays JSON; warnings are never silent
            for w in (r.get("warnings") or "").split(" | "):
                if w:
                    print(f"stalesim: warning: {r['schedule']} S={r['stages']} M={r['microbatches']} "
                          f"P={r['workers']}: {w}", file=sys.stderr)
    else:
        print(f"{len(points)} configurations ({args.method} path, {args.jobs} process(es)), "
              f"ranked by throughput")
        sizes = prof.measured_batch_sizes
        print(f"profile: {'roofline estimate' if not sizes else 'measured at batch ' + ', '.join(map(str, sizes))}"
              f"; outside that: {args.extrapolate} extrapolation")
        print(defaults_line(cal))
        print(table(rows, args.top))
        if args.csv:
            print(f"csv: {args.csv}")
        if args.plot:
            print(f"plot: {args.plot}")
    return 0


def _placement(args: argparse.Namespace) -> tuple[LaunchSpec | None, Path | None]:
    """Where the points are simulated: this process or ``--jobs`` processes (no ``--out``, today's
    default), or as launcher jobs with their rows kept in ``--out`` (stalesim.sim.sweep_jobs)."""
    from stalesim.errors import StalesimError

    spec = launch_spec_from_args(args, device="cpu")
    if args.out is None:
        if args.launcher != LOCAL:
            raise StalesimError(f"out: --launcher {args.launcher} needs --out DIR (its jobs' logs and the rows "
                                "kept for a sweep run again)")
        return None, None
    return spec, Path(args.out)


def _run_workload(args: argparse.Namespace) -> int:
    """``--workload``: every (schedule, tp, pp, dp, M, recompute, zero) of the grid by the LLM
    estimate (stalesim.sim.parallel.predict_llm), ranked by throughput among the configurations that fit."""
    import itertools

    from stalesim.cli.common import print_json
    from stalesim.cli.llm_args import llm_hardware, plan_from_args, workload_spec
    from stalesim.sim.parallel import ParallelPlan, sweep_llm

    spec = workload_spec(args)
    hw = llm_hardware(args)
    tps, pps = args.tp or [1], args.pp or args.stages or [1]
    recs, zeros = args.recompute or ["none"], args.zero or [0]
    from stalesim.cli.flagcheck import check_plan, note_left_out, refuse_dead_values
    from stalesim.errors import StalesimError

    plans: list[ParallelPlan] = []
    # every grid point checked before any is predicted: a value no point can use is the user's error
    checked: list[tuple[dict[str, object], StalesimError | None]] = []
    swept = {"--schedules": args.schedules, "--tp": tps, "--pp": pps, "--workers": args.workers,
             "--microbatches": args.microbatches, "--recompute": recs, "--zero": zeros}
    for sched, tp, pp, P, M, rec, z in itertools.product(*swept.values()):
        if args.gpus is not None:
            cp = args.cp or 1
            if args.gpus % (tp * cp * pp):
                continue
            P = args.gpus // (tp * cp * pp)
        values = dict(zip(swept, (sched, tp, pp, P, M, rec, z)))
        try:
            plan = plan_from_args(args, spec, tp=tp, pp=pp, dp=P, schedule=sched, microbatches=M,
                                  recompute=rec, zero=z, chunks=(args.stages_per_device or [None])[0])
            check_plan(plan, spec, hw)
        except StalesimError as exc:
            checked.append((values, exc))
            continue
        checked.append((values, None))
        plans.append(plan)
    if not checked:
        raise StalesimError("--gpus: no grid point has tp x cp x pp dividing it")
    if args.gpus is not None:
        swept.pop("--workers")  # dp follows from --gpus
    note_left_out("sweep", refuse_dead_values("sweep", swept, checked))
    rows = sweep_llm(spec, plans, hw)
    if args.csv:
        from stalesim.atomic import write_csv_atomic

        write_csv_atomic(args.csv, rows, header=list(dict.fromkeys(k for r in rows for k in r)))
    if args.json:
        print_json(rows)
        return 0
    print(f"{len(rows)} configurations of {spec.name} (LLM estimate: closed forms, the zero-bubble and other "
          f"flushed orders event-simulated), ranked by throughput; memory per GPU of the fullest device")
    head = ["#", "schedule", "tp", "pp", "dp", "GPUs", "M", "recompute", "zero", "iter s", "tokens/s",
            "TFLOP/s/GPU", "mem GB", "fits"]
    lines = ["  ".join(head)]
    for r in rows[:args.top]:
        if r["error"]:
            lines.append(f"{r['rank']}  {r['schedule']} tp {r['tp']} pp {r['pp']} dp {r['dp']}: {r['error']}")
            continue
        lines.append("  ".join(str(x) for x in (
            r["rank"], r["schedule"], r["tp"], r["pp"], r["dp"], r["gpus"], r["microbatches"], r["recompute"],
            r["zero"], f"{r['iteration_s']:.3f}", f"{r['tokens_per_s']:,.0f}", f"{r['model_tflops_per_gpu']:.0f}",
            f"{r['memory_gb']:.1f}", "yes" if r["fits"] else "NO")))
    print("\n".join(lines))
    return 0
