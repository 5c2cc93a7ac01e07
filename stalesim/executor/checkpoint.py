"""Exact checkpoints of a distributed run, per rank, with no pause of the pipeline.

Same scheme as the emulator (``stalesim.emulator.checkpoint``): "checkpoint k"
is the prefix of the schedule's dry-run order that ends where every batch < k
has been updated. A prefix of a topological order is a *consistent cut*, so
each rank saves its own state when its list pointer reaches its share of the
prefix, with no barrier and no drain. What a rank saves:

- each StageRuntime's ``state_dict()`` (weights, optimizer, version, stash,
  gradient buffers) and ``inflight_state()`` (input and weights of every
  forward whose backward is after the cut; those weight versions are
  ``reserve``d at start-up, as the emulator does, and released after saving);
- its mailboxes (received-but-unused activations/gradients/labels, outputs not
  yet sent) and the labels of in-flight losses;
- the messages it sent before the cut that its peer receives after the cut
  (re-sent on resume, before any newer message), and the all-reduces started
  before the cut and waited on after it (re-started on resume);
- the losses and version logs so far.

Files: ``<out>/checkpoints/k<k>/rank<r>.pt``, each written atomically (tmp +
rename). A checkpoint is complete when every rank's file exists; resume picks
the newest k that every rank has (agreed through an all-gather, so it also
works when nodes do not share a file system). On resume every in-flight graph
is rebuilt by recomputing its forward with the saved weights (bitwise identical
on CPU), then BatchNorm buffers are put back, so the losses equal the
uninterrupted run's exactly.

Files hold only tensors and plain data and are read with ``weights_only=True``
(:mod:`stalesim.checkpoint_io`): a planted or foreign file is a one-line error
naming it, never code execution.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from stalesim.atomic import torch_save_atomic
from stalesim.checkpoint_io import brief, load_checkpoint, mismatch, require_keys
from stalesim.errors import StalesimError
from stalesim.runtime.stage_checkpoint import restore_runtimes, runtime_state
from stalesim.schedule import Action, Kind, Schedule

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.executor.rank import Rank, RankContext, Runtimes
    from stalesim.executor.spec import Job

FORMAT = 1
KEYS = ("format", "k", "every", "rank", "world", "config", "index", "runtimes", "store", "loss_labels",
        "losses", "resend", "ar_open")


def checkpoint_cuts(sched: Schedule, every: int) -> dict[int, list[int]]:
    """k -> per-device cut index (number of that device's actions before checkpoint k)."""
    from stalesim.schedule import dry_run

    if every <= 0:
        return {}
    need = sched.stages * sched.workers
    left: dict[int, int] = defaultdict(lambda: need)
    finished: set[int] = set()
    done_upto = 0
    counts = [0] * sched.num_devices
    cuts: dict[int, list[int]] = {}
    for step in dry_run(sched):
        counts[step.device] = step.index + 1
        a = step.action
        if a.kind is not Kind.U:
            continue
        left[a.batch] -= 1
        if left[a.batch]:
            continue
        del left[a.batch]
        finished.add(a.batch)
        while done_upto in finished:
            finished.discard(done_upto)
            done_upto += 1
            if done_upto % every == 0 and done_upto < sched.batches:
                cuts[done_upto] = list(counts)
    return cuts


def _peer_recv_index(sched: Schedule) -> dict[tuple, tuple[int, int]]:
    out = {}
    for d, acts in enumerate(sched.device_actions):
        for i, a in enumerate(acts):
            if a.kind in (Kind.RECV_F, Kind.RECV_B):
                out[a.key] = (d, i)
    return out


class Checkpointer:
    """Plans, saves and restores this rank's checkpoints (a no-op without ``--out``)."""

    def __init__(self, job: Job, ctx: RankContext, sched: Schedule, runtimes: Runtimes) -> None:
        self.job, self.ctx, self.sched, self.rts = job, ctx, sched, runtimes
        self.every = int(job.get("checkpoint_every") or 0)
        out = job.get("out")
        self.out = Path(out) if out else None
        self.resume = bool(job.get("resume"))
        if (self.every or self.resume) and self.out is None:
            raise StalesimError("--checkpoint-every/--resume: need --out RUN_DIR")
        self.cuts = checkpoint_cuts(sched, self.every) if self.out is not None else {}
        me = ctx.rank
        acts = sched.device_actions[me]
        self.save_at = {cut[me]: k for k, cut in self.cuts.items()}
        # forwards in flight at each cut (their v_F must survive until the save)
        self.reserved: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
        self.retain: dict[int, list[int]] = defaultdict(list)  # send index -> checkpoints
        self.ar_open: dict[int, list[Action]] = defaultdict(list)
        if not self.cuts:
            return
        f_at: dict[tuple, int] = {}
        ar_at: dict[tuple, int] = {}
        peer = _peer_recv_index(sched)
        from stalesim.schedule.deps import peer as peer_key

        for i, a in enumerate(acts):
            if a.kind is Kind.F:
                f_at[a.key[1:]] = i
            elif a.kind is Kind.B or a.kind is Kind.W:  # the backward completes (W: split)
                fi = f_at.pop(a.key[1:])
                for k, cut in self.cuts.items():
                    if fi < cut[me] <= i:
                        assert sched.versions is not None  # build_schedule derives them
                        v = sched.versions.v_f(a.stage, a.batch, a.micro, a.worker)
                        self.reserved[k].append((a.worker, a.stage, v))
            elif a.kind in (Kind.SEND_F, Kind.SEND_B):
                key = peer_key(a)
                assert key is not None  # a send always has its receive
                d, j = peer[key]
                for k, cut in self.cuts.items():
                    if i < cut[me] and j >= cut[d]:
                        self.retain[i].append(k)
            elif a.kind is Kind.AR:
                ar_at[(a.worker, a.stage, a.batch)] = i
            elif a.kind is Kind.ARW:
                ai = ar_at.pop((a.worker, a.stage, a.batch))
                for k, cut in self.cuts.items():
                    if ai < cut[me] <= i:
                        self.ar_open[k].append(acts[ai])
        self.retained: dict[int, list[tuple[str, list[torch.Tensor]]]] = defaultdict(list)

    # ------------------------------------------------------------------ paths
    def _dir(self, k: int) -> Path:
        assert self.out is not None
        return self.out / "checkpoints" / f"k{k:07d}"

    def _file(self, k: int, rank: int) -> Path:
        return self._dir(k) / f"rank{rank}.pt"

    # ----------------------------------------------------------------- saving
    def attach(self, rank: Rank) -> None:
        """Hook into the rank's loop; reserve versions (fresh runs only)."""
        if not self.cuts:
            return
        if not self.resume:
            for items in self.reserved.values():
                for w, s, v in items:
                    self.rts[(w, s)].reserve(v)
        rank.retain_sends = {i: ks for i, ks in self.retain.items()}
        rank.retained = self.retained
        rank.on_action_done = lambda i: self._maybe_save(rank, i)

    def _maybe_save(self, rank: Rank, i: int) -> None:
        k = self.save_at.get(i + 1)
        if k is None:
            return
        self.ctx.beacon.set(f"writing checkpoint k={k}")
        st = rank.store
        def det(d: dict[tuple[int, ...], torch.Tensor]) -> dict[tuple[int, ...], torch.Tensor]:
            return {key: t.detach() for key, t in d.items()}
        state = {
            "format": FORMAT, "k": k, "every": self.every, "rank": self.ctx.rank,
            "world": self.ctx.world, "config": self.job["train"], "index": i + 1,
            "runtimes": {key: runtime_state(rt) for key, rt in self.rts.items()},
            "store": {"inputs": det(st.inputs), "grads_in": det(st.grads_in),
                      "outputs": det(st.outputs), "grads_out": det(st.grads_out),
                      "labels": det(st.labels)},
            "loss_labels": dict(rank.loss_labels),
            "losses": dict(rank.losses),
            "resend": list(self.retained.pop(k, [])),
            "ar_open": [str(a) for a in self.ar_open.get(k, [])],
            "peak_bytes": rank.memory.peak_bytes,
        }
        path = self._file(k, self.ctx.rank)
        torch_save_atomic(state, path)
        for w, s, v in self.reserved.pop(k, []):
            self.rts[(w, s)].release(v)

    # ---------------------------------------------------------------- restore
    def restore(self) -> tuple[int, dict[str, Any] | None]:
        """(start index, loaded state) of the newest checkpoint every rank has (None: a fresh
        run). The state is what :func:`load_checkpoint` read from a file, checked key by key
        here and at use (a bad value is a one-line error): a TypedDict would claim value types
        nothing has checked."""
        if not self.resume:
            return 0, None
        mine = []
        base = self.out / "checkpoints" if self.out is not None else None
        if base is not None and base.is_dir():
            for d in base.iterdir():
                if d.name[:1] == "k" and d.name[1:].isdigit() and (d / f"rank{self.ctx.rank}.pt").is_file():
                    mine.append(int(d.name[1:]))
        every: list[Any] = [None] * self.ctx.world
        dist.all_gather_object(every, mine)
        common = set(every[0]).intersection(*map(set, every[1:])) if every else set()
        if not common:
            raise StalesimError(f"--resume: no complete checkpoint in {base}")
        k = max(common)
        if k not in self.cuts:
            raise StalesimError(
                f"--resume: checkpoint k={k} does not fall on --checkpoint-every {self.every} "
                "(resume with the flags of the original run)")
        path = self._file(k, self.ctx.rank)
        state = load_checkpoint(path, what="--resume", map_location=self.ctx.device)
        if state.get("format") != FORMAT:
            raise StalesimError(f"--resume: {path} has format {brief(state.get('format'))}, expected {FORMAT}")
        require_keys(state, KEYS, path, "--resume")
        if not isinstance(state["config"], dict) or state["k"] != k or state["rank"] != self.ctx.rank \
                or state["world"] != self.ctx.world or state["index"] != self.cuts[k][self.ctx.rank]:
            raise StalesimError(f"--resume: {path} is not checkpoint k={k} of rank {self.ctx.rank} "
                                f"of {self.ctx.world}")
        state["_path"] = str(path)
        for key, v in state["config"].items():
            if self.job["train"].get(key) != v and key != "device":
                raise StalesimError(f"--resume: {str(key)[:60]} is {brief(self.job['train'].get(key))} but the "
                                    f"checkpoint was made with {brief(v)}")
        return int(state["index"]), state

    def apply(self, rank: Rank, state: dict[str, Any]) -> None:
        """Load runtimes, rebuild in-flight graphs, refill mailboxes, queue re-sends."""
        try:
            self._apply(rank, state)
        except StalesimError:
            raise
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError, AttributeError) as exc:
            raise mismatch(Path(state.get("_path", "?")), "--resume", exc) from None

    def _apply(self, rank: Rank, state: dict[str, Any]) -> None:
        k = int(state["k"])
        saved = state["runtimes"]
        loss_labels = state["loss_labels"]
        restore_runtimes([(key, rt, saved[key]) for key, rt in self.rts.items()],
                         lambda w, s, t, m: loss_labels[(w, s, t, m)])
        st = rank.store
        for name in ("inputs", "grads_in", "outputs", "grads_out", "labels"):
            getattr(st, name).update(state["store"][name])
        rank.loss_labels.update(state["loss_labels"])
        rank.losses.update(state["losses"])
        rank.memory.peak_bytes = int(state.get("peak_bytes", 0))
        rank.resend = [(Action.parse(text), tensors) for text, tensors in state["resend"]]
        rank.restart_ar = [Action.parse(text) for text in state["ar_open"]]
        for w, s, v in self.reserved.pop(k, []):
            self.rts[(w, s)].release(v)
