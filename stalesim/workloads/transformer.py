"""Analytic decoder-only transformers: parameters, FLOPs and activation bytes without building a model.

A 70B-parameter model cannot be built in memory to be profiled, and it need not
be: every count the simulator uses follows from the shape. :class:`TransformerSpec`
holds the shape (layers, hidden size, query and key/value heads, FFN size and
kind, sequence length, vocabulary, element type and the implementation facts
that change activation memory: dropout, attention kernel), :data:`PRESETS` the
published ones, and :func:`transformer_profile` turns a spec into the same
:class:`~stalesim.workloads.profile.Profile` ``stalesim profile`` writes (blocks
``embed``, ``h0`` .. ``h{L-1}``, ``head``; times from the roofline when a device
is given, else 0 with the counts ready for :func:`~stalesim.workloads.hardware.roofline_profile`).

Formulas (per transformer layer, micro-batch ``b``, sequence ``s``, hidden ``h``,
``a`` query heads, key/value width ``k = kv_heads * h / a``, FFN width ``f``):

* **Parameters**: attention ``h(h + 2k)`` (QKV) + ``h^2`` (output), MLP ``2hf``
  (GELU) or ``3hf`` (SwiGLU: gate, up, down), biases when ``bias`` (``h + 2k``,
  ``h``, ``f + h``), norms ``2 x 2h`` (LayerNorm) or ``2 x h`` (RMSNorm). GPT with
  ``f = 4h``: ``12h^2 + 13h``, Narayanan et al. 2021 (SC21, "Efficient Large-Scale
  Language Model Training on GPU Clusters Using Megatron-LM"), equation (2).
* **Forward FLOPs**: matrix multiplies ``2 b s x`` (parameters of the linears)
  plus attention scores and their product with V, ``2 b s^2 h`` each (the full
  square, no causal halving, as Narayanan et al. and torch's ``sdpa_flop_count``
  count it). GPT: ``24 b s h^2 + 4 b s^2 h = 24 b s h^2 (1 + s / 6h)``; the logit
  layer adds ``2 b s h V``. Backward = 2 x forward (input and weight gradients);
  full recomputation adds one forward: Narayanan et al.'s equation (3),
  ``F = 96 B s l h^2 (1 + s/6h + V/16lh)`` per iteration, is
  :func:`narayanan_flops` and equals the sum of these terms exactly.
  Layer norms, activations, softmax and bias adds are not counted (they are
  memory-bound; :mod:`stalesim.sim.parallel` times them by bytes).
* **Saved activations** (bytes kept for the backward, Korthikanti et al. 2022,
  "Reducing Activation Recomputation in Large Transformer Models", section 4):
  ``s b h (34 + 5 a s / h)`` per GPT layer with 16-bit activations and dropout,
  derived tensor by tensor in :func:`layer_activation_bytes` so that GQA, SwiGLU,
  RMSNorm, no dropout and flash attention follow from the same terms; tensor
  parallelism ``t`` divides the attention/MLP interior (``10 + 24/t + 5as/(ht)``),
  sequence parallelism also the norms and dropout masks (``34/t + 5as/(ht)``),
  selective recomputation drops the ``5as/h`` score term, full recomputation
  keeps only the layer input (``2 s b h``).
* **Op-level selective recomputation** (``op``, torchtitan's ``selective_ac_option = "op"``):
  per layer, keep the outputs of every other matrix multiply in the order the layer runs them
  (Q, K, V, output projection, then the MLP's) and of the fused attention, recompute the rest
  from the layer input: :func:`op_checkpoint_linears`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from stalesim.errors import StalesimError

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.workloads.hardware import DeviceSpec
    from stalesim.workloads.profile import Profile

__all__ = [
    "FFN_TYPES",
    "PRESETS",
    "RECOMPUTE",
    "TransformerSpec",
    "get_preset",
    "layer_activation_bytes",
    "narayanan_flops",
    "op_checkpoint_linears",
    "preset_names",
    "transformer_profile",
]

FFN_TYPES = ("gelu", "swiglu")
NORMS = ("layernorm", "rmsnorm")
ATTENTION = ("unfused", "flash")
# none; selective: Korthikanti et al.'s attention core; op: torchtitan's per-op policy; full: every layer
RECOMPUTE = ("none", "selective", "op", "full")
ELEMENT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class TransformerSpec:
    """The shape of a decoder-only transformer and the implementation facts that change its memory.

    ``kv_heads`` None = ``heads`` (multi-head attention; fewer = grouped-query);
    ``ffn`` None = ``4 x hidden``; ``attention`` ``unfused`` keeps the softmax
    scores for the backward (Megatron 2021/2022), ``flash`` recomputes them
    (FlashAttention: only the per-row log-sum-exp is kept); ``dropout`` adds the
    1-byte masks Korthikanti et al. count; ``tied_embeddings``: the head reuses the
    token embedding (a pipeline keeps a copy on its last stage).
    """

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int | None = None
    ffn: int | None = None
    ffn_type: str = "gelu"
    seq: int = 2048
    vocab: int = 51200
    dtype: str = "bfloat16"
    norm: str = "layernorm"
    bias: bool = True
    tied_embeddings: bool = True
    learned_positions: bool = True
    dropout: bool = True
    attention: str = "unfused"

    def __post_init__(self) -> None:
        from stalesim.limits import check_int

        for f in ("layers", "hidden", "heads", "seq", "vocab"):
            check_int(f, getattr(self, f), lo=1)  # the shared bounds: a typo'd 1e12 is refused, not computed
        if self.kv_heads is not None:
            check_int("kv_heads", self.kv_heads, lo=1)
        if self.hidden % self.heads:
            raise StalesimError(f"hidden: {self.hidden} is not divisible by heads {self.heads}")
        kv = self.n_kv_heads
        if kv < 1 or self.heads % kv:
            raise StalesimError(f"kv_heads: {kv} must be >= 1 and divide heads {self.heads}")
        if self.ffn is not None:
            check_int("ffn", self.ffn, lo=1)
        for f in ("bias", "tied_embeddings", "learned_positions", "dropout"):
            if not isinstance(getattr(self, f), bool):
                raise StalesimError(f"{f}: expected true or false, got {getattr(self, f)!r}")
        for f, allowed in (("ffn_type", FFN_TYPES), ("norm", NORMS), ("attention", ATTENTION),
                           ("dtype", tuple(ELEMENT_BYTES))):
            if getattr(self, f) not in allowed:
                raise StalesimError(f"{f}: expected one of {', '.join(allowed)}, got {getattr(self, f)!r}")

    # ------------------------------------------------------------ shape
    @property
    def n_kv_heads(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        """Width of K (and of V): ``kv_heads x head_dim``."""
        return self.n_kv_heads * self.head_dim

    @property
    def ffn_dim(self) -> int:
        return 4 * self.hidden if self.ffn is None else self.ffn

    @property
    def element_bytes(self) -> int:
        return ELEMENT_BYTES[self.dtype]

    def with_(self, **changes: Any) -> TransformerSpec:
        """A copy with some fields changed (``seq=4096``), validated."""
        return replace(self, **changes)

    # ------------------------------------------------------------ parameters
    def linear_params(self) -> int:
        """Weights of one layer's linears (the GEMM operands)."""
        h, k, f = self.hidden, self.kv_dim, self.ffn_dim
        mlp = (3 if self.ffn_type == "swiglu" else 2) * h * f
        return h * (h + 2 * k) + h * h + mlp

    def layer_params(self) -> int:
        """Parameters of one transformer layer (linears, biases, two norms)."""
        h, k, f = self.hidden, self.kv_dim, self.ffn_dim
        bias = (h + 2 * k) + h + (f + h) if self.bias else 0
        if self.bias and self.ffn_type == "swiglu":
            bias += f  # the gate projection's bias
        norms = 2 * (2 * h if self.norm == "layernorm" else h)
        return self.linear_params() + bias + norms

    def embedding_params(self) -> int:
        return self.vocab * self.hidden + (self.seq * self.hidden if self.learned_positions else 0)

    def head_params(self) -> int:
        """Final norm + the output projection (0 for it when tied to the embedding)."""
        norm = 2 * self.hidden if self.norm == "layernorm" else self.hidden
        return norm + (0 if self.tied_embeddings else self.vocab * self.hidden)

    def params(self) -> int:
        """Unique parameters of the whole model."""
        return self.layers * self.layer_params() + self.embedding_params() + self.head_params()

    # ------------------------------------------------------------ FLOPs
    def layer_gemm_flops(self, batch: int) -> int:
        """Forward FLOPs of one layer's linears at ``batch`` sequences."""
        return 2 * batch * self.seq * self.linear_params()

    def layer_attention_flops(self, batch: int) -> int:
        """Forward FLOPs of QK^T and (scores)V: ``4 b s^2 h`` (full square)."""
        return 4 * batch * self.seq * self.seq * self.hidden

    def layer_flops(self, batch: int) -> int:
        return self.layer_gemm_flops(batch) + self.layer_attention_flops(batch)

    def logits_flops(self, batch: int) -> int:
        return 2 * batch * self.seq * self.hidden * self.vocab

    def model_flops(self, batch: int, *, recompute: str = "none", every: int = 1) -> int:
        """FLOPs of one training step on ``batch`` sequences: forward + backward (2x) of every
        layer and the logits, plus the recomputed forward work (``full``: every layer again;
        ``selective``: the attention scores again; ``op``: the linears
        :func:`op_checkpoint_linears` does not save) on every ``every``-th layer. With ``full``
        on a GPT this is :func:`narayanan_flops`."""
        _check_recompute(recompute)
        extra = 0
        if recompute == "full":
            extra = self.layer_flops(batch)
        elif recompute == "selective":
            extra = self.layer_attention_flops(batch)
        elif recompute == "op":
            extra = 2 * batch * self.seq * sum(o * i for o, i, _row, saved in op_checkpoint_linears(self)
                                               if not saved)
            if self.attention == "unfused":  # only the fused kernel's output is on the save list
                extra += self.layer_attention_flops(batch)
        return self.layers * 3 * self.layer_flops(batch) + self.layers // every * extra + 3 * self.logits_flops(batch)

    # ------------------------------------------------------------ bytes
    def layer_output_bytes(self, batch: int) -> int:
        return batch * self.seq * self.hidden * self.element_bytes


