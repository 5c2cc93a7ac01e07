"""The K copies of a stage as one module with stacked parameters (folded or through vmap)."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from stalesim.errors import StalesimError


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


