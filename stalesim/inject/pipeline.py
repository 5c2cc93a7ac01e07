"""StalePipeline: a schedule's exact weight staleness inside a user's own training loop.

The user's loop stays as it is (forward, loss, ``backward()``, ``optimizer.step()``,
``zero_grad()``); two lines make it a pipeline's::

    pipe = StalePipeline(model, "pipedream", stages=4, steps=1000)
    pipe.attach(optimizer)

How, without copying the model or changing its code:

* **Forward** (a forward pre-hook on the model): batch t = the steps taken so far,
  micro-batch m = the forwards with grad since the last step (gradient accumulation is
  how a loop runs M micro-batches). Each stage's parameters are pointed (``p.data``) at
  the tensors of version v_F(s, t, m) from the IR's version table (the live ones, or a
  stashed copy, :mod:`stalesim.inject.versions`), and the forward runs under
  ``saved_tensors_hooks`` that save, for every tensor sharing storage with such weights,
  a token instead (the emulator's :class:`~stalesim.runtime.weight_tokens.WeightTokens`,
  one per stage). The forward hook points the parameters back at the live weights.
* **Backward** (the user's ``loss.backward()``): each token unpacks to the same view of
  version v_B(s, t, m): the backward of a ``latest``-policy schedule (``stale``) reads
  another version than its forward, a stashing one (``pipedream``, ``2bw``) the same.
  Gradients accumulate in ``.grad`` as usual. A stage whose forward and backward both
  read the live version is left to autograd (no hooks, no tokens): autograd's version
  counter guarantees its saved weights are unchanged until the backward.
* **Update** (step hooks on the user's optimizer): before the step, the live version t
  is stashed for the stages a later batch reads it on; the user's own optimizer then
  steps, which is update u(s, t) = t + 1 of every stage. A ``GradScaler`` given to
  :meth:`StalePipeline.attach` that skips the step (inf or NaN gradients) makes version
  t + 1 equal to version t: the pipeline's update of that batch lands as a no-op, as in a
  pipeline whose stages skip together on a shared inf check.

* **Workers** (``dp``, ``pipe-sgd`` with P > 1): the loop runs each worker's batch in turn,
  forward(s) then backward(s), as P x M forwards per step; forward k is worker k // M's
  micro-batch k % M and reads that worker's rows of the table, and the workers' gradients
  are all-reduced on ``.grad`` (:mod:`stalesim.inject.workers`).

A forward without grad (evaluation inside the loop) reads the live weights and counts
as no micro-batch. The versions read are logged in a
:class:`~stalesim.schedule.VersionTable` (``pipe.log``), compared with the IR's by
:meth:`StalePipeline.versions_match`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from stalesim.errors import StalesimError
from stalesim.inject.correct import Correction
from stalesim.inject.hooks import eager as _eager
from stalesim.inject.mitigate import StageLR, StageUpdate
from stalesim.inject.predict import Prediction
from stalesim.inject.recompute import guard_recompute
from stalesim.inject.stages import StageSpec, StageSplit, even_split, named_split
from stalesim.inject.versions import VersionStore, check_table
from stalesim.inject.workers import WorkerGrads, check_allreduce, check_compression, first_different_worker
from stalesim.runtime.optim import clip_
from stalesim.runtime.weight_tokens import WeightTokens, ptr_map, storage_ptr
from stalesim.schedule import Schedule, ScheduleConfig, VersionTable, build_schedule

_TAG = "stalesim-inject"

#: Optimizers whose step re-runs the model (a closure): its forwards would read as micro-batches.
CLOSURE_OPTIMIZERS: tuple[type[torch.optim.Optimizer], ...] = (torch.optim.LBFGS,)


class _Forward:
    """What one hooked forward changed, undone by the forward hook."""

    def __init__(self, r: int, t: int, m: int | None) -> None:
        self.r, self.t, self.m = r, t, m
        self.stack = ExitStack()
        self.swapped: list[tuple[nn.Parameter, torch.Tensor]] = []  # (param, its live data)
        self.tokened: set[int] = set()  # stages whose saved weights are tokens
        self.packed: set[int] = set()  # stages that saved some weight

    def undo(self) -> None:
        try:
            self.stack.close()
        finally:
            for p, live in self.swapped:
                p.data = live


def _schedule_for(schedule: str | Schedule, stages: int, steps: int, *, microbatches: int, warmup: int,
                  switch: int | None, stages_per_device: int | None, workers: int) -> Schedule:
    """The schedule a pipeline of ``stages`` stages follows for ``steps`` steps: ``schedule``
    built from its name, or checked when given built; refused where a user's loop cannot
    follow it (a stage per loss)."""
    if isinstance(schedule, Schedule):
        sched = schedule
    elif isinstance(schedule, str):
        sched = build_schedule(ScheduleConfig(schedule, stages=stages, batches=steps,
                                              microbatches=microbatches, warmup=warmup, switch=switch,
                                              stages_per_device=stages_per_device, workers=workers))
    else:
        raise StalesimError(f"schedule: expected a schedule name or a built Schedule, got "
                            f"{type(schedule).__name__}")
    if sched.stages != stages:
        raise StalesimError(f"schedule: has {sched.stages} stages, the split {stages}")
    if sched.batches < steps:
        raise StalesimError(f"schedule: covers {sched.batches} batches, fewer than steps={steps}")
    if sched.local_loss:
        raise StalesimError(f"schedule: {sched.name} gives every stage its own loss (auxiliary heads) and "
                            f"no gradient crosses a stage; a training loop has one loss, at the model's output")
    return sched


class StalePipeline:
    """A model cut into pipeline stages whose weight versions follow a schedule (module doc).

    ``schedule``: a registered name (built with ``stages``/``microbatches``/``warmup``/
    ``switch``/``stages_per_device`` for ``steps`` batches) or a built
    :class:`~stalesim.schedule.Schedule` of ``steps`` batches. ``split``: one entry per
    stage (module-name prefixes or submodules, :func:`~stalesim.inject.stages.named_split`);
    without it ``stages`` (default 2) even stages by parameter count. ``workers`` (``dp``,
    ``pipe-sgd``): P data-parallel workers the loop runs in turn, one batch each per step,
    their gradients all-reduced with ``compression`` (:mod:`stalesim.inject.workers`). ``staleness_lr``,
    ``pipemare_lr``, ``pipemare_warmup``: the emulator's learning-rate mitigations
    (:mod:`stalesim.inject.mitigate`; the optimizer then needs :meth:`param_groups`).
    ``weight_prediction``: the emulator's weight prediction (:mod:`stalesim.inject.predict`);
    ``pipemare_correction`` (``pipemare_gamma``): PipeMare's discrepancy correction
    (:mod:`stalesim.inject.correct`); not both at once. ``spike_compensation`` and
    ``error_feedback`` (``error_feedback_beta``): the emulator's update terms
    (:class:`~stalesim.inject.mitigate.StageUpdate`; spike compensation needs SGD with
    momentum and :meth:`param_groups`).
    """

    def __init__(self, model: nn.Module, schedule: str | Schedule = "pipedream", *, steps: int,
                 stages: int | None = None, split: list[StageSpec] | None = None, microbatches: int = 1,
                 warmup: int = 0, switch: int | None = None, stages_per_device: int | None = None,
                 workers: int = 1, compression: str = "none", staleness_lr: bool = False,
                 pipemare_lr: bool = False, pipemare_warmup: int = 0,
                 weight_prediction: bool = False, pipemare_correction: bool = False,
                 pipemare_gamma: float = 0.9, spike_compensation: bool = False, error_feedback: bool = False,
                 error_feedback_beta: float = 1.0) -> None:
        if not isinstance(model, nn.Module):
            raise StalesimError(f"model: expected an nn.Module, got {type(model).__name__}")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise StalesimError(f"steps: expected an integer >= 1 (optimizer steps of the run), got {steps!r}")
        if split is not None:
            cut: StageSplit = named_split(model, split)
            if stages is not None and stages != cut.stages:
                raise StalesimError(f"stages: {stages} but split names {cut.stages} stages")
        else:
            cut = even_split(model, 2 if stages is None else stages)
        sched = _schedule_for(schedule, cut.stages, steps, microbatches=microbatches, warmup=warmup,
                              switch=switch, stages_per_device=stages_per_device, workers=workers)
        self.model = model
        self.sched = sched
        self.table: VersionTable = sched.table
        self.steps = steps
        self.split = cut
        self.S = cut.stages
        self.P = sched.workers
        check_table(self.table, self.S, steps, self.P)
        check_allreduce(sched, steps)
        self.compression = check_compression(compression, self.P)
        mitigated = [name for name, on in (("staleness_lr", staleness_lr), ("pipemare_lr", pipemare_lr),
                                           ("weight_prediction", weight_prediction),
                                           ("pipemare_correction", pipemare_correction),
                                           ("spike_compensation", spike_compensation),
                                           ("error_feedback", error_feedback)) if on]
        other = first_different_worker(self.table, self.P) if mitigated else None
        if other is not None:
            raise StalesimError(f"{mitigated[0]}: worker {other} reads other versions than worker 0; the "
                                f"mitigations of a loop follow worker 0's rows")
        self.micros: list[int | None] = sched.micro_indices()
        #: forwards with grad per step: each worker's micro-batches, worker after worker
        self.per_step = self.P * len(self.micros)
        self.grads = WorkerGrads([p for ps in cut.params for p in ps], self.P, self.compression) \
            if self.P > 1 else None
        self.store = VersionStore(self.table, cut.params)
        self.tokens = [WeightTokens(ps) for ps in cut.params]
        self.log = VersionTable(self.S)  # the versions actually read and produced
        self.lr = StageLR(sched, staleness_lr=staleness_lr, pipemare_lr=pipemare_lr,
                          pipemare_warmup=pipemare_warmup)
        self.predict = Prediction(sched, cut.params, self.store.last_read) if weight_prediction else None
        if weight_prediction and pipemare_correction:
            raise StalesimError("pipemare_correction: not together with weight_prediction in a training loop yet")
        if isinstance(pipemare_gamma, bool) or not isinstance(pipemare_gamma, (int, float)) \
                or not 0 <= pipemare_gamma < 1:
            raise StalesimError(f"pipemare_gamma: expected a number in [0, 1), got {pipemare_gamma!r}")
        self.correct = Correction(sched, cut.params, self.store.last_read, pipemare_gamma) \
            if pipemare_correction else None
        self.update = StageUpdate(sched, cut.params, spike_compensation=spike_compensation,
                                  error_feedback=error_feedback, error_feedback_beta=error_feedback_beta)
        # this step's predicted forward weights and lr per (stage, micro), and the weights
        # each backward reads (computed once per stage, not per saved tensor)
        self._predicted: dict[tuple[int, int, int | None], tuple[list[torch.Tensor], float]] = {}
        self._reads: dict[tuple[int, int, int, int | None], list[torch.Tensor]] = {}
        self.forwards = 0  # forwards with grad since the last step: the next micro-batch's index
        self.skipped: list[int] = []  # the steps a GradScaler skipped (their update a no-op)
        self._open: list[_Forward | None] = []
        self._handles: list[RemovableHandle | _ScalerWatch] = [
            model.register_forward_pre_hook(_eager(self._before_forward)),
            model.register_forward_hook(_eager(self._after_forward), always_call=True),
            *guard_recompute(model, cut.params, self.table),
        ]

    # ------------------------------------------------------------- optimizer
    def attach(self, optimizer: torch.optim.Optimizer,
               scaler: torch.amp.GradScaler | None = None) -> torch.optim.Optimizer:
        """Make ``optimizer.step()`` the schedule's update (step hooks; the optimizer is
        returned unchanged, so schedulers, GradScaler and ``state_dict`` see the same object).
        ``scaler``: the loop's ``GradScaler``; a ``scaler.step(optimizer)`` that skips the step
        for inf or NaN gradients then lands the batch's update as a no-op (without it, the
        next forward is refused: the skipped update could not be told from a forgotten step)."""
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise StalesimError(f"optimizer: expected a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if scaler is not None and not isinstance(scaler, torch.amp.GradScaler):
            raise StalesimError(f"scaler: expected a torch.amp.GradScaler, got {type(scaler).__name__}")
        if isinstance(optimizer, CLOSURE_OPTIMIZERS):
            raise StalesimError(f"optimizer: {type(optimizer).__name__} re-runs the model inside step() (a "
                                f"closure), so its forwards would read as micro-batches; not supported")
        stage_of = {id(p): s for s, ps in enumerate(self.split.params) for p in ps}
        for g, group in enumerate(optimizer.param_groups):
            for p in group["params"]:
                if id(p) not in stage_of:
                    raise StalesimError(f"optimizer: param group {g} holds a tensor of shape {tuple(p.shape)} "
                                        f"that is no trainable parameter of a stage")
        self.lr.bind(optimizer, stage_of)
        self.update.bind(optimizer, stage_of)
        if self.predict is not None:
            self.predict.bind(optimizer)
        self._handles += [optimizer.register_step_pre_hook(self._before_step),
                          optimizer.register_step_post_hook(self._after_step)]
        if scaler is not None:
            self._handles.append(_ScalerWatch(scaler, optimizer, lambda: self.store.version, self._skipped_step))
        return optimizer

    def _skipped_step(self) -> None:
        """The step ``scaler.step`` skipped: version t + 1 is version t (the stashes,
        predictions and corrections see a step that changed nothing; the per-step update terms
        of the mitigations do not run, as the optimizer did not)."""
        t = self._begin_update("scaler.step()")
        self.skipped.append(t)
        self._land_update(t)

    def _begin_update(self, caller: str) -> int:
        """Checks the step's micro-batches, lands the workers' all-reduce and stashes what the
        update overwrites; returns t."""
        t = self.store.version
        if self.forwards != self.per_step:
            raise StalesimError(f"{caller}: step {t} ran {self.forwards} forward(s) with grad; the "
                                f"schedule has {self._per_step_text()}")
        if self.grads is not None:
            self.grads.finish()
        self.store.before_update()
        if self.correct is not None:
            self.correct.before_update()
        return t

    def _per_step_text(self) -> str:
        M = len(self.micros)
        if self.P == 1:
            return f"{M} micro-batch(es) per step (accumulate that many)"
        return (f"{self.P} workers x {M} micro-batch(es) per step (each worker's batch in turn, its "
                f"micro-batches accumulated)")

    def _land_update(self, t: int) -> None:
        """Version t + 1 exists: log it, open step t + 1, let predictions and corrections see it."""
        self.store.after_update()
        for r in range(self.P):  # the workers' replicas are one model: each makes version t + 1
            for s in range(self.S):
                self.log.upd[(r, s, t)] = t + 1
        self.forwards = 0
        if self.grads is not None:
            self.grads.next_step()
        self._predicted.clear()
        self._reads.clear()
        if self.predict is not None:
            self.predict.record(self.store.version)
        if self.correct is not None:
            self.correct.after_update(self.store.version)

    def _before_step(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        # torch passes the bound call's arguments, the optimizer first
        if len(args) > 1 and args[1] is not None or kwargs.get("closure") is not None:
            raise StalesimError("optimizer.step(closure): a closure re-runs the model inside the step; "
                                "not supported")
        t = self._begin_update("optimizer.step()")
        self.lr.scale(opt, t)
        self.update.before(opt, t)

    def _after_step(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        t = self.store.version
        self.update.after(opt, t)  # the step's own terms: part of version t + 1
        self.lr.restore(opt)
        self._land_update(t)

    # --------------------------------------------------------------- forward
    def _before_forward(self, module: nn.Module, args: Any) -> None:
        if not torch.is_grad_enabled():
            self._open.append(None)  # evaluation: the live weights
            return
        t = self.store.version
        if t >= self.steps:
            raise StalesimError(f"steps: the pipeline was built for {self.steps} steps; step {t} needs a "
                                f"longer schedule (steps=)")
        if self.forwards >= self.per_step:
            what = f"{len(self.micros)} micro-batch(es)" if self.P == 1 else \
                f"{self.per_step} forward(s) ({self.P} workers x {len(self.micros)} micro-batch(es))"
            raise StalesimError(f"forward: step {t} already ran its {what}; call optimizer.step() first")
        # worker r's micro-batches, worker after worker (a data-parallel rank's batch each)
        r, i = divmod(self.forwards, len(self.micros))
        m = self.micros[i]
        autocast = self._check_autocast(r, t, m)
        if self.grads is not None:
            if i == 0 and r > 0:
                self.grads.worker_done(r - 1, t)
            if self.forwards == self.per_step - 1:
                self.grads.last_worker(t)
        self.forwards += 1
        fwd = _Forward(r, t, m)
        self._open.append(fwd)
        packmap: dict[int, int] = {}  # storage address -> stage
        try:
            for s in range(self.S):
                key = (r, s, t, m)
                v_f, v_b = self.table.vf[key], self.table.vb[key]
                self.log.vf[key] = v_f
                if v_f == t and v_b == t:
                    self.log.vb[key] = t  # autograd's own saved weights, live until the step
                    continue
                leaves = self._forward_weights(r, s, v_f, t, m)
                if v_f != t:
                    for p, w in zip(self.split.params[s], leaves):
                        fwd.swapped.append((p, p.data))
                        p.data = w
                fwd.stack.enter_context(self.tokens[s].packing(leaves, {}))
                fwd.tokened.add(s)
                packmap.update(dict.fromkeys(ptr_map(leaves), s))
            if packmap:
                fwd.stack.enter_context(torch.autograd.graph.saved_tensors_hooks(
                    _eager(lambda x: self._pack(x, packmap, fwd)), _eager(self._unpack)))
            if autocast and fwd.swapped:
                # autocast caches each parameter's cast by the parameter, whatever its data
                # points at: casts of another version must not be reused, nor these later
                torch.clear_autocast_cache()
                fwd.stack.callback(torch.clear_autocast_cache)
        except BaseException:
            self._open.pop()
            fwd.undo()
            raise

    def _forward_weights(self, r: int, s: int, v_f: int, t: int, m: int | None) -> list[torch.Tensor]:
        """Version v_F of stage s, or the emulator's weight prediction from it."""
        weights = self.store.weights(s, v_f)
        if self.predict is None or v_f == t:  # D_F = t - v_F: nothing to predict
            return weights
        lr = self.predict.lr(s)
        pw = self.predict.forward(s, weights, v_f, t, m, lr)
        if pw is None:
            return weights
        self._predicted[(r, s, m)] = (pw, lr)
        return pw

    def _backward_weights(self, r: int, s: int, t: int, m: int | None) -> list[torch.Tensor]:
        """What the backward of (r, s, t, m) reads: version v_B, or under weight prediction the
        forward's prediction (stashing policies) or a prediction from v_B (latest policy)."""
        read = self._reads.get((r, s, t, m))
        if read is not None:
            return read
        v_b = self.table.vb[(r, s, t, m)]
        read = self.store.weights(s, v_b)
        if self.predict is not None:
            mit = self.predict.mits[s]
            pred = self._predicted.get((r, s, m))
            if pred is not None and mit.backward_reuses_forward:
                read = pred[0]
            if mit.changes_backward:
                lr = pred[1] if pred is not None else self.predict.lr(s)
                read = self.predict.backward(s, read, v_b, t, m, lr)
        if self.correct is not None:
            read = self.correct.backward(s, read, v_b, t, m)
        self._reads[(r, s, t, m)] = read
        return read

    def _check_autocast(self, r: int, t: int, m: int | None) -> bool:
        """Whether autocast is on. Under autocast a layer saves the cast copy of its weights,
        made from the forward's version, so no token can give the backward another version:
        refused where it must."""
        device = self.split.params[0][0].device.type
        if not torch.is_autocast_enabled(device):
            return False
        for s in range(self.S):
            key = (r, s, t, m)
            if self.table.vb[key] != self.table.vf[key]:
                raise StalesimError(f"autocast: stage {s}'s backward of step {t} reads version {self.table.vb[key]}, "
                                    f"its forward {self.table.vf[key]}; autocast saves cast copies of the "
                                    f"forward's weights, so use a stashing schedule (pipedream, 2bw) with it")
        return True

    def _after_forward(self, module: nn.Module, args: Any, output: Any) -> None:
        fwd = self._open.pop() if self._open else None
        if fwd is None:
            return
        fwd.undo()
        for s in fwd.tokened - fwd.packed:
            # the stage saved no weight for its backward (e.g. the first layer of stage 0,
            # whose input needs no gradient): any version gives the same gradient, so its
            # backward reads the table's version vacuously
            key = (fwd.r, s, fwd.t, fwd.m)
            self.log.vb[key] = self.table.vb[key]

    def _pack(self, x: torch.Tensor, packmap: dict[int, int], fwd: _Forward) -> Any:
        ptr = storage_ptr(x)
        s = packmap.get(ptr) if ptr is not None else None
        if s is None:
            return x
        fwd.packed.add(s)
        return (_TAG, fwd.r, s, fwd.t, fwd.m, self.tokens[s].pack(x))

    def _unpack(self, obj: Any) -> torch.Tensor:
        if not (isinstance(obj, tuple) and len(obj) == 6 and obj[0] == _TAG):
            return obj
        _, r, s, t, m, token = obj
        key = (r, s, t, m)
        v_b = self.table.vb[key]
        self.log.vb[key] = v_b
        tok = self.tokens[s]
        with tok.reading(self._backward_weights(r, s, t, m)):
            return tok.unpack(token)

    def clip_grad_norm_(self, max_norm: float) -> list[torch.Tensor]:
        """Clip each stage's gradients to L2 norm ``max_norm`` on its own, as a pipeline can
        (no stage sees another's gradients when it updates): the emulator's clipping,
        :func:`stalesim.runtime.optim.clip_`, on ``.grad``. Call it where the loop would call
        ``clip_grad_norm_`` (before ``optimizer.step()``); returns the norms before clipping."""
        if not isinstance(max_norm, (int, float)) or isinstance(max_norm, bool) or not max_norm > 0:
            raise StalesimError(f"max_norm: expected a number > 0, got {max_norm!r}")
        if self.grads is not None:
            self.grads.finish()  # the workers' mean, as the emulator clips after its all-reduce
        return [clip_([p.grad for p in ps if p.grad is not None], float(max_norm)) for ps in self.split.params]

    def param_groups(self) -> list[dict[str, Any]]:
        """One optimizer param group per stage (``torch.optim.SGD(pipe.param_groups(), lr=...)``),
        as a per-stage learning-rate mitigation needs."""
        return [{"params": list(ps)} for ps in self.split.params]

    # ------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        """What resumes the pipeline exactly besides the model's and optimizer's own state
        dicts: the live version and the weight copies later batches read. Saved between
        steps (after ``optimizer.step()``)."""
        if self.forwards:
            raise StalesimError(f"state_dict: step {self.store.version} is half done ({self.forwards} forward(s)); "
                                f"save after optimizer.step()")
        dirs = None if self.predict is None else [dict(kept) for kept in self.predict.dirs]
        return {"steps": self.steps, "store": self.store.state_dict(), "directions": dirs,
                "correction": None if self.correct is None else self.correct.state_dict(),
                "update": self.update.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict` (on a pipeline built with the same arguments, after
        :meth:`attach`)."""
        if state.get("steps") != self.steps:
            raise StalesimError(f"state_dict: saved for steps={state.get('steps')}, this pipeline has "
                                f"steps={self.steps}")
        self.store.load_state_dict(state["store"])
        self.forwards = 0
        dirs = state.get("directions")
        if self.predict is not None and dirs is not None:
            self.predict.dirs = [{int(v): list(ds) for v, ds in kept.items()} for kept in dirs]
        if self.correct is not None and state.get("correction") is not None:
            self.correct.load_state_dict(state["correction"])
        if state.get("update") is not None:
            self.update.load_state_dict(state["update"])

    # ------------------------------------------------------------- reporting
    def versions_match(self) -> bool:
        """Whether every version read and produced so far is the IR's (the steps taken)."""
        done = self.log.complete_rows()
        if not done.upd:
            return True
        return (all(self.table.vf[k] == v for k, v in done.vf.items())
                and all(self.table.vb[k] == v for k, v in done.vb.items())
                and all(self.table.upd[k] == v for k, v in done.upd.items())
                and len(done.vf) == len(done.vb) == len(done.upd) * len(self.micros))

    @property
    def stash_peak_bytes(self) -> int:
        """The most bytes of weight copies held at once: the memory beyond plain training."""
        return self.store.peak_bytes

    def close(self) -> None:
        """Remove the hooks (the model and optimizer are plain again)."""
        for h in self._handles:
            h.remove()
        self._handles.clear()
        if self.grads is not None:
            self.grads.remove()


class _ScalerWatch:
    """Wraps one ``GradScaler``'s ``step`` on the instance: a call for the attached optimizer
    that returns without the optimizer having stepped (the scaler found inf or NaN gradients)
    reports the skip. ``remove()`` restores the scaler's own method, as a hook handle would."""

    def __init__(self, scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer,
                 version: Callable[[], int], on_skip: Callable[[], None]) -> None:
        self.scaler = scaler
        own = scaler.step

        def step(opt: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
            before = version()
            out = own(opt, *args, **kwargs)
            if opt is optimizer and version() == before:
                on_skip()
            return out

        vars(scaler)["step"] = step  # on the instance: the class keeps its own method

    def remove(self) -> None:
        self.scaler.__dict__.pop("step", None)
