"""The campaign's steps, their time budgets and parts, and every tolerance it judges by.

A budget is the step's hard timeout on a GPU (its process is killed past it), so a part's
budget (its steps' plus the environment read that opens every part) bounds the part's wall
time: at most 9 minutes, inside the 10-minute cap a lent machine puts on one command, and the
whole campaign at most 25 minutes, inside a session's 30 minutes of device time with the
machine's start. :func:`check_plan` enforces both; the dry mode and a test call it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stalesim.errors import StalesimError

PART_LIMIT_S = 9 * 60
TOTAL_LIMIT_S = 25 * 60
ENV_BUDGET_S = 30  # the environment read (nvidia-smi, torch) that opens every part

# Tolerances (docs/gpu-check.md says why each is what it is).
# CUDA-event sum of per-block forward+backward+update vs the isolated whole step on the host clock,
# enforced only where the step is compute-bound (kernels busy >= COMPUTE_BOUND_SHARE of it): the
# per-block round launches the same kernels plus, per block, a detach, a backward call and an
# optimizer call, host work the GPU hides when it is the bottleneck. On a launch-bound step that
# host work is the step (measured on an H200: 1.25-1.5x for ResNet-20 at batch 128): reported.
PROFILE_REL_TOL = 0.10
COMPUTE_BOUND_SHARE = 0.8
# the whole step timed by CUDA events vs the same isolated step on the host clock (synchronized
# at both ends, medians): the same kernels, so only the host work at either end differs
EVENT_WALL_REL_TOL = 0.10
# executor vs emulator losses on the same GPU, float32 with TF32 convolutions (cuDNN's default):
# the two run the same kernels in the same order, so only nondeterministic reductions (atomics
# in cuDNN's weight-gradient kernels) differ; TF32 rounds operands to 10 mantissa bits (~5e-4),
# so 1e-3 relative per loss bounds such reorderings with room, and catches any wrong version,
# message or missed update (those move a loss by percent).
LOSS_REL_TOL = 1e-3
# batched K runs vs the same K runs one by one: vmap'd kernels sum in another order (float32,
# no TF32 on matmuls by torch's default), so not bitwise; same bound as above.
BATCHED_LOSS_REL_TOL = 1e-3
# predicted peak memory vs torch.cuda.max_memory_allocated per device: the goal.
MEMORY_REL_TOL = 0.05
BATCHED_K = 8


@dataclass(frozen=True)
class Step:
    """One check of the campaign: ``run`` is ``module:function`` under :mod:`lab.gpucheck`,
    called with a :class:`~lab.gpucheck.report.Context`; ``commands`` are the equivalent
    command lines (``stalesim`` sub-commands or modules) a person can rerun by hand, which the
    dry mode parses; ``min_gpus``: below this many visible GPUs the step records a skip."""

    name: str
    part: int
    budget_s: int
    what: str
    run: str
    commands: tuple[tuple[str, ...], ...] = field(default=())
    min_gpus: int = 1


STEPS: tuple[Step, ...] = (
    Step("plan", 1, 10, "the parts fit the caps; every step's command line parses", "suite:plan_step",
         min_gpus=0),
    Step("profile", 1, 120,
         "ResNet-20 and the char-GPT on CUDA: CUDA-event per-block times vs host wall clock of whole "
         "steps; precision flags in force",
         "measure:profile_step",
         (("profile", "--model", "resnet20", "--batch-size", "128", "--device", "cuda", "-o", "prof_resnet20.json"),
          ("profile", "--model", "gpt-char", "--batch-size", "32", "--device", "cuda", "-o", "prof_gpt.json"))),
    Step("emulator_speed", 1, 100,
         "emulator steps/s: ResNet-20 on CIFAR-10 (synthetic without data) and the char-GPT on Shakespeare",
         "measure:emulator_speed_step",
         (("emulate", "--model", "resnet20", "--dataset", "cifar10", "--schedule", "stale", "--stages", "4",
           "--iterations", "60", "--device", "cuda", "--json"),
          ("emulate", "--model", "gpt-char", "--dataset", "shakespeare", "--schedule", "2bw", "--stages", "4",
           "-M", "4", "--optimizer", "adamw", "--lr", "3e-4", "--batch-size", "32", "--iterations", "40",
           "--device", "cuda", "--json"))),
    Step("batched", 1, 140,
         f"batched emulation of K={BATCHED_K} runs vs a loop of {BATCHED_K} single runs: steps/s ratio, "
         "losses equal",
         "measure:batched_step",
         (("study", "--model", "gpt-char:n_layer=6,n_embd=32,n_head=2,block_size=32", "--dataset", "shakespeare",
           "--schedules", "2bw", "--placements", "S4", "-M", "8", "--batch-size", "8", "--optimizer", "adamw",
           "--lr", "3e-3", "--iterations", "30", "--seeds", "0,1,2,3,4,5,6,7", "--batched", "--device", "cuda",
           "--out", "runs/gpu-check-study"),)),
    Step("kernels", 1, 20,
         "GEMM and causal-attention efficiency by shape (calibrate --gemm): the table the LLM estimate reads",
         "kernels:kernels_step", (("calibrate", "--gemm", "-o", "kernels.json"),)),
    Step("reproduce_plan", 1, 60,
         "the reproduce-gpu plan and its time estimate (python -m lab.reproduce gpu --dry-run)",
         "suite:reproduce_plan_step",
         (("python", "-m", "lab.reproduce", "gpu", "--dry-run"),), min_gpus=0),
    Step("executor_one_gpu", 2, 300,
         "executor on one GPU, all stages folded on cuda:0: every pipeline schedule at S=2 (S=2V for "
         "virtual stages), executor losses == emulator losses on the same GPU",
         "execsteps:one_gpu_step",
         (("run", "--model", "lenet5", "--dataset", "synthetic", "--schedule", "1f1b", "--stages", "2", "-M", "2",
           "--fold", "1", "--devices", "cuda:0", "--iterations", "6", "--json"),)),
    Step("memory", 2, 150,
         "predicted peak memory per device vs torch.cuda.max_memory_allocated for a few schedules",
         "execsteps:memory_step",
         (("run", "--model", "resnet20", "--dataset", "synthetic", "--schedule", "stale", "--stages", "2",
           "--fold", "1", "--devices", "cuda:0", "--iterations", "6", "--json"),)),
    Step("executor_multi_gpu", 3, 240,
         "executor over NCCL: every schedule at S = number of GPUs, at S=3 with 3+ GPUs, virtual-stage "
         "schedules on 2 GPUs; losses == emulator's",
         "execsteps:multi_gpu_step",
         (("run", "--model", "lenet5", "--dataset", "synthetic", "--schedule", "stale", "--stages", "2",
           "--devices", "cuda:0,1", "--iterations", "6", "--json"),), min_gpus=2),
    Step("pytest_gpu", 3, 270, "the suite's GPU tests (pytest -m gpu on the files that have them)",
         "suite:pytest_gpu_step", (("python", "-m", "pytest", "-m", "gpu"),)),
)

PARTS: tuple[int, ...] = tuple(sorted({s.part for s in STEPS}))


def step_named(name: str) -> Step:
    for s in STEPS:
        if s.name == name:
            return s
    raise StalesimError(f"--steps: unknown step {name!r} (known: {', '.join(s.name for s in STEPS)})")


def steps_of(part: int | None) -> list[Step]:
    """The steps of one part (all of them for ``None``), in campaign order."""
    if part is not None and part not in PARTS:
        raise StalesimError(f"--part: expected one of {', '.join(map(str, PARTS))}, got {part}")
    return [s for s in STEPS if part is None or s.part == part]


def part_budget_s(part: int) -> int:
    return ENV_BUDGET_S + sum(s.budget_s for s in STEPS if s.part == part)


def check_plan() -> dict[str, object]:
    """Each part's budget <= 9 min and the total <= 25 min; names unique. Raises on a broken plan
    (a programming error, so a plain ``AssertionError``-like ``RuntimeError``)."""
    names = [s.name for s in STEPS]
    if len(set(names)) != len(names):
        raise RuntimeError(f"gpu-check plan: duplicate step names in {names}")
    parts = {p: part_budget_s(p) for p in PARTS}
    over = {p: b for p, b in parts.items() if b > PART_LIMIT_S}
    if over:
        raise RuntimeError(f"gpu-check plan: part budget over {PART_LIMIT_S} s: {over}")
    total = sum(parts.values())
    if total > TOTAL_LIMIT_S:
        raise RuntimeError(f"gpu-check plan: total budget {total} s over {TOTAL_LIMIT_S} s")
    return {"parts_s": {str(p): b for p, b in parts.items()}, "total_s": total,
            "part_limit_s": PART_LIMIT_S, "total_limit_s": TOTAL_LIMIT_S}
