"""A ``FlopCounterMode`` that also counts the CPU flash-attention kernels.

``torch.utils.flop_counter`` has FLOP formulas for the CUDA attention kernels but
not for ``aten._scaled_dot_product_flash_attention_for_cpu`` (and its backward),
which is what ``scaled_dot_product_attention`` runs on a CPU; without these the
char-GPT's attention would count 0 FLOPs in the partitioner and the profiler.
The formulas are torch's own (``sdpa_flop_count``/``sdpa_backward_flop_count``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count


def _cpu_flash_forward(query_shape: Any, key_shape: Any, value_shape: Any, *args: Any,
                       out_shape: Any = None, **kwargs: Any) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_flash_backward(grad_out_shape: Any, query_shape: Any, key_shape: Any, value_shape: Any,
                        *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def flop_counter() -> FlopCounterMode:
    """``FlopCounterMode(display=False)`` plus the CPU attention formulas."""
    aten = torch.ops.aten
    mapping: dict[Any, Any] = {}
    if hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu"):
        mapping[aten._scaled_dot_product_flash_attention_for_cpu] = _cpu_flash_forward
    if hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu_backward"):
        mapping[aten._scaled_dot_product_flash_attention_for_cpu_backward] = _cpu_flash_backward
    return FlopCounterMode(display=False, custom_mapping=mapping)
