"""``python -m lab.gpucheck`` (``make gpu-check``): every CUDA path of stalesim in one campaign.

The project's CUDA paths (CUDA-event profiling, the emulator and the batched emulator on a GPU,
the executor over NCCL, ``cuda.max_memory_allocated``) are exercised by one command on a lent
machine whose commands are capped at 10 minutes, so the campaign is cut into *parts* of at most
9 minutes (``--part N``) whose results accumulate in one folder. Each step is a function with a
time budget that is also its hard timeout (on a GPU each step runs in its own process, so a hung
or crashed CUDA context costs that step only); every step records its numbers and pass/fail
checks, and a failing step never stops the others.

* :mod:`lab.gpucheck.plan`: the steps, their budgets and parts, the tolerances (one place).
* :mod:`lab.gpucheck.env`: GPU, driver, torch/CUDA versions, precision flags.
* :mod:`lab.gpucheck.jobs`: the training configs the steps run (datasets, schedules, shapes).
* :mod:`lab.gpucheck.measure`: profile, emulator speed, batched vs loop.
* :mod:`lab.gpucheck.execsteps`: executor == emulator on one GPU folded and on 2+ GPUs; memory.
* :mod:`lab.gpucheck.suite`: ``pytest -m gpu`` and the reproduce-gpu plan.
* :mod:`lab.gpucheck.report`: step records, ``summary.json`` and ``summary.md``.
* :mod:`lab.gpucheck.runner`: runs a part's steps (in process, or one process each).
* :mod:`lab.gpucheck.paths`: this tree's root, and the environment its child processes get.

``--dry`` runs the same plan on the CPU in tiny variants (what CI runs; docs/gpu-check.md).
"""
