"""The run summary: one schema for every command that trains (``emulate``, ``study``, ``run``).

``stalesim emulate`` (the one-device emulator), ``stalesim study`` (many emulations,
batched or not) and ``stalesim run`` (the multi-process executor) all report a
:class:`RunSummary`. Every producer writes every key; a key means the same thing
whoever wrote it, and a producer that does not measure a quantity writes ``None``
(the emulator has no per-device timing, the executor no per-epoch evaluation). So a
consumer (``validate``, the study tables, ``plan``, a notebook) reads one dialect,
and two summaries of the same config can be compared key by key. docs/summary.md
documents every field; :data:`DEPRECATED` lists the old spellings, still written for
one release.

The version facts (the IR's staleness, the staleness the runtimes measured, whether
every action read the version the IR says) are computed here once, by
:func:`version_facts`, from the versions the runtimes logged; both producers call it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from stalesim.schedule import Action, Kind, Schedule, VersionTable

Producer = Literal["emulate", "run"]

#: Mitigation settings echoed in every summary (names of TrainConfig fields).
MITIGATION_FIELDS = ("weight_prediction", "spike_compensation", "pipemare_lr", "pipemare_correction",
                     "staleness_lr", "warmup", "compression", "nesterov_lookahead", "error_feedback")

#: How many version mismatches a summary lists (the count is unbounded; the list is a sample).
MAX_MISMATCHES_LISTED = 20


def _doc(text: str, default: Any = None) -> Any:
    """A field with its meaning attached (``fields(RunSummary)[i].metadata["doc"]``):
    docs/summary.md and the schema test read the same text. A list or dict default is
    copied per instance."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"doc": text})
    return field(default=default, metadata={"doc": text})


