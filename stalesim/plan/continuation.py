"""Continued candidates: a plan's longer horizon resumes the shorter one's run instead of
rerunning it from scratch.

**Why a run was tied to its length.** An emulation of H iterations builds the schedule of
H batches, so its pipeline drains at H: the forwards of batches H, H+1, ... that a run of
2H has in flight at that point (with the older weight versions they read) never happen, and
its last checkpoint (written at epoch ends only) is not a state of the 2H run. The
checkpoint also records the run's configuration, length included, and refuses another.
The rest of a run does not depend on its length: the data order is drawn per (seed, epoch)
and per batch, the version table of a batch depends only on the batches before it (so the
first H losses of any longer run are the H run's, the store's own premise), and a resume
from a checkpoint is bitwise the uninterrupted run on CPU.

**How a candidate continues.** Its emulation is the run of the plan's last horizon L
(first horizon H0 x 2^k <= ``--max-horizon``), paused at the horizon asked
(:attr:`stalesim.emulator.engine.ReplayEngine.stop_after`) with a checkpoint every H0
batches in a run folder keyed by everything but the length (``continued/<key>/``). A
longer horizon resumes from that checkpoint and pauses again. Its first h losses are those
of one run of h iterations from scratch, bit for bit (tested for h = H and 2H), so the
store, the crossings and the plan's answer are the same; only the work shrinks, from
H0 + 2 H0 + ... + h to h iterations per seed. A killed plan resumed continues from the
folder's last checkpoint (a checkpoint past the pause answers with its first h losses).

**When it cannot** (:func:`continuable`, the one place that decides): a learning rate
scheduled over the run's length (``step``, ``cosine``), a switch point that defaults to
half the run, horizons in epochs (accuracy targets: a paused run is not evaluated at its
pause), and batched search runs (the study groups and runs those; their crossings are
confirmed by single runs anyway). Those rerun from scratch, as before.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from stalesim.atomic import AppendLog
from stalesim.errors import StalesimError
from stalesim.launch import Job, LaunchSpec, make_launcher
from stalesim.outlock import folder_lock
from stalesim.plan.convergence import emulation_key
from stalesim.runtime.config import TrainConfig
from stalesim.schedule import get_spec

#: where the continued runs' folders live, under the plan's emulation folder
CONTINUED_DIR = "continued"


def continuable(cfg: TrainConfig, *, batched: bool = False) -> tuple[bool, str]:
    """(whether ``cfg``'s run of a longer horizon can continue its shorter one, why not)."""
    if batched:
        return False, "batched search runs are grouped and run by the study, from scratch"
    if cfg.epochs is not None or cfg.iterations is None:
        return False, "horizons in epochs: a paused run is not evaluated at its pause"
    if cfg.lr_schedule != "constant":
        return False, f"the learning rate ({cfg.lr_schedule}) is scheduled over the run's length"
    if get_spec(cfg.schedule).switches and cfg.switch is None:
        return False, "the switch point defaults to half the run's length"
    if cfg.switch_epoch is not None:
        return False, "a switch point in epochs"
    return True, ""


def last_horizon(first: int, max_horizon: int) -> int:
    """The longest horizon a plan doubles ``first`` to (the length of a continued run)."""
    if first < 1:
        raise StalesimError(f"horizon: {first} is not a positive number of iterations")
    h = first
    while 2 * h <= max_horizon:
        h *= 2
    return h


def run_continued(points: Sequence[tuple[str, TrainConfig]], out: Path, *, first: int, last: int,
                  jobs: int = 1, progress: bool | None = None, launcher: LaunchSpec | None = None,
                  tensorboard: Path | None = None) -> list[dict[str, Any]]:
    """Each point's (run id, config of h iterations) summary of its first h iterations, from
    the continued run of ``last`` iterations with a checkpoint every ``first`` (see the module
    doc); one job per point, placed by ``launcher``. Each summary also goes to
    ``out/results.jsonl`` (the plan's progress line counts them) and carries
    ``emulated_batches``: the batches this job trained (h less where it resumed)."""
    del progress  # one line per finished run is the plan's heartbeat; no bar of its own
    with folder_lock(out):
        runs = []
        for rid, cfg in points:
            ok, why = continuable(cfg)
            if not ok:
                raise StalesimError(f"continue: {rid} cannot continue ({why})")
            long = replace(cfg, iterations=max(last, int(cfg.iterations or 0)))
            folder = out / CONTINUED_DIR / f"{cfg.schedule}_{emulation_key(cfg)}"
            args = (rid, long.to_dict(), cfg.to_dict(), str(folder), 1, int(cfg.iterations or 0), first)
            runs.append(Job(rid, continue_one, args, out / "logs" / f"{rid}.log"))
        place = make_launcher(launcher or LaunchSpec(), jobs=jobs, threads=1, folder=out / "logs")
        results = []
        path = out / "results.jsonl"  # shared with the study's runs in this folder: kept, appended to
        kept = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
        with AppendLog(path, kept) as log:
            for _, res in place.run(runs):
                results.append(res)
                log.write_line(json.dumps(res))
                if tensorboard is not None:
                    from stalesim.launch.tb_scalars import write_run

                    write_run(tensorboard, res, "none")
        if place.failures:
            raise StalesimError(f"continue: {len(place.failures)} run(s) failed: "
                                + "; ".join(f.describe() for f in place.failures[:5]))
    return results


def continue_one(run_id: str, long_dict: dict[str, Any], cfg_dict: dict[str, Any], run_dir: str, threads: int,
                 stop: int, every: int) -> dict[str, Any]:
    """One continued run (a launcher job): resume ``run_dir``'s checkpoint when it is this
    run's (else start afresh), pause at ``stop`` batches, report the first ``stop``."""
    import torch

    torch.set_num_threads(threads)
    from stalesim.emulator import checkpoint as ckpt
    from stalesim.emulator.replay import CKPT_NAME, Emulator, check_request

    cfg = TrainConfig.from_dict(long_dict)
    folder = Path(run_dir)
    check_request(cfg, out=folder)

    def build() -> Emulator:
        emu = Emulator(cfg, out=folder, checkpoint_every=every, progress=False)
        emu.stop_after = stop
        emu.check_stop()
        return emu

    with folder_lock(folder):
        emu, start = build(), 0
        if (folder / CKPT_NAME).is_file():
            try:
                ckpt.load(emu, folder / CKPT_NAME)
                start = emu.plan.events[emu.state.index - 1]["done"] if emu.state.index else 0
            except StalesimError:  # another run's (an older plan's settings): start afresh
                emu, start = build(), 0
        # run() without resume: the state is the loaded one (or fresh); it rewrites the logs
        summary = emu.run(resume=False)
    summary["run_id"] = run_id
    summary["config"] = cfg_dict
    summary["emulated_batches"] = max(0, min(stop, emu.total) - start)
    summary["continued_from"] = start
    return summary
