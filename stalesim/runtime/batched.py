"""K training runs of one shape as one: the batched ("wide") stage runtime.

A staleness study is a grid of small runs that share the model shape, the
schedule and the partition and differ in seeds, learning rates, weight decay or
mitigations. Run one after another they leave the device idle (per-action Python
overhead, small kernels); run together they fill it (horizontally fused training,
HFTA, MLSys 2021). Here the K runs of a batch become **one** stage runtime per
(worker, stage) whose tensors carry a leading run axis:

* :class:`WideModule`: the K copies of a stage, parameters stacked ``[K, ...]``
  (:func:`torch.func.stack_module_state`); ``forward(x)`` with ``x`` of shape
  ``[K, B, ...]`` is ``vmap(functional_call(stage, params_k, x_k))``. Every
  parameter of the wide module is one stacked leaf tensor, so the version machinery
  of :class:`~stalesim.runtime.stage.StageRuntime` works unchanged on it: the pack
  hook sees saved tensors that share storage with a stacked parameter (vmap's
  batching rules save views of it: ``bmm`` of the transposed weight, grouped
  convolution of the reshaped weight, ...) and stores a token, the unpack hook
  substitutes the stacked tensor of version v_B, the stash clones stacked versions
  lazily. All K runs read the same version index (they share the schedule), each
  from its own slice.
* :class:`BatchedOptimizer`: SGD (momentum, Nesterov), Adam, AdamW and the Adam
  look-ahead on stacked tensors with **per-run** hyper-parameters (learning rate,
  momentum, betas, eps, weight decay, clipping norm, error feedback): scalars of
  run k are Python floats turned into ``[K, 1, ...]`` tensors where they are used,
  so each run's arithmetic is that of :class:`~stalesim.runtime.optim.StageOptimizer`
  up to float rounding (the same formulas, in torch's order). Each distinct ``[K]``
  vector is uploaded once (cached, asynchronously on CUDA), not once per parameter:
  a synchronous upload per use would stall a GPU on the host several times per
  parameter and update. Per-run clipping norms are the L2 norm over this stage's
  parameters of run k only, and the clipping coefficient stays on the device.
* :class:`BatchedMitigations`: the mitigations of
  :mod:`stalesim.runtime.mitigations` with a per-run on/off mask and per-run
  coefficients (delays come from the shared version table), so runs of one batch
  can differ in mitigations.
* the loss is per run (a ``[K]`` vector; the backward starts from its sum, whose
  gradient with respect to run k's parameters is exactly run k's gradient).

What K runs must share (:func:`check_batch`): everything that decides the shape of a
tensor or the schedule: model, dataset, schedule, stages/PPV, micro-batches,
workers, length, batch size, dtype, device, optimizer kind, warm-up/switch,
compression. What may differ: :data:`PER_RUN_FIELDS`. BatchNorm running statistics
are buffers updated in place by every forward; they are not stacked, so models with
BatchNorm are refused (one line) rather than silently shared between runs.

**Exactness.** Per run, the batched computation is the single run's computation
with the run axis added: in float64 the losses equal separate runs to round-off
(tested to 1e-10 relative); in float32 batched kernels (``bmm``, grouped
convolution) sum in another order than the single-run kernels, and the
differences (about 1e-7 relative per step) grow with training like any float32
reassociation (the tolerance is stated in ``tests/test_emulator_batched.py``).
"""

from __future__ import annotations

import copy
import math
import os
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from stalesim.errors import StalesimError
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.devio import upload
from stalesim.runtime.mitigations import Mitigations, compress, pipemare_exponent
from stalesim.runtime.muon import lr_ratio, newton_schulz
from stalesim.runtime.optim import lookahead_decay, nadam_mu
from stalesim.runtime.stage import StageRuntime, _Inflight

#: TrainConfig fields that may differ between the runs of one batch.
PER_RUN_FIELDS = frozenset({
    "seed", "lr", "momentum", "weight_decay", "lr_schedule", "lr_warmup", "lr_min",
    "betas", "eps", "nesterov", "clip_grad_norm",
    "weight_prediction", "spike_compensation", "pipemare_lr", "pipemare_warmup",
    "pipemare_correction", "pipemare_gamma", "staleness_lr",
    "nesterov_lookahead", "lookahead_momentum", "nadam_momentum_decay", "error_feedback", "error_feedback_beta",
    "muon_lr", "muon_momentum",
})


def check_batch(cfgs: Sequence[TrainConfig]) -> None:
    """Raise a one-line StalesimError unless the runs can train as one batch."""
    if not cfgs:
        raise StalesimError("batched: no runs")
    ref = cfgs[0].to_dict()
    for i, c in enumerate(cfgs[1:], 1):
        d = c.to_dict()
        for f in fields(TrainConfig):
            if f.name in PER_RUN_FIELDS or ref[f.name] == d[f.name]:
                continue
            if f.name in ("stages", "ppv") and cfgs[0].num_stages == c.num_stages and (
                    cfgs[0].ppv is None or c.ppv is None or list(cfgs[0].ppv) == list(c.ppv)):
                continue  # the same partition spelled two ways is checked on the built stages
            raise StalesimError(
                f"batched: runs 0 and {i} differ in {f.name} ({ref[f.name]!r} vs {d[f.name]!r}); the runs of "
                "one batch must share model shape, data, schedule, partition and optimizer kind "
                f"(they may differ in {', '.join(sorted(PER_RUN_FIELDS))})")