def _check_recompute(recompute: str) -> None:
    if recompute not in RECOMPUTE:
        raise StalesimError(f"recompute: expected one of {', '.join(RECOMPUTE)}, got {recompute!r}")


def op_checkpoint_linears(spec: TransformerSpec) -> tuple[tuple[int, int, bool, bool], ...]:
    """One layer's linears as torchtitan's op-level selective checkpointing sees them:
    ``(out_features, in_features, row_parallel, saved)`` in the order the layer runs them.

    torchtitan (``parallelize_llama.py``, ``_apply_ac_to_transformer_block`` with
    ``selective_ac_option = "op"``) wraps each block in ``torch.utils.checkpoint`` with a policy
    that must-saves the outputs of ``aten.mm``, the fused attention kernels and the tensor-parallel
    reduce-scatter, *except every second* ``mm`` (its counter starts afresh per block call), and
    recomputes everything else in the backward. Its Llama block runs ``wq, wk, wv`` (separate
    projections), ``wo``, then ``w1, w3, w2`` (SwiGLU) or up and down (GELU), so ``wq, wv, w1`` and
    ``w2`` keep their outputs and ``wk, wo, w3`` are recomputed. The spec's shape, not its
    framework, sets the widths; a fused QKV would change the count (not modelled)."""
    h, k, f = spec.hidden, spec.kv_dim, spec.ffn_dim
    mlp = [(f, h, False), (f, h, False), (h, f, True)] if spec.ffn_type == "swiglu" else [(f, h, False), (h, f, True)]
    order = [(h, h, False), (k, h, False), (k, h, False), (h, h, True)] + mlp
    return tuple((o, i, row, n % 2 == 0) for n, (o, i, row) in enumerate(order))