@dataclass
class RunSummary:
    """What one training run reports. ``None``: not measured by this producer (see each doc)."""

    # --- what ran
    producer: Producer = _doc("'emulate' (one-device emulator; also every run of a study) or 'run' "
                              "(the multi-process executor)", "emulate")
    label: str | None = _doc("run: the job's label (validate names its jobs); emulate: None")
    schedule: str = _doc("schedule name as built by the IR", "")
    model: str = _doc("zoo model name", "")
    dataset: str = _doc("dataset name (the model's default when not given)", "")
    task: str = _doc("'classify' or 'lm' (which evaluation metric applies)", "classify")
    optimizer: str = _doc("sgd | adam | adamw | muon", "sgd")
    data_note: str | None = _doc("where the data came from (real files, synthetic stand-in)")
    stages: int = _doc("pipeline stages S", 0)
    workers: int = _doc("data-parallel workers P", 1)
    microbatches: int = _doc("micro-batches per batch M as run (1 when the schedule does not split batches)", 1)
    devices: int = _doc("devices the schedule places its stages on (emulate runs them all on one)", 1)
    device_kind: str = _doc("torch device type the training ran on: 'cpu' or 'cuda'", "cpu")
    policy: str = _doc("the schedule's weight policy (which version a backward reads)", "")
    ppv: list[int] | None = _doc("emulate: the pipeline placement vector the model was cut with; run: None")
    batch_size: int = _doc("global mini-batch size", 0)
    lr: float = _doc("base learning rate (lr_schedule shapes it over the run)", 0.0)
    momentum: float = _doc("SGD momentum coefficient", 0.0)
    weight_decay: float = _doc("weight decay coefficient", 0.0)
    lr_schedule: str = _doc("constant | step | cosine", "constant")
    seed: int = _doc("seed of the model and the data order", 0)
    epochs: int | None = _doc("the run's length in epochs when given so, else None")
    iterations: int = _doc("the run's length in mini-batches (optimizer steps); with --epochs, "
                           "epochs x batches_per_epoch", 0)
    batches_per_epoch: int | None = _doc("mini-batches per pass over the training set (None: not known "
                                         "to the process that summarised)")
    mitigations: dict[str, Any] = _doc("the mitigation settings (TrainConfig fields of the same names)", {})
    batched: int | None = _doc("study: runs emulated together in one batched replay; otherwise None")
    run_dir: str | None = _doc("the run folder holding summary.json (None: no folder written)")
    # --- training
    steps_done: int = _doc("mini-batches whose loss was recorded (stops at a divergence)", 0)
    losses: list[float | None] = _doc("training loss per mini-batch: the mean over workers of the last "
                                      "stage's loss (null: not finite)", [])
    final_loss: float | None = _doc("the last entry of losses (None when diverged)")
    diverged: bool = _doc("some mini-batch's loss was not finite", False)
    diverged_at: int | None = _doc("the first mini-batch whose loss was not finite")
    stage_losses: list[list[float | None]] | None = _doc(
        "run with a local-loss schedule: per stage, worker 0's loss per mini-batch; otherwise None")
    final_test_accuracy: float | None = _doc("classifiers: test-set accuracy of worker 0's weights "
                                             "at the end (None: LM, no test set, or diverged)")
    final_val_loss: float | None = _doc("language models: validation loss in nats per character at the end")
    final_val_bpc: float | None = _doc("language models: final_val_loss in bits per character")
    epoch_metrics: list[dict[str, Any]] = _doc(
        "evaluations made, in order: emulate one per epoch end (with train_accuracy, wall_time_s); "
        "both producers end with {'epoch': None, ...} for an evaluation after the last step", [])
    # --- weight versions
    schedule_fingerprint: str = _doc("SHA-256 of the schedule's action lists, placement and policy", "")
    staleness_ir: list[int] = _doc("per stage, max over batches of u - 1 - v_F in the IR's version table", [])
    staleness_measured: list[int] = _doc("the same, from the versions the runtimes logged (only rows "
                                         "whose update ran: a resumed run's log may start late)", [])
    weight_inconsistent_stages: list[int] = _doc("stages where some backward reads another version than "
                                                 "its forward (IR)", [])
    versions_match_ir: bool = _doc("every logged F/B/I/W read, and every U produced, the IR's version", False)
    version_mismatches: list[str] = _doc(f"up to {MAX_MISMATCHES_LISTED} of the mismatches, "
                                         "'<action>: used vX, IR vY'", [])
    # --- time
    wall_s: float | None = _doc("seconds of training in this process, no setup and no final evaluation: "
                                "emulate the replay (epoch-end evaluations and checkpoints included), "
                                "run the first action to the end of the last on the ranks' clock")
    wall_time_s: float | None = _doc("emulate: seconds of training and evaluation, summed over resumed "
                                     "segments; run: None")
    setup_s: float | None = _doc("run: the slowest rank's setup (data, model, groups) in seconds; emulate: None")
    cpu_affinity: dict[str, list[int] | None] | None = _doc(
        "run: per rank, the host cores its threads could run on (CPU ranks are pinned to their "
        "share with STALESIM_PIN=on: stalesim.runtime.affinity); emulate: None")
    iteration_time_s: float | None = _doc("run: seconds per mini-batch in the timing window; emulate: None")
    throughput_samples_per_s: float | None = _doc("run: batch_size / iteration_time_s; emulate: None")
    utilization: dict[str, float] | None = _doc("run: per device, compute time / window time; emulate: None")
    utilization_whole_run: dict[str, float] | None = _doc("run: per device, compute time / wall_s; emulate: None")
    time_by_kind_s: dict[str, dict[str, float]] | None = _doc("run: per device, seconds per action kind; "
                                                              "emulate: None")
    warmup_batches_skipped: int | None = _doc("run: mini-batches before the timing window; emulate: None")
    timing_window: str | None = _doc("run: 'steady window', 'whole run' or 'warm-up' (the rule the "
                                     "iteration time used); emulate: None")
    # --- memory
    stash_peak_bytes: int | None = _doc("sum over runtimes of each one's peak bytes of stashed weight "
                                        "versions (study: per run)")
    inflight_peak_bytes: int | None = _doc("emulate: peak bytes of stashed versions plus in-flight inputs "
                                           "over all runtimes; run: None")
    peak_memory_bytes: dict[str, int] | None = _doc("run: per rank, peak bytes (peak_memory_kind says "
                                                    "how counted); emulate: None")
    peak_memory_parts: dict[str, Any] | None = _doc("run (CPU): per rank, the peak by component; emulate: None")
    setup_peak_memory_bytes: dict[str, int | None] | None = _doc(
        "run (CUDA): per rank, the allocator's peak through setup; emulate: None")
    run_start_allocated_bytes: dict[str, int | None] | None = _doc(
        "run (CUDA): per rank, the bytes allocated when the run started (static state, and what "
        "else the process holds); emulate: None")
    peak_memory_kind: str | None = _doc("run: how peak_memory_bytes was measured; emulate: None")

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: every field, then the deprecated spellings (:data:`DEPRECATED`)."""
        out = asdict(self)
        for old, new in DEPRECATED.items():
            out[old] = out[new]
        # the old `staleness` meant the IR's in emulate's summary and the measured one in run's
        out["staleness"] = out["staleness_measured" if self.producer == "run" else "staleness_ir"]
        out["executor"] = self.producer == "run"
        return out


#: Deprecated keys (written for one release, then dropped) -> the field they repeat. Also
#: deprecated: ``staleness`` (emulate: staleness_ir, run: staleness_measured, as before) and
#: ``executor`` (producer == 'run').
DEPRECATED: dict[str, str] = {
    "test_accuracy": "final_test_accuracy",  # run's old name
    "val_loss": "final_val_loss",  # run's old name
    "val_bpc": "final_val_bpc",  # run's old name
    "versions_match": "versions_match_ir",  # emulate's old name
}
DEPRECATED_OTHER = ("staleness", "executor")

FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RunSummary))


def field_docs() -> dict[str, str]:
    """Field name -> its documented meaning (docs/summary.md is checked against this)."""
    return {f.name: f.metadata["doc"] for f in fields(RunSummary)}


def summary_keys() -> frozenset[str]:
    """Every key a summary written now has: the fields and the deprecated spellings."""
    return frozenset(FIELDS) | frozenset(DEPRECATED) | frozenset(DEPRECATED_OTHER)


def get(summary: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """``summary[key]`` for a field, also from a summary written before the field existed
    (stored study results): falls back to the old spelling of the same quantity."""
    if key in summary:
        return summary[key]
    for old, new in DEPRECATED.items():
        if new == key and old in summary:
            return summary[old]
    if key == "staleness_ir" and "staleness" in summary and not summary.get("executor"):
        return summary["staleness"]
    if key == "staleness_measured" and "staleness" in summary and summary.get("executor"):
        return summary["staleness"]
    return default


def version_facts(sched: Schedule, used: Iterable[tuple[str, int]]) -> dict[str, Any]:
    """The version fields of a summary from the versions the runtimes logged: ``used`` is
    every runtime's ``versions_used`` (action text, version read, or produced by a U).

    The check and the measured staleness are the same for both producers: an F reads
    v_F, a B/I/W reads v_B (a W unpacks the version its I read), a U produces u."""
    table = sched.versions
    if table is None:  # a schedule is annotated when built; one that is not cannot be checked
        raise ValueError(f"schedule {sched.name!r} has no version table (not annotated)")
    entries = [(Action.parse(text), v) for text, v in used]
    mismatches = []
    for a, v in entries:
        if a.kind is Kind.F:
            want = table.v_f(a.stage, a.batch, a.micro, a.worker)
        elif a.kind is Kind.U:
            want = table.u(a.stage, a.batch, a.worker)
        else:
            want = table.v_b(a.stage, a.batch, a.micro, a.worker)
        if want != v:
            mismatches.append(f"{a}: used v{v}, IR v{want}")
    measured = VersionTable.from_log(sched.stages, entries).complete_rows().staleness()
    return {
        "schedule_fingerprint": sched.fingerprint(),
        "policy": sched.policy.value,
        "staleness_ir": table.staleness(),
        "staleness_measured": measured,
        "weight_inconsistent_stages": table.inconsistent_stages(),
        "versions_match_ir": not mismatches,
        "version_mismatches": mismatches[:MAX_MISMATCHES_LISTED],
    }


def config_fields(cfg: Any) -> dict[str, Any]:
    """The fields every producer echoes from its TrainConfig, read the same way."""
    return {
        "model": cfg.model, "dataset": cfg.dataset, "optimizer": cfg.optimizer,
        "batch_size": cfg.batch_size, "lr": cfg.lr, "momentum": cfg.momentum,
        "weight_decay": cfg.weight_decay, "lr_schedule": cfg.lr_schedule, "seed": cfg.seed,
        "epochs": cfg.epochs, "mitigations": {k: getattr(cfg, k) for k in MITIGATION_FIELDS},
    }


def schedule_fields(sched: Schedule) -> dict[str, Any]:
    """The fields every producer reads off the built schedule."""
    return {"schedule": sched.name, "stages": sched.stages, "workers": sched.workers,
            "microbatches": sched.microbatches if sched.uses_micro else 1, "devices": sched.num_devices}