#: per-run scalar tensors by (values, dtype, device): the hyper-parameters of a batch are
#: the same every step and the learning rates the same for every parameter of a step, so
#: each is uploaded once instead of once per parameter and use (bounded: learning-rate
#: schedules make new values every step)
_SCALARS: OrderedDict[tuple, torch.Tensor] = OrderedDict()
_SCALARS_MAX = 512


def _cached(values: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The ``[K]`` tensor of ``values`` on ``device``, uploaded once (:func:`upload`: no host
    synchronisation on CUDA). Callers never modify it in place."""
    key = (values, dtype, device)
    t = _SCALARS.get(key)
    if t is None:
        t = _SCALARS[key] = upload(values, dtype, device)
        if len(_SCALARS) > _SCALARS_MAX:
            _SCALARS.popitem(last=False)
    else:
        _SCALARS.move_to_end(key)
    return t


def _floats(xs: Sequence[float], like: torch.Tensor) -> torch.Tensor:
    """Per-run Python floats as a ``[K]`` tensor of ``like``'s dtype and device (each value
    rounded once, as torch rounds a Python scalar operand)."""
    return _cached(tuple(float(x) for x in xs), like.dtype, like.device)


def _bc(v: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """A ``[K]`` vector shaped to broadcast against a stacked ``[K, ...]`` tensor."""
    return v.view((-1,) + (1,) * (p.dim() - 1))


def _mask(flags: Sequence[bool], p: torch.Tensor) -> torch.Tensor:
    return _cached(tuple(bool(f) for f in flags), torch.bool, p.device).view((-1,) + (1,) * (p.dim() - 1))


# --------------------------------------------------------------------- module
def _refuse_state(modules: Sequence[nn.Module], what: str) -> None:
    for m in modules:
        for mod in m.modules():
            if isinstance(mod, nn.modules.batchnorm._NormBase) or any(True for _ in mod.buffers(recurse=False)):
                raise StalesimError(
                    f"batched: {what} has {type(mod).__name__} state that every forward updates in place "
                    "(running statistics), which --batched does not stack; run it without --batched")


class WideModule(nn.Module):
    """K modules of identical structure as one module with stacked parameters.

    ``forward(x)``: ``x`` is ``[K, B, ...]`` (run k's batch in slice k), the output
    ``[K, B, ...]``. Every parameter is one stacked ``[K, ...]`` leaf, so
    ``functional_call(wide, {...})`` (weight prediction, checkpoint resume) swaps the
    stacked tensors like any module's parameters. Build with :func:`wide`.
    """

    runs: int


class FoldedWide(WideModule):
    """The fast path: the run axis folded into the batch axis (``[K * B, ...]``), layers with
    weights replaced by fused ones (:class:`_WideLinear`: one ``baddbmm`` for K runs;
    :class:`_WideConv2d`: each run's convolution on its own slice on CPU, one grouped
    convolution on CUDA; :class:`_WideLayerNorm`, :class:`_WideEmbedding`, the GPT's
    token + position embedding), weight-free layers and the zoo's container blocks
    (whose forward code treats samples independently) unchanged. Used when every module
    of the stage is of a known kind (:func:`fold`)."""

    def __init__(self, body: nn.Module, runs: int) -> None:
        super().__init__()
        self.body = body
        self.runs = runs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        K = self.runs
        y = self.body(x.reshape(K * x.shape[1], *x.shape[2:]))
        return y.view(K, y.shape[0] // K, *y.shape[1:])


class VmapWide(WideModule):
    """The general path: ``vmap(functional_call(stage, params_k, x_k))`` over a parameter-free
    template (any module without running statistics; slower on CPU, where vmap's batching
    rules copy and re-layout tensors)."""

    def __init__(self, modules: Sequence[nn.Module]) -> None:
        super().__init__()
        mods = list(modules)
        params, _ = torch.func.stack_module_state(mods)
        self.names: list[str] = list(params)
        self.runs = len(mods)
        template = copy.deepcopy(mods[0]).to("meta")
        self.__dict__["_template"] = template  # not a submodule: its (meta) parameters are not ours
        self._keys: list[str] = []
        for i, (name, p) in enumerate(params.items()):
            key = f"p{i}__" + name.replace(".", "_")
            self.register_parameter(key, nn.Parameter(p.detach(), requires_grad=p.requires_grad))
            self._keys.append(key)

    def train(self, mode: bool = True) -> VmapWide:
        super().train(mode)
        self.__dict__["_template"].train(mode)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        template = self.__dict__["_template"]
        params = {n: getattr(self, k) for n, k in zip(self.names, self._keys)}

        def one(p: dict[str, torch.Tensor], xk: torch.Tensor) -> torch.Tensor:
            return torch.func.functional_call(template, p, (xk,))

        if x.device.type == "cuda":
            return torch.func.vmap(one)(params, x)
        # the CPU flash-attention kernel has no vmap rule (vmap would loop over the runs, and
        # its backward would zero-fill the whole stacked tensor once per run); the math
        # kernel decomposes into batched matmul and softmax
        with sdpa_kernel(SDPBackend.MATH):
            return torch.func.vmap(one)(params, x)


def _stack(tensors: Sequence[torch.Tensor | None]) -> nn.Parameter | None:
    if tensors[0] is None:
        return None
    return nn.Parameter(torch.stack([t.detach() for t in tensors if t is not None]))


class _WideLinear(nn.Module):
    def __init__(self, mods: Sequence[nn.Linear]) -> None:
        super().__init__()
        self.runs = len(mods)
        self.weight = _stack([m.weight for m in mods])  # [K, out, in]
        self.bias = _stack([m.bias for m in mods])  # [K, out]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xs = x.reshape(self.runs, -1, x.shape[-1])
        wt = self.weight.transpose(1, 2)  # type: ignore[union-attr]
        y = torch.bmm(xs, wt) if self.bias is None else torch.baddbmm(self.bias.unsqueeze(1), xs, wt)
        return y.view(*x.shape[:-1], y.shape[-1])


class _WideConv2d(nn.Module):
    def __init__(self, mods: Sequence[nn.Conv2d]) -> None:
        super().__init__()
        m = mods[0]
        self.runs = len(mods)
        self.stride, self.padding, self.dilation, self.groups = m.stride, m.padding, m.dilation, m.groups
        self.weight = _stack([c.weight for c in mods])  # [K, O, C/g, kh, kw]
        self.bias = _stack([c.bias for c in mods])
        self.grouped = False  # one grouped convolution for the K runs (set on CUDA; tests set it)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        K = self.runs
        w = self.weight
        assert w is not None
        xs = x.view(K, x.shape[0] // K, *x.shape[1:])
        if self.grouped or x.is_cuda:
            N, C = xs.shape[1], xs.shape[2]
            xg = xs.transpose(0, 1).reshape(N, K * C, *xs.shape[3:])
            b = None if self.bias is None else self.bias.reshape(-1)
            y = F.conv2d(xg, w.reshape(-1, *w.shape[2:]), b, self.stride, self.padding, self.dilation,
                         self.groups * K)
            return y.view(N, K, -1, *y.shape[2:]).transpose(0, 1).reshape(K * N, -1, *y.shape[2:])
        return torch.cat([F.conv2d(xs[k], w[k], None if self.bias is None else self.bias[k], self.stride,
                                   self.padding, self.dilation, self.groups) for k in range(K)])


class _WideLayerNorm(nn.Module):
    def __init__(self, mods: Sequence[nn.LayerNorm]) -> None:
        super().__init__()
        m = mods[0]
        self.runs = len(mods)
        self.normalized_shape = tuple(m.normalized_shape)
        self.eps = m.eps
        self.weight = _stack([n.weight for n in mods])
        self.bias = _stack([n.bias for n in mods])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.layer_norm(x, self.normalized_shape, None, None, self.eps)
        if self.weight is None:
            return y
        shape = (self.runs, 1) + self.normalized_shape
        yv = y.view(self.runs, -1, *self.normalized_shape) * self.weight.view(shape)
        if self.bias is not None:
            yv = yv + self.bias.view(shape)
        return yv.view(x.shape)


class _WideEmbedding(nn.Module):
    """K tables as one ``[K * V, C]`` table; run k's ids are offset by k V."""

    def __init__(self, mods: Sequence[nn.Embedding]) -> None:
        super().__init__()
        self.runs = len(mods)
        self.num_embeddings = mods[0].num_embeddings
        self.weight = _stack([m.weight for m in mods])  # [K, V, C]

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        K, V = self.runs, self.num_embeddings
        w = self.weight
        assert w is not None
        off = (torch.arange(K, device=idx.device) * V).view(K, *([1] * idx.dim()))
        ids = idx.view(K, idx.shape[0] // K, *idx.shape[1:]) + off
        return F.embedding(ids, w.view(K * V, w.shape[-1])).view(*idx.shape, w.shape[-1])


class _WideTokPos(nn.Module):
    """The char-GPT's token + learned position embedding (:class:`stalesim.workloads.gpt.Embedding`)."""

    def __init__(self, mods: Sequence[nn.Module]) -> None:
        super().__init__()
        self.runs = len(mods)
        self.block_size = int(mods[0].block_size)  # type: ignore[arg-type]
        self.tok = _WideEmbedding([m.tok for m in mods])  # type: ignore[misc]
        self.pos = _WideEmbedding([m.pos for m in mods])  # type: ignore[misc]

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.shape[-1]
        if self.block_size < T:
            raise RuntimeError(f"stalesim: sequence of {T} tokens exceeds block_size {self.block_size}")
        tok = self.tok(idx)
        pos = self.pos.weight[:, :T]  # type: ignore[index]  # rows 0..T-1: what pos(arange(T)) reads
        out = tok.view(self.runs, -1, T, tok.shape[-1]) + pos.unsqueeze(1)
        return out.view(tok.shape)


_STATELESS = (nn.ReLU, nn.Tanh, nn.GELU, nn.Sigmoid, nn.SiLU, nn.MaxPool2d, nn.AvgPool2d,
              nn.AdaptiveAvgPool2d, nn.Flatten, nn.Identity)


def _containers() -> tuple[type, ...]:
    """Module classes whose own forward code treats every sample independently."""
    from stalesim.runtime.heads import AuxHead, TokenHead
    from stalesim.workloads.gpt import CausalSelfAttention, LMHead, TransformerBlock

    return (nn.Sequential, AuxHead, TokenHead, TransformerBlock, CausalSelfAttention, LMHead)


def _fold(mods: Sequence[nn.Module]) -> nn.Module | None:
    """The folded version of K same-structure modules, or None if a module is of an unknown kind."""
    from stalesim.workloads.gpt import Embedding as GPTEmbedding

    m0 = mods[0]
    t = type(m0)
    if any(type(m) is not t for m in mods):
        return None
    if t is nn.Linear:
        return _WideLinear(mods)  # type: ignore[arg-type]
    if t is nn.Conv2d and m0.padding_mode == "zeros":
        return _WideConv2d(mods)  # type: ignore[arg-type]
    if t is nn.LayerNorm:
        return _WideLayerNorm(mods)  # type: ignore[arg-type]
    if t is nn.Embedding and m0.padding_idx is None and m0.max_norm is None:
        return _WideEmbedding(mods)
    if t is GPTEmbedding:
        return _WideTokPos(mods)
    own = list(m0._parameters.values()) + list(m0._buffers.values())
    if t in _STATELESS and not own:
        return copy.deepcopy(m0)
    if t in _containers() and not own:
        new = copy.copy(m0)  # a shallow copy keeps the block's settings (n_head, ...)
        new._modules = {}
        new._parameters = {}
        new._buffers = {}
        for name in m0._modules:
            child = _fold([m._modules[name] for m in mods])  # type: ignore[misc]
            if child is None:
                return None
            new._modules[name] = child
        return new
    return None


def wide(modules: Sequence[nn.Module], *, what: str = "model", generic: bool = False) -> WideModule:
    """The K runs' copies of a stage (or head) as one :class:`WideModule`: folded when every
    module is of a known kind, else through vmap (``generic`` forces vmap)."""
    mods = list(modules)
    if not mods:
        raise StalesimError("batched: no runs")
    _refuse_state(mods, what)
    body = None if generic else _fold(mods)
    if body is not None:
        return FoldedWide(body, len(mods))
    return VmapWide(mods)


# ------------------------------------------------------------------- optimizer
class BatchedOptimizer:
    """The update of one stage for K runs at once (see the module doc).

    Same interface as :class:`~stalesim.runtime.optim.StageOptimizer`: ``step(grads, lr,
    spike=(a, b), delayed=...)`` where ``lr``, ``a``, ``b`` are per-run lists,
    ``directions()``, ``state_dict()`` / ``load_state_dict()``; ``torch`` is ``self``
    when the stage has parameters (the runtime tests it for "has an optimizer").
    """

    def __init__(self, params: list[torch.nn.Parameter], cfgs: Sequence[TrainConfig], *,
                 muon_mask: Sequence[bool] | None = None) -> None:
        self.params = params
        self.cfgs = list(cfgs)
        self.kind = cfgs[0].optimizer
        # --optimizer muon: which stacked parameters are Muon's (the per-run split)
        self.muon_mask = list(muon_mask) if muon_mask is not None else [False] * len(params)
        if len(self.muon_mask) != len(params):
            raise ValueError(f"muon mask has {len(self.muon_mask)} entries for {len(params)} parameters")
        self.torch: BatchedOptimizer | None = self if params else None
        self.steps = 0
        self.buf: list[torch.Tensor] | None = None  # SGD momentum (None before the first step)
        self.m: list[torch.Tensor] | None = None
        self.v: list[torch.Tensor] | None = None
        self.prev_step: list[torch.Tensor] | None = None
        c = self.cfgs
        self.mu = [x.momentum for x in c]
        self.wd = [x.weight_decay for x in c]
        self.b1 = [float(x.betas[0]) for x in c]
        self.b2 = [float(x.betas[1]) for x in c]
        self.eps = [x.eps for x in c]
        self.lookahead = [bool(x.nesterov_lookahead) for x in c]
        self.nadam_decay = [lookahead_decay(x) for x in c]
        self.mu_prod = [1.0] * len(c)  # the look-ahead's NAdam product of momentum coefficients
        self.nesterov = [bool(x.nesterov or x.nesterov_lookahead) for x in c]
        self.lr_scale = [1.0 - x.momentum if (self.kind == "sgd" and x.nesterov_lookahead) else 1.0 for x in c]
        self.clip = [x.clip_grad_norm for x in c]
        self.ef = [bool(x.error_feedback) for x in c]
        self.ef_beta = [x.error_feedback_beta if x.error_feedback else 0.0 for x in c]
        self.muon_mu = [x.muon_momentum for x in c]
        self.muon_lr = [x.muon_lr for x in c]
        self.base_lr = [x.lr for x in c]

    # ------------------------------------------------------------------ helpers
    def _clip(self, grads: list[torch.Tensor]) -> None:
        """Per run: scale run k's gradient to L2 norm <= clip_k over this stage (torch's rule)."""
        if all(c is None for c in self.clip) or not grads:
            return
        norms = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(g.reshape(g.shape[0], -1), dim=1) for g in grads]), dim=0)
        # torch's rule per run: multiply by max / (norm + 1e-6) when that is < 1, computed on
        # the device (no read of the norms) in float64, i.e. in the Python float arithmetic of
        # the single run's rule; a run without clipping has max = inf
        limit = _cached(tuple(math.inf if c is None else float(c) for c in self.clip), torch.float64,
                        norms.device)
        coef = limit / (norms.double() + 1e-6)
        todo = coef < 1.0  # False for NaN: a NaN norm leaves the gradient as it is
        for g in grads:
            scale = _bc(torch.where(todo, coef, 1.0).to(g.dtype), g)
            g.copy_(torch.where(_bc(todo, g), g * scale, g))

    # ------------------------------------------------------------------- update
    @torch.no_grad()
    def step(self, grads: list[torch.Tensor], lr: Sequence[float], *,
             spike: tuple[Sequence[float], Sequence[float]] | None = None, delayed: bool = False) -> None:
        if not self.params:
            return
        self._clip(grads)
        K = len(self.cfgs)
        a, b = spike if spike is not None else ([1.0] * K, [0.0] * K)
        old = [p.detach().clone() for p in self.params] if any(self.ef) else None
        if self.kind == "sgd":
            self._sgd(grads, lr, a, b)
        elif self.kind == "muon":
            self._muon(grads, lr)
            self._adam(grads, lr, skip=self.muon_mask)
        else:
            self._adam(grads, lr)
        if old is not None:
            delta = [p.detach() - o for p, o in zip(self.params, old)]
            if delayed and self.prev_step is not None:
                for p, d, dp in zip(self.params, delta, self.prev_step):
                    p.add_(_bc(_floats(self.ef_beta, p), p) * (d - dp))
            self.prev_step = delta if delayed else None  # as StageOptimizer.step

    def _sgd(self, grads: list[torch.Tensor], lr: Sequence[float], a: Sequence[float], b: Sequence[float]) -> None:
        any_wd, any_mu, any_b = any(self.wd), any(self.mu), any(b)
        first = self.buf is None
        if any_mu and first:
            self.buf = []
        lr_eff = [lr_k * a_k * s_k for lr_k, a_k, s_k in zip(lr, a, self.lr_scale)]
        for i, (p, g) in enumerate(zip(self.params, grads)):
            if any_wd:
                g = g.add(_bc(_floats(self.wd, p), p) * p)
            extra = g if any_b else None  # spike compensation's b-term: g + wd w (before the step)
            d = g
            if any_mu:
                assert self.buf is not None
                mu = _bc(_floats(self.mu, p), p)
                if first:
                    buf = g.clone()
                    self.buf.append(buf)
                else:
                    buf = self.buf[i].mul_(mu).add_(g)
                d = buf
                if any(self.nesterov):
                    d = torch.where(_mask(self.nesterov, p), g + mu * buf, buf)
                # runs without momentum step with g itself (torch keeps no buffer for them)
                d = torch.where(_mask([m != 0 for m in self.mu], p), d, g)
            p.sub_(_bc(_floats(lr_eff, p), p) * d)
            if extra is not None:
                p.sub_(_bc(_floats([lr_k * b_k for lr_k, b_k in zip(lr, b)], p), p) * extra)

    def _muon(self, grads: list[torch.Tensor], lr: Sequence[float]) -> None:
        """Muon on the masked matrices, run k at ``muon_lr_k * lr_k / lr0_k`` (the single
        run's :class:`~stalesim.runtime.muon.MuonAdamW`); each run's matrix orthogonalised
        on its own (a batched Newton-Schulz), in bfloat16 as torch does, float64 in float64."""
        if self.buf is None:
            self.buf = [torch.zeros_like(p) if m else p.new_empty(0) for p, m in zip(self.params, self.muon_mask)]
        steps = self.cfgs[0].muon_ns_steps
        lr_m = [mlr * (lr_k / base) for mlr, lr_k, base in zip(self.muon_lr, lr, self.base_lr)]
        for p, g, buf, m in zip(self.params, grads, self.buf, self.muon_mask):
            if not m:
                continue
            mu = _bc(_floats(self.muon_mu, p), p)
            buf.lerp_(g, _bc(_floats([1 - x for x in self.muon_mu], p), p))
            o = newton_schulz(g.lerp(buf, mu), steps,
                              dtype=torch.float64 if p.dtype == torch.float64 else torch.bfloat16)
            if any(self.wd):
                p.mul_(_bc(_floats([1 - lk * wd for lk, wd in zip(lr_m, self.wd)], p), p))
            p.sub_(_bc(_floats([lk * lr_ratio(p.shape[1:]) for lk in lr_m], p), p) * o)

    def _adam(self, grads: list[torch.Tensor], lr: Sequence[float], *, skip: Sequence[bool] | None = None) -> None:
        """Adam / AdamW; ``skip``: parameters another rule updates (Muon's), no moments kept."""
        decoupled = self.kind in ("adamw", "muon")
        skip = skip if skip is not None else [False] * len(self.params)
        if self.m is None:
            self.m = [p.new_empty(0) if k else torch.zeros_like(p) for p, k in zip(self.params, skip)]
            self.v = [p.new_empty(0) if k else torch.zeros_like(p) for p, k in zip(self.params, skip)]
        assert self.v is not None
        self.steps += 1
        t = self.steps
        bc1 = [1 - b1**t for b1 in self.b1]
        bc2_sqrt = [(1 - b2**t) ** 0.5 for b2 in self.b2]
        la = any(self.lookahead)
        # coefficient of m/denom (Adam: lr / bc1; look-ahead, NAdam: lr mu_{t+1} / (1 - P_t mu_{t+1}))
        # and of g/denom (look-ahead: lr (1 - mu_t) / (1 - P_t)), P_t = mu_1 ... mu_t per run
        mu = [nadam_mu(b1, t, psi) for b1, psi in zip(self.b1, self.nadam_decay)]
        mu_next = [nadam_mu(b1, t + 1, psi) for b1, psi in zip(self.b1, self.nadam_decay)]
        self.mu_prod = [P * m for P, m in zip(self.mu_prod, mu)]
        cm = [lr_k * mn / (1 - P * mn) if look else lr_k / c1
              for lr_k, mn, P, c1, look in zip(lr, mu_next, self.mu_prod, bc1, self.lookahead)]
        cg = [lr_k * (1 - m) / (1 - P) if look else 0.0
              for lr_k, m, P, look in zip(lr, mu, self.mu_prod, self.lookahead)]
        for p, g, m, v, k in zip(self.params, grads, self.m, self.v, skip):
            if k:
                continue
            if any(self.wd):
                if decoupled:
                    p.mul_(_bc(_floats([1 - lr_k * wd for lr_k, wd in zip(lr, self.wd)], p), p))
                else:
                    g = g.add(_bc(_floats(self.wd, p), p) * p)
            m.lerp_(g, _bc(_floats([1 - b1 for b1 in self.b1], p), p))
            v.mul_(_bc(_floats(self.b2, p), p)).add_(_bc(_floats([1 - b2 for b2 in self.b2], p), p) * g * g)
            denom = (v.sqrt() / _bc(_floats(bc2_sqrt, p), p)).add_(_bc(_floats(self.eps, p), p))
            if la:
                p.sub_(_bc(_floats(cg, p), p) * (g / denom))
            p.sub_(_bc(_floats(cm, p), p) * (m / denom))

    # --------------------------------------------------------------- prediction
    def directions(self, base: Sequence[torch.Tensor]) -> list[torch.Tensor | None]:
        """Per parameter, each run's next step per unit lr (stacked) from the weights ``base``;
        None before the first update (see :meth:`stalesim.runtime.optim.StageOptimizer.directions`)."""
        if not self.params:
            return []
        if self.kind == "muon":  # TrainConfig refuses the combinations that ask
            raise ValueError("directions: Muon defines no next direction")
        if self.kind == "sgd":
            return list(self.buf) if self.buf is not None else [None] * len(self.params)
        if self.m is None or self.v is None or self.steps == 0:
            return [None] * len(self.params)
        t = float(self.steps)
        out: list[torch.Tensor | None] = []
        wd = self.wd if self.kind == "adamw" else [0.0] * len(self.wd)
        for p, w, m, v in zip(self.params, base, self.m, self.v):
            m_hat = m / _bc(_floats([1 - b1**t for b1 in self.b1], p), p)
            denom = (v.sqrt() / _bc(_floats([math.sqrt(1 - b2**t) for b2 in self.b2], p), p)).add_(
                _bc(_floats(self.eps, p), p))
            d = m_hat / denom
            if any(wd):
                d = d + _bc(_floats(wd, p), p) * w
            out.append(d)
        return out

    # --------------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, Any]:
        def cl(xs: list[torch.Tensor] | None) -> list[torch.Tensor] | None:
            return None if xs is None else [x.clone() for x in xs]

        return {"steps": self.steps, "buf": cl(self.buf), "m": cl(self.m), "v": cl(self.v),
                "prev_step": cl(self.prev_step), "mu_prod": list(self.mu_prod)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps = int(state["steps"])
        self.buf, self.m, self.v = state["buf"], state["m"], state["v"]
        self.prev_step = state["prev_step"]
        if "mu_prod" in state:
            self.mu_prod = [float(x) for x in state["mu_prod"]]
        else:  # a checkpoint written before the look-ahead's schedule existed
            self.mu_prod = [math.prod(nadam_mu(b1, i, psi) for i in range(1, self.steps + 1))
                            for b1, psi in zip(self.b1, self.nadam_decay)]


# ----------------------------------------------------------------- mitigations
class BatchedMitigations(Mitigations):
    """Per-run mitigations (each run's flags and coefficients; the delays are shared)."""

    def __init__(self, cfgs: Sequence[TrainConfig], schedule: Any, stage: int, worker: int = 0) -> None:
        super().__init__(cfgs[0], schedule, stage, worker)
        self.cfgs = list(cfgs)
        self.wp = [bool(c.weight_prediction) for c in cfgs]
        self.pmc = [bool(c.pipemare_correction) for c in cfgs]

    def lr_factor(self, batch: int) -> list[float]:  # type: ignore[override]
        out = []
        D: int | None = None
        for c in self.cfgs:
            f = 1.0
            if c.staleness_lr or c.pipemare_lr:
                D = self.batch_delay(batch) if D is None else D
                if c.staleness_lr:
                    f /= D + 1
                if c.pipemare_lr:
                    f *= max(D, 1) ** (-pipemare_exponent(batch, c.pipemare_warmup))
            out.append(f)
        return out

    @property
    def changes_forward(self) -> bool:
        return any(self.wp)

    @property
    def backward_reuses_forward(self) -> bool:
        # a run without prediction read the stashed version v_F in its slice of the
        # forward's weights (torch.where), so the forward's tensors serve every run
        return any(self.wp) and self.stashes

    @property
    def backward_predicts(self) -> bool:
        return any(self.wp) and not self.stashes

    @property
    def changes_backward(self) -> bool:
        return any(self.wp) or any(self.pmc)

    @property
    def needs_old_weights(self) -> bool:
        return any(self.pmc)

    def _predict(self, weights: list[torch.Tensor], bufs: list[torch.Tensor | None], lr: Sequence[float],
                 horizon: int) -> list[torch.Tensor]:
        if horizon == 0:
            return list(weights)
        out = []
        for w, v in zip(weights, bufs):
            if v is None:
                out.append(w)
                continue
            c = _bc(_floats([lr_k * horizon for lr_k in lr], w), w)
            out.append(torch.where(_mask(self.wp, w), w - c * v, w))
        return out

    def forward_weights(self, live: list[torch.Tensor], bufs: list[torch.Tensor | None],  # type: ignore[override]
                        lr: Sequence[float], batch: int, micro: int | None) -> list[torch.Tensor] | None:
        if not any(self.wp):
            return None
        D = self.delay_forward(batch, micro)
        if D == 0 or all(v is None for v in bufs):
            return None
        return [w.detach() for w in self._predict(live, bufs, lr, D)]

    def backward_weights(self, base: list[torch.Tensor], bufs: list[torch.Tensor | None],  # type: ignore[override]
                         lr: Sequence[float], batch: int, micro: int | None) -> list[torch.Tensor]:
        out = list(base)
        if self.backward_predicts:
            out = self._predict(out, bufs, lr, self.delay_backward(batch, micro))
        if any(self.pmc) and self.delta is not None:
            gap = self.table.gap(self.stage, batch, micro, self.worker)
            if gap:
                out = [torch.where(_mask(self.pmc, w), w - gap * d, w) for w, d in zip(out, self.delta)]
        return out

    def spike_coefficients(self, batch: int) -> tuple[list[float], list[float]]:  # type: ignore[override]
        a, b = [], []
        D: int | None = None
        for c in self.cfgs:
            mu = c.momentum
            if not c.spike_compensation or mu == 0:
                a.append(1.0)
                b.append(0.0)
                continue
            D = self.batch_delay(batch) if D is None else D
            ak = mu**D
            a.append(ak)
            b.append((1.0 - ak) / (1.0 - mu))
        return a, b

    def record_step(self, old: list[torch.Tensor] | None, new: list[torch.Tensor]) -> None:
        if not any(self.pmc) or old is None:
            return
        if self.delta is None:
            self.delta = [torch.zeros_like(w) for w in new]
        for d, o, n in zip(self.delta, old, new):
            g = _bc(_floats([c.pipemare_gamma for c in self.cfgs], d), d)
            d.mul_(g).add_((n - o) * _bc(_floats([1.0 - c.pipemare_gamma for c in self.cfgs], d), d))


# ------------------------------------------------------------------- the loss
def per_run_loss(task: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``[K, B, ...]`` outputs and labels -> the ``[K]`` vector of per-run mean losses
    (:func:`stalesim.runtime.tasks.loss_fn` of each run)."""

    def loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        K = out.shape[0]
        flat = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1), reduction="none")
        return flat.view(K, -1).mean(1)

    return loss


# -------------------------------------------------------------------- runtime
class BatchedStageRuntime(StageRuntime):
    """A :class:`StageRuntime` over a :class:`WideModule`: K runs, one version machinery.

    ``cfgs``: the K runs' configurations (``cfg`` = run 0's, for the shared fields);
    ``lr_fn(t)`` returns the K base learning rates of the update fed by batch t.
    ``loss`` returns the K per-run losses (a list), ``lr_for`` K learning rates.
    """

    def __init__(self, module: WideModule, *, cfgs: Sequence[TrainConfig],
                 muon_mask: Sequence[bool] | None = None, **kw: Any) -> None:
        self.cfgs = list(cfgs)
        self._muon_mask = muon_mask  # computed on a run's own stage module (the wide one has other types)
        super().__init__(module, cfg=self.cfgs[0], **kw)
        from stalesim.runtime.tasks import task_of

        self.loss_fn = per_run_loss(task_of(self.cfg))

    def _make_optimizer(self) -> Any:
        return BatchedOptimizer(self.params, self.cfgs, muon_mask=self._muon_mask)

    def _make_mitigations(self) -> Any:
        return BatchedMitigations(self.cfgs, self.schedule, self.stage, self.worker)

    def _keep_loss(self, rec: _Inflight, loss: torch.Tensor) -> torch.Tensor:
        rec.loss = loss.sum()  # d(sum)/d(run k's weights) = run k's gradient
        return loss.detach()

    def lr_for(self, batch: int) -> list[float]:  # type: ignore[override]
        return [a * b for a, b in zip(self.lr_fn(batch), self.mit.lr_factor(batch))]  # type: ignore[call-overload]

    def _error_feedback_applies(self, batch: int) -> bool:
        return any(c.error_feedback for c in self.cfgs) and self.mit.batch_delay(batch) >= 1


# ------------------------------------------------------------------ all-reduce
def compress_runs(t: torch.Tensor, mode: str) -> torch.Tensor:
    """:func:`~stalesim.runtime.mitigations.compress` of each run's slice of a stacked tensor
    (int8's scale is per run and tensor, as in a single run)."""
    if mode != "int8":
        return compress(t, mode)
    return torch.stack([compress(t[k], mode) for k in range(t.shape[0])])


def mean_runs_in_process(buffers: list[list[torch.Tensor]], mode: str) -> None:
    """The emulator's all-reduce of stacked buffers: every worker's buffer becomes the mean
    over workers of the (per-run compressed) buffers, elementwise in the order of
    :func:`stalesim.runtime.allreduce.mean_in_process` (sum over workers, then / P)."""
    if not buffers or not buffers[0]:
        return
    P = len(buffers)
    with torch.no_grad():
        for i in range(len(buffers[0])):
            total = compress_runs(buffers[0][i], mode).clone()
            for b in buffers[1:]:
                total.add_(compress_runs(b[i], mode))
            total.div_(P)
            for b in buffers:
                b[i].copy_(total)


# ------------------------------------------------------------ memory estimate
def available_bytes(device: torch.device) -> int | None:
    """Memory free for tensors on ``device`` (CUDA: ``mem_get_info``; CPU: MemAvailable)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def _saved_bytes(mod: nn.Module, x: torch.Tensor) -> tuple[int, torch.Tensor]:
    """(bytes of the distinct non-parameter storages a forward of ``mod`` saves, plus its input
    and output; the output)."""
    params = {p.untyped_storage().data_ptr() for p in mod.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return t
        ptr = st.data_ptr()
        if ptr and ptr not in params:
            seen[ptr] = st.nbytes()
        return t

    xin = x.detach().requires_grad_(x.is_floating_point())
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = mod(xin)
    seen[-1] = y.numel() * y.element_size()
    seen[-2] = xin.numel() * xin.element_size()
    return sum(seen.values()), y.detach()


def saved_bytes_per_sample(stages: Sequence[nn.Module], example: torch.Tensor) -> list[int]:
    """Bytes a forward of each stage keeps for its backward (saved activations, distinct
    storages, parameters excluded, plus its input and output), per sample of ``example``."""
    out = []
    x = example
    n = max(int(example.shape[0]), 1)
    for mod in stages:
        total, x = _saved_bytes(mod, x)
        out.append(-(-total // n))
    return out


def estimate_batch_bytes(*, runs: int, stage_params: Sequence[int], act_per_sample: Sequence[int],
                         micro_batch: int, liveness: Sequence[Any], cfgs: Sequence[TrainConfig],
                         element_size: int) -> dict[str, int]:
    """Bytes the K runs of a batch hold at their peak (an upper estimate).

    Per stage s (``liveness`` of :func:`stalesim.schedule.liveness.stage_liveness`,
    worker 0 x workers): weights x (live + versions kept + gradient buffers +
    optimizer state + error-feedback / PipeMare buffers + update temporaries + one
    predicted copy per in-flight forward when predicting) + activations in flight x
    micro-batch x saved bytes per sample; times K.
    """
    from stalesim.runtime.optim import state_copies

    copies_opt = max(state_copies(c) for c in cfgs)
    wp = any(c.weight_prediction for c in cfgs)
    pmc = any(c.pipemare_correction for c in cfgs)
    weights = acts = 0
    for lv in liveness:
        s = lv.stage
        n = stage_params[s] * element_size
        copies = (lv.versions_kept + lv.grad_buffers + copies_opt + (1 if pmc else 0) + 3
                  + (lv.max_in_flight if wp else 0))
        weights += n * copies
        acts += lv.max_in_flight * micro_batch * act_per_sample[s]
    return {"weights": runs * weights, "activations": runs * acts, "total": runs * (weights + acts)}


def check_fits(est: dict[str, int], device: torch.device, runs: int, *, fraction: float = 0.85) -> None:
    """One-line error when the estimate exceeds ``fraction`` of the free memory."""
    free = available_bytes(device)
    if free is None or est["total"] <= fraction * free:
        return
    gib = 1024**3
    raise StalesimError(
        f"batched: {runs} runs need about {est['total'] / gib:.1f} GiB on {device} (weights, optimizer "
        f"state and weight versions {est['weights'] / gib:.1f} GiB, activations in flight "
        f"{est['activations'] / gib:.1f} GiB) but {free / gib:.1f} GiB are free; "
        "use fewer runs per batch (--batch-runs)")
