"""What a GPU's memory has room for: the capacity the CUDA runtime reports, and what is held
outside the caching allocator (the CUDA context, NCCL's communication buffers).

The LLM estimate says "fits" when its memory per GPU, these terms included, is at most
:func:`visible_bytes`. Each figure is a measurement or a framework constant with its source:

* **Capacity.** A GPU's memory is sold in binary units: an "80 GB" A100 carries 80 GiB of HBM2e
  (85.9e9 bytes), while the catalog stores the datasheet's figure as decimal bytes (80e9); so
  :func:`physical_bytes` reads the catalog's GB as GiB. Of that the driver keeps a part for itself:
  PyTorch's out-of-memory reports on A100 80GB say "79.25 GiB total capacity" (the total of
  ``cudaMemGetInfo``: e.g. github.com/wbfwonderful/Vad-R1 issue 11, github.com/levihsu/OOTDiffusion
  issue 235), on A100 40GB "39.59 GiB" (github.com/raoyongming/DenseCLIP issue 52), on A800 80GB
  "79.33 GiB" (github.com/hahnyuan/PB-LLM issue 3): 99.0-99.2 % of the binary capacity.
  :data:`VISIBLE_FRACTION` is the A100 80GB figure, applied to every GPU (not measured on the others).
* **CUDA context** (:data:`CUDA_CONTEXT_BYTES`): the driver context, the loaded kernels and the
  libraries' handles and workspaces, which the same reports count as the process's memory "not
  allocated by PyTorch": 79.27 - 74.53 - 4.23 = 0.51 GiB in a single-GPU run on A800 80GB (PB-LLM
  issue 3), 14.25 - 12.87 - 0.89 = 0.49 GiB on A100 40GB (github.com/TianheWu/CoSeR issue 10).
* **NCCL buffers** (:func:`nccl_buffer_bytes`): every communicator keeps, per channel and per
  connection, one FIFO per protocol: Simple ``NCCL_BUFFSIZE`` 4 MiB (NCCL's environment-variable
  documentation), LL128 ``NCCL_LL128_ELEMS_PER_THREAD x NCCL_LL128_MAX_NTHREADS x NCCL_STEPS x 8``
  = 120 x 640 x 8 x 8 bytes and LL ``NCCL_LL_LINES_PER_THREAD x NCCL_LL_MAX_NTHREADS x NCCL_STEPS x
  16`` = 8 x 512 x 8 x 16 bytes (``DEFAULT_LL128_BUFFSIZE`` / ``DEFAULT_LL_BUFFSIZE`` in NCCL's
  ``src/init.cc``). A ring keeps two connections per channel whatever the scale, and the memory is
  linear in the channels (NCCL's maintainer in github.com/NVIDIA/nccl issue 864); NCCL runs 24
  collective channels on 8-GPU A100 and H100 nodes ("24 coll channels" in its ``NCCL_DEBUG=INFO``
  logs there). One communicator per parallel group the plan communicates over (tensor, context,
  pipeline, data); the pipeline's send/receive is counted as one more ring.

Known gaps: trees (all-reduce across nodes may also connect one, two more connections per channel
and peer) and NVLS buffers are not counted, so NCCL's term is its lower end (the issue above saw
about 1.6 GB for one communicator that ran an all-reduce); the visible fraction and the context are
A100-class measurements used for every GPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.sim.llm_plan import ParallelPlan
    from stalesim.workloads.hardware import DeviceSpec

__all__ = ["CUDA_CONTEXT_BYTES", "NCCL_CHANNELS", "NCCL_CONNECTION_BYTES", "NCCL_RING_CONNECTIONS",
           "VISIBLE_FRACTION", "communicators", "cuda_context_bytes", "nccl_buffer_bytes", "physical_bytes",
           "visible_bytes"]

GIB = 2**30
# cudaMemGetInfo's total over the binary capacity on A100 80GB (module doc)
VISIBLE_FRACTION = 79.25 / 80
CUDA_CONTEXT_BYTES = round(0.5 * GIB)
# one connection's FIFOs: Simple (NCCL_BUFFSIZE), LL128, LL (module doc)
NCCL_CONNECTION_BYTES = 4 * 2**20 + 120 * 640 * 8 * 8 + 8 * 512 * 8 * 16
NCCL_CHANNELS = 24
NCCL_RING_CONNECTIONS = 2


def _gpu(device: DeviceSpec) -> bool:
    return device.kind == "gpu"


def physical_bytes(device: DeviceSpec) -> float:
    """The memory a GPU carries: the catalog's decimal GB read as GiB (module doc); a CPU's as stored."""
    return device.memory_bytes / 1e9 * GIB if _gpu(device) else float(device.memory_bytes)


def visible_bytes(device: DeviceSpec) -> float:
    """What the CUDA runtime reports as the GPU's total (the driver's share removed)."""
    return physical_bytes(device) * VISIBLE_FRACTION if _gpu(device) else physical_bytes(device)


def cuda_context_bytes(device: DeviceSpec) -> int:
    """The CUDA context and libraries, held outside the caching allocator (0 on a CPU)."""
    return CUDA_CONTEXT_BYTES if _gpu(device) else 0


def communicators(plan: ParallelPlan) -> int:
    """NCCL communicators one GPU holds: one per parallel group of more than one rank."""
    return sum(1 for n in (plan.tp, plan.cp, plan.pp, plan.dp) if n > 1)


def nccl_buffer_bytes(plan: ParallelPlan, device: DeviceSpec) -> int:
    """NCCL's ring buffers on one GPU (module doc): communicators x channels x 2 connections x FIFOs."""
    if not _gpu(device):
        return 0
    return communicators(plan) * NCCL_CHANNELS * NCCL_RING_CONNECTIONS * NCCL_CONNECTION_BYTES