def narayanan_flops(spec: TransformerSpec, batch: int) -> float:
    """Narayanan et al. 2021, equation (3): ``96 B s l h^2 (1 + s/6h + V/16lh)``, the FLOPs of
    one iteration of a GPT (``ffn = 4h``, multi-head) with full activation recomputation;
    their Table 1's teraFLOP/s are this over the iteration time and the GPU count."""
    B, s, n, h, V = batch, spec.seq, spec.layers, spec.hidden, spec.vocab
    return 96.0 * B * s * n * h * h * (1 + s / (6 * h) + V / (16 * n * h))


def layer_activation_bytes(spec: TransformerSpec, batch: int, *, tp: int = 1, sp: bool = False,
                           recompute: str = "none", cp: int = 1) -> float:
    """Bytes one layer keeps for its backward per GPU (Korthikanti et al. 2022, section 4).

    Tensor by tensor (``e`` = element bytes, masks 1 byte), with ``n = b s``:

    * outside the tensor-parallel region (divided by ``t`` only with sequence
      parallelism): the two norm inputs, the QKV and first-MLP inputs (the norm
      outputs), ``4 e n h``; two dropout masks ``2 n h`` when ``dropout``;
    * inside it (divided by ``t``): Q ``e n h``, K and V ``2 e n k``, the output
      projection's input ``e n h``; MLP: GELU ``2 e n f`` (its input, the second
      linear's input), SwiGLU ``3 e n f`` (gate, up, their product);
    * attention scores (divided by ``t``), ``unfused``: softmax output ``e a s n``
      and, with dropout, its mask ``a s n`` and output ``e a s n``: GPT's ``5 a s^2 b``;
      ``flash``: the log-sum-exp, 4 bytes per (head, token).

    ``selective`` recomputation drops the score term (it is recomputed from Q, K,
    V); ``full`` keeps only the layer input, ``e n h`` (``/ t`` with sequence
    parallelism). For GPT-3-like layers (``f = 4h``, ``k = h``, dropout, 16-bit)
    these are exactly Korthikanti et al.'s ``sbh(34 + 5as/h)``, ``sbh(10 + 24/t +
    5as/(ht))``, ``sbh(34/t + 5as/(ht))``, ``sbh(10 + 24/t)``, ``34 sbh / t`` and ``2 sbh``.

    Context parallelism ``cp`` splits the sequence: each rank keeps every tensor
    above for its ``s / cp`` tokens, and its attention scores are ``s / cp`` rows
    against all ``s`` keys, so every term is divided by ``cp`` (Megatron-LM's
    context parallelism saves only the local Q, K, V for the backward and
    re-exchanges the other ranks' K/V there; Korthikanti et al.'s terms with
    ``s -> s / cp`` in the token count, ``s`` kept in the score width).
    """
    _check_recompute(recompute)
    for name, v in (("tp", tp), ("cp", cp)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise StalesimError(f"{name}: expected an integer >= 1, got {v!r}")
    return _layer_activation_bytes(spec, batch, tp, sp, recompute) / cp


def _layer_activation_bytes(spec: TransformerSpec, batch: int, tp: int, sp: bool, recompute: str) -> float:
    e = spec.element_bytes
    n = batch * spec.seq
    h, k, f, a, s = spec.hidden, spec.kv_dim, spec.ffn_dim, spec.heads, spec.seq
    outer_div = tp if sp else 1
    if recompute == "full":
        return e * n * h / outer_div
    if recompute == "op":
        return _op_checkpoint_bytes(spec, n, tp, sp)
    outer = 4 * e * n * h + (2 * n * h if spec.dropout else 0)
    inner = e * n * h + 2 * e * n * k + e * n * h
    inner += (3 if spec.ffn_type == "swiglu" else 2) * e * n * f
    if spec.attention == "flash":
        scores = 4.0 * a * n
    elif recompute == "selective":
        scores = 0.0
    else:
        scores = (2 * e + 1) * a * s * n if spec.dropout else e * a * s * n
    return outer / outer_div + (inner + scores) / tp


def _op_checkpoint_bytes(spec: TransformerSpec, n: int, tp: int, sp: bool) -> float:
    """What op-level selective checkpointing keeps per layer and rank for ``n`` tokens: the
    block's input (split over ``t`` with sequence parallelism), each saved linear's output
    (column-parallel: ``1 / t`` of its width; row-parallel: the full-width partial sum before its
    reduction), the fused attention's output and log-sum-exp, and with sequence parallelism the
    two reduce-scatters' outputs (on the save list too). An unfused attention (batched products,
    not on the list) keeps nothing of its own."""
    e, h, a = spec.element_bytes, spec.hidden, spec.heads
    outer_div = tp if sp else 1
    kept = e * n * h / outer_div
    for out, _in, row, saved in op_checkpoint_linears(spec):
        if saved:
            kept += e * n * out / (1 if row else tp)
    if spec.attention == "flash":
        kept += e * n * h / tp + 4.0 * a * n / tp
    if tp > 1 and sp:
        kept += 2 * e * n * h / tp
    return kept


# ---------------------------------------------------------------- presets
def _megatron(name: str, heads: int, hidden: int, layers: int) -> TransformerSpec:
    # Narayanan et al. 2021, Table 1: GPT models with vocabulary 51,200 and sequence 2,048
    return TransformerSpec(name, layers=layers, hidden=hidden, heads=heads, seq=2048, vocab=51200)


def _llama(name: str, layers: int, hidden: int, heads: int, kv: int, ffn: int, seq: int,
           vocab: int) -> TransformerSpec:
    # The Llama family's layer (and Mistral's, Qwen2's): SwiGLU, RMSNorm, rotary positions (no
    # position table), no linear biases, untied output head, no dropout; trained with a fused
    # (flash) attention kernel. Shapes: Touvron et al. 2023 (Llama 2, Table 1 and the released
    # configs); the Llama 3 model card and Dubey et al. 2024 ("The Llama 3 Herd of Models",
    # Table 3) with the released Llama-3.1 config.json files.
    return TransformerSpec(name, layers=layers, hidden=hidden, heads=heads, kv_heads=kv, ffn=ffn,
                           ffn_type="swiglu", seq=seq, vocab=vocab, norm="rmsnorm", bias=False,
                           tied_embeddings=False, learned_positions=False, dropout=False,
                           attention="flash")


PRESETS: dict[str, TransformerSpec] = {s.name: s for s in (
    # Brown et al. 2020, Table 2.1: 96 layers, d_model 12288, 96 heads, context 2048; BPE vocabulary 50,257
    TransformerSpec("gpt3-175b", layers=96, hidden=12288, heads=96, seq=2048, vocab=50257),
    _llama("llama2-7b", 32, 4096, 32, 32, 11008, 4096, 32000),
    _llama("llama2-13b", 40, 5120, 40, 40, 13824, 4096, 32000),
    _llama("llama2-70b", 80, 8192, 64, 8, 28672, 4096, 32000),
    _llama("llama3-8b", 32, 4096, 32, 8, 14336, 8192, 128256),
    _llama("llama3-70b", 80, 8192, 64, 8, 28672, 8192, 128256),
    # Llama 3.1 (Dubey et al. 2024, Table 3; meta-llama/Llama-3.1-*B config.json): the Llama 3
    # shapes plus the 405B; pre-trained at sequence 8,192 before the long-context stage
    _llama("llama3.1-8b", 32, 4096, 32, 8, 14336, 8192, 128256),
    _llama("llama3.1-70b", 80, 8192, 64, 8, 28672, 8192, 128256),
    _llama("llama3.1-405b", 126, 16384, 128, 8, 53248, 8192, 128256),
    # Jiang et al. 2023 ("Mistral 7B", Table 1): context 8,192 (its 4,096-token sliding window
    # would halve the attention FLOPs at 8,192; not modelled: full causal attention is counted)
    _llama("mistral-7b", 32, 4096, 32, 8, 14336, 8192, 32000),
    # Yang et al. 2024 ("Qwen2 Technical Report", Table 1; Qwen/Qwen2-72B config.json: vocabulary
    # 152,064), pre-trained at 4,096 before its 32,768 stage; its Q/K/V biases (10,240 parameters
    # a layer) are left out, the spec's bias switch being all-or-nothing
    _llama("qwen2-72b", 80, 8192, 64, 8, 29568, 4096, 152064),
    # BigScience 2022 ("BLOOM", Table 3; bigscience/bloom config.json): GELU MLP 4h, LayerNorm,
    # biases, ALiBi (no position table), head tied to the 250,880-token embedding, no dropout,
    # Megatron-DeepSpeed's fused softmax (keeps the scores); its embedding LayerNorm (2h) is left out
    TransformerSpec("bloom-176b", layers=70, hidden=14336, heads=112, seq=2048, vocab=250880,
                    learned_positions=False, dropout=False),
    # Zhang et al. 2022 ("OPT", Table 1; facebook/opt config: vocabulary 50,272, learned positions,
    # tied head, dropout 0.1); its ReLU MLP has GELU's two 4h matrices, so ``gelu`` counts it
    TransformerSpec("opt-175b", layers=96, hidden=12288, heads=96, seq=2048, vocab=50272),
    # Korthikanti et al. 2022, Table 3: the 22B GPT of their activation-recomputation study
    # (Megatron-LM, vocabulary 51,200, sequence 2,048)
    _megatron("megatron-22b", 64, 6144, 48),
    _megatron("megatron-1.7b", 24, 2304, 24),
    _megatron("megatron-3.6b", 32, 3072, 30),
    _megatron("megatron-7.5b", 32, 4096, 36),
    _megatron("megatron-18.4b", 48, 6144, 40),
    _megatron("megatron-39.1b", 64, 8192, 48),
    _megatron("megatron-76.1b", 80, 10240, 60),
    _megatron("megatron-145.6b", 96, 12288, 80),
    _megatron("megatron-310.1b", 128, 16384, 96),
    _megatron("megatron-529.6b", 128, 20480, 105),
    _megatron("megatron-1t", 160, 25600, 128),
)}


def preset_names() -> list[str]:
    return list(PRESETS)


def get_preset(name: str) -> TransformerSpec:
    """A preset by name (case-insensitive); one-line error listing them otherwise."""
    key = name.strip().lower()
    if key not in PRESETS:
        raise StalesimError(f"workload: unknown {name!r} (known: {', '.join(PRESETS)})")
    return PRESETS[key]


# ---------------------------------------------------------------- profile
def transformer_profile(spec: TransformerSpec, batch_size: int, device: DeviceSpec | str | None = None,
                        *, efficiency: float = 1.0) -> Profile:
    """The spec as a :class:`Profile` at ``batch_size`` sequences: blocks ``embed``, ``h0`` ..,
    ``head`` with parameters, output and saved bytes (no recomputation, one device) and
    forward/backward FLOPs. With ``device`` the times are the roofline's
    (:func:`~stalesim.workloads.hardware.roofline_profile`, so ``at_batch_size`` re-times
    them); without, they are 0 and the profile's device is ``synthetic``."""
    from stalesim.workloads.profile import SCHEMA_VERSION, profile_from_dict

    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise StalesimError(f"batch_size: expected an integer >= 1, got {batch_size!r}")
    e, b = spec.element_bytes, batch_size
    out = spec.layer_output_bytes(b)

    def block(name: str, params: int, flops: int, bflops: int, saved: float, output: int) -> dict[str, Any]:
        return {"name": name, "forward_s": 0.0, "backward_s": 0.0, "update_s": 0.0,
                "param_bytes": params * e, "output_bytes": output, "saved_bytes": round(saved),
                "flops": flops, "backward_flops": bflops, "weight_layers": 1}

    lf = spec.layer_flops(b)
    layers = [block("embed", spec.embedding_params(), 0, 0, 0, out)]
    layers += [block(f"h{i}", spec.layer_params(), lf, 2 * lf, layer_activation_bytes(spec, b), out)
               for i in range(spec.layers)]
    head_saved = out + 4 * b * spec.seq * spec.vocab  # norm input + fp32 logits for the loss
    lg = spec.logits_flops(b)
    head_params = spec.head_params() + (spec.vocab * spec.hidden if spec.tied_embeddings else 0)
    layers.append(block("head", head_params, lg, 2 * lg, head_saved, 0))
    prof = profile_from_dict({"schema_version": SCHEMA_VERSION, "model": spec.name, "device": "synthetic",
                              "dtype": spec.dtype, "batch_size": b, "layers": layers,
                              "meta": {"analytic": {"spec": spec.name, "source": "stalesim.workloads.transformer"}}})
    if device is None:
        return prof
    from stalesim.workloads.hardware import roofline_profile

    return roofline_profile(prof, device, efficiency=efficiency)
