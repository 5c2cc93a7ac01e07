"""``report.md`` and the figures of a validation (everything written atomically).

The report says what was compared, how each number was obtained, the cost
model's measured parameters, the per-schedule table and the aggregate fidelity
against the goals, and links the figures and traces.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stalesim.atomic import write_text_atomic
from stalesim.schedule.actions import UNSPLIT_COMPUTE_NAMES


def write_outputs(out: Path, summary: dict[str, Any], *, sims: dict[str, Any],
                  measured: dict[str, dict], mtimes: dict[str, dict],
                  emulated: dict[str, list | None]) -> dict[str, Any]:
    """Figures (and the list of trace files); returns {kind: relative path(s)}."""
    from stalesim.validate.figures import iteration_time_figure, loss_figure, timeline_figure
    from stalesim.validate.measured import rows_to_events

    files: dict[str, Any] = {"report": "report.md", "summary": "summary.json",
                             "profile": "profile.json", "hardware": "hardware.json"}
    if (out / "profile_contended.json").exists():
        files["profile_contended"] = "profile_contended.json"
    fig_dir = out / "figures"
    rows = summary["rows"]
    iteration_time_figure(rows, fig_dir / "iteration_time.png",
                          title=f"{summary['config']['model']} on {summary['devices']}: predicted vs measured")
    files["iteration_time_figure"] = "figures/iteration_time.png"
    timelines: dict[str, str] = {}
    traces: dict[str, dict[str, str]] = {}
    for name, r in sims.items():
        m = measured.get(name) or {}
        mt = mtimes.get(name) or {}
        trace_entry = {"simulated": f"traces/{name}.sim.json"}
        if (out / "runs" / name / "trace.json").exists():
            trace_entry["measured"] = f"runs/{name}/trace.json"
        traces[name] = trace_entry
        if not m.get("rows") or r.timeline is None:
            continue
        it_s = r.iteration_time_s
        done = r.timeline.batch_done
        w = r.steady_window
        if not w:  # no steady state (the hybrid switch): the run's start
            s_lo = 0.0
        else:
            s_lo = done[w[0]] / 1e3  # ns -> us
        s_span = 3 * it_s * 1e6
        m_it = mt.get("iteration_time_s") or it_s
        m_lo = (mt.get("window_s") or [0.0])[0] * 1e6
        m_span = 3 * m_it * 1e6
        sim_events, _ = r.trace_events()
        path = fig_dir / f"timeline_{name}.png"
        timeline_figure(sim_events, (s_lo, s_lo + s_span), rows_to_events(m["rows"]),
                        (m_lo, m_lo + m_span), r.devices, path,
                        title=f"{name}: simulated (top) vs measured (bottom), 3 steady-state iterations")
        timelines[name] = f"figures/timeline_{name}.png"
    files["timeline_figures"] = timelines
    files["traces"] = traces
    curves: dict[str, tuple[Sequence[float | None], Sequence[float | None]]] = {}
    for name in sims:
        exe = (measured.get(name) or {}).get("losses")
        if exe:
            E = len(emulated.get(name) or [])
            curves[name] = (emulated.get(name) or [], exe[:max(E, 1)] if E else exe)
    if curves:
        loss_figure(curves, fig_dir / "loss.png")
        files["loss_figure"] = "figures/loss.png"
    return files


def _span(xs: list[float]) -> str:
    """``min-max`` of ratios (one value when they agree to the shown digits), n/a when empty."""
    if not xs:
        return "n/a"
    lo, hi = f"{min(xs):.3f}", f"{max(xs):.3f}"
    return lo if lo == hi else f"{lo}-{hi}"


def _f(x: Any, fmt: str, none: str = "n/a") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return none
    return format(x, fmt)


def _ms(x: Any) -> str:
    return _f(None if x is None else x * 1e3, ".2f")


def _mark(within: Any) -> str:
    return " ≈" if within else ""


def _mib(xs: Any) -> str:
    if not xs:
        return "n/a"
    return " / ".join(f"{b / 2**20:.2f}" for b in xs)


def busy_line(summary: dict[str, Any]) -> str | None:
    """``warning: ...`` when the machine was busy during the run (see :mod:`.busy`), else None:
    the report's first line after the title and the end of the CLI's summary line."""
    text = (summary.get("busy") or {}).get("warning")
    return f"warning: {text}" if text else None


def render_report(summary: dict[str, Any]) -> str:
    """``report.md``'s text: the sections below, in order."""
    L = [*_header(summary), *_method_section(summary), *_cost_model_section(summary),
         *_results_section(summary), *_attribution_section(summary), *_failures(summary),
         *_aggregate_section(summary), *_figures_section(summary)]
    return "\n".join(L)


def _header(summary: dict[str, Any]) -> list[str]:
    """Title, the busy-machine warning, the command, the load and the machine."""
    cfg = summary["config"]
    load = summary.get("load_average") or {}
    L = [f"# Validation: {cfg['model']} on {summary['devices']}", ""]
    warning = busy_line(summary)
    if warning:
        L += [f"> **{warning}**", ""]
    L.append(f"Command: `{summary.get('command', 'stalesim validate')}`  ")
    L.append(f"Load average (1/5/15 min) before: {load.get('before')}, after: {load.get('after')}  ")
    L.append(f"Machine: {summary.get('machine', {}).get('device_name')} "
             f"({summary.get('machine', {}).get('cpu_count')} logical CPUs)")
    L.append("")
    return L


def _method_section(summary: dict[str, Any]) -> list[str]:
    """What was compared and how each number was obtained."""
    cfg = summary["config"]
    base = summary.get("baseline") or {}
    return [
        "## What was compared, and how",
        "",
        f"* Same configuration for every consumer: batch {cfg['batch_size']}, "
        f"{cfg['microbatches']} micro-batches (every micro-batched schedule), "
        f"partition PPV {summary.get('ppv')} "
        f"(min-max over the profile), {cfg['iterations']} iterations, dataset `{cfg['dataset']}`, "
        f"seed {cfg['seed']}, {cfg['threads']} torch thread(s) per rank. Pipeline schedules use "
        f"S = number of devices; dp and pipe-sgd use that many workers with S = 1.",
        "* **Predicted**: the event simulator with per-stage costs: each stage layout's action "
        "times measured on its real stages as the executor runs them (no schedule run), in one "
        "pass after each round of the runs, and on CPU ranks both alone and with co-runners "
        "keeping the other cores busy; a stage's cost is interpolated between the two by how "
        "much the other devices compute at the same time in the simulated timeline (fixed "
        "point); with co-runners busy each action is also timed after waits of a few lengths, and "
        "an action the simulated timeline has its device idle before costs its back-to-back time "
        "times the slowdown measured after a wait that long (same fixed point). With "
        "STALESIM_PIN=on, CPU ranks and every process that times for them are pinned to their "
        "own cores where there are enough. "
        "The per-layer profile chooses the partition and gives the update; the 1-rank "
        "run's gaps give the runtime's time between actions; the link is calibrated (per-message "
        "costs, alpha-beta, all-reduce). Nothing the measured runs record enters a prediction.",
        "* **Measured**: the executor (one process per device, torch.distributed) ran each "
        "schedule; iteration time = time between the completions (last U) of the batches "
        "bounding the simulator's steady window (the middle half of the run; hybrid: whole run / "
        "batches), utilization = compute (F/B/U/LOSS) time per device inside that window.",
        "* **Speed-up**: over one rank running `sequential` (S = 1): predicted from the same "
        "cost model, measured by running it. "
        f"Baseline iteration: predicted {_ms(base.get('predicted_iteration_time_s'))} ms, "
        f"measured {_ms(base.get('measured_iteration_time_s'))} ms.",
        f"* **Loss**: the emulator (one process) ran the same config for "
        f"{cfg.get('emulate_iterations')} iterations; `loss diff` is the largest relative "
        "difference to the executed per-step loss (exactness check).",
        "* **Memory**: predicted = the simulator's memory model; measured = the executor's "
        "tracked bytes (CPU: params + buffers + optimizer + stashes + gradient buffers + "
        "in-flight tensors; CUDA: max_memory_allocated).",
        "",
    ]


def _cost_model_section(summary: dict[str, Any]) -> list[str]:
    """The cost model's measured parameters: overheads, contention, the link."""
    cm = summary.get("cost_model") or {}
    hw = summary.get("sim_hardware") or {}
    ov = cm.get("overhead_s") or {}
    cr = cm.get("contention_ratio")
    st = [e["contention_ratio"] for e in cm.get("stage_times") or [] if e.get("contention_ratio") is not None]
    # per layout and kind, the slowdown after the longest wait timed (co-runners busy)
    aw = [c[-1][1] for e in cm.get("stage_times") or [] for c in (e.get("wait_ratios") or {}).values() if c]
    waits = sorted({p[0] for e in cm.get("stage_times") or [] for c in (e.get("wait_ratios") or {}).values()
                    for p in c})
    bw = hw.get("bandwidth_Bps")
    rows = summary.get("rows") or []
    cv = [x for r in rows for x in (r.get("jitter_spread") or {}).values()]
    # the drawn action times' effect: the prediction over the same costs at their means
    jit = [r["predicted_iteration_time_s"] / r["mean_cost_iteration_time_s"] for r in rows
           if r.get("jitter_draws_s") and r.get("mean_cost_iteration_time_s") and r.get("predicted_iteration_time_s")]
    ec = (summary.get("hardware") or {}).get("executor_comm") or {}
    return [
        "## Cost-model parameters (measured)",
        "",
        "| parameter | value |",
        "| --- | --- |",
        "| per-action overhead F / B / U / LOSS | " +
        " / ".join(f"{(ov.get(k) or 0) * 1e6:.0f} us" for k in UNSPLIT_COMPUTE_NAMES) + " |",
        f"| dispatch gap per action (executor loop, 1-rank run) | {(cm.get('dispatch_s') or 0) * 1e6:.0f} us |",
        f"| contention: compute with the other ranks busy / alone (profile) | {_f(cr, '.3f')} |",
        f"| contention: stage times with co-runners busy / alone (per layout) | {_span(st)} |",
        f"| contention the prediction uses: the same pooled over the layouts at each action batch | "
        f"{_span(list((cm.get('contention_by_action_batch') or {}).values()))} |",
        f"| after a wait of {' / '.join(f'{w * 1e3:.0f}' for w in waits) or '-'} ms, co-runners busy / back to "
        f"back (per layout and kind, longest wait) | {_span(aw)} |",
        f"| link latency / bandwidth | {_f((hw.get('latency_s') or 0) * 1e6, '.1f')} us / "
        f"{'unlimited' if bw is None else f'{bw / 1e9:.3f} GB/s'} |",
        f"| communication overlaps compute / CPU occupancy | {hw.get('comm_overlaps_compute')} / "
        f"{_f(hw.get('cpu_comm_occupancy'), '.2f')} |",
        f"| action time spread: each timed round over its pass's mean, coefficient of variation (per layout "
        f"and kind) | {_span(cv)} |",
        f"| drawn action times: prediction (median of the draws) over the same costs at their means "
        f"(per schedule) | {_span(jit)} |",
        f"| compute a message takes from a computing rank, sender / receiver (per message + per MiB) | "
        f"{_lost(ec.get('lost_sender'))} / {_lost(ec.get('lost_receiver'))} |",
        "",
    ]


def _lost(fit: dict[str, Any] | None) -> str:
    """A ``lost_*`` fit of the per-message calibration as ``alpha + beta/MiB``, or n/a."""
    if not fit:
        return "n/a"
    return f"{fit['alpha_s'] * 1e6:.0f} us + {fit['beta_s_per_byte'] * 2**20 * 1e6:.0f} us/MiB"


def _results_section(summary: dict[str, Any]) -> list[str]:
    """The per-schedule table, how its measured numbers were taken, what replay error means."""
    K = summary["config"].get("repeats") or 1
    L = ["## Results", "",
         f"Measured = median of {K} run(s) per schedule, interleaved round-robin (each round runs the "
         "1-rank baseline, then every schedule once, in rotated order). *noise* = interquartile "
         "range / median of those runs; an error is marked *within noise* (≈) only when "
         "|error| <= noise, i.e. a repeat of the measurement could have landed on the prediction. "
         "*pred noise* = the same statistic over the predictions made from each timing pass's "
         "stage times alone (one pass after each round): how far the prediction moves with the "
         "moment its stage times were taken (n/a: fewer than two passes).",
         "",
         "| schedule | predicted ms | measured ms | noise | pred noise | error | replay error | util pred | "
         "util meas | speed-up pred | speed-up meas | peak MiB pred | peak MiB meas | memory error | loss diff |",
         "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | --- | --- | ---: | ---: |"]
    L += [_result_row(r) for r in summary["rows"]]
    L += ["",
          "*replay error*: the simulator run with the **measured** costs of each action kind and "
          "stage (steady window, mean per repeat) instead of the predicted ones. Small replay error "
          "with a large error means the costs were off (profile vs. the ranks' real speed: machine "
          "load, contention, overhead); a large replay error points at the schedule/communication "
          "model. ≈ marks an error within the noise floor."]
    return L


def _result_row(r: dict[str, Any]) -> str:
    """One schedule's row of the results table."""
    pu = " ".join(f"{u:.2f}" for u in r.get("predicted_utilization") or [])
    mu = " ".join(f"{u:.2f}" for u in r.get("measured_utilization") or [])
    return (f"| {r['schedule']} | {_ms(r['predicted_iteration_time_s'])} | "
            f"{_ms(r['measured_iteration_time_s'])} | {_f(r.get('noise_floor'), '.1%')} | "
            f"{_f(r.get('prediction_noise'), '.1%')} | "
            f"{_f(r['time_error'], '+.1%')}{_mark(r.get('time_error_within_noise'))} | "
            f"{_f(r.get('replay_time_error'), '+.1%')}{_mark(r.get('replay_error_within_noise'))} | "
            f"{pu} | {mu} | "
            f"{_f(r['predicted_speedup'], '.2f')} | {_f(r['measured_speedup'], '.2f')} | "
            f"{_mib(r.get('predicted_peak_memory_bytes'))} | {_mib(r.get('measured_peak_memory_bytes'))} | "
            f"{_f(r.get('memory_error'), '+.1%')} | {_f(r.get('max_loss_rel_diff'), '.1e')} |")


def _failures(summary: dict[str, Any]) -> list[str]:
    """A paragraph per schedule whose run failed."""
    return [f"\n**{r['schedule']} failed**: {r['error']}" for r in summary["rows"] if r.get("error")]


def _aggregate_section(summary: dict[str, Any]) -> list[str]:
    """The aggregate fidelity next to its goals (met / missed / n/a)."""
    goals = summary.get("goals_met") or {}

    def g(k: str) -> str:
        v = goals.get(k)
        return "n/a" if v is None else ("met" if v else "missed")

    wn, wt = summary.get("schedules_within_noise"), summary.get("schedules_with_noise_floor")
    return [
        "",
        "| aggregate | value | goal | |",
        "| --- | ---: | ---: | --- |",
        f"| median abs iteration-time error | {_f(summary.get('median_abs_time_error'), '.1%')} | 3% | "
        f"{g('median_abs_time_error')} |",
        f"| max abs iteration-time error | {_f(summary.get('max_abs_time_error'), '.1%')} | 8% | "
        f"{g('max_abs_time_error')} |",
        f"| max utilization gap (mean over devices) | "
        f"{_f(summary.get('max_abs_utilization_error_points'), '.1f')} points | 3 points | "
        f"{g('max_abs_utilization_error_points')} |",
        f"| max speed-up error | {_f(summary.get('max_abs_speedup_error'), '.1%')} | 5% | "
        f"{g('max_abs_speedup_error')} |",
        f"| max peak-memory error | {_f(summary.get('max_abs_memory_error'), '.1%')} | 5% | "
        f"{g('max_abs_memory_error')} |",
        f"| median / max abs replay error | {_f(summary.get('median_abs_replay_error'), '.1%')} / "
        f"{_f(summary.get('max_abs_replay_error'), '.1%')} | 2% / 5% | "
        f"{g('median_abs_replay_error')} / {g('max_abs_replay_error')} |",
        f"| noise floor (median / max over schedules) | {_f(summary.get('median_noise_floor'), '.1%')} / "
        f"{_f(summary.get('max_noise_floor'), '.1%')} | | |",
        f"| prediction noise over the timing passes (median / max) | "
        f"{_f(summary.get('median_prediction_noise'), '.1%')} / {_f(summary.get('max_prediction_noise'), '.1%')} | | |",
        f"| abs time error a perfect model would show at this noise, median / max (5-95%) | "
        f"{_noise_only(summary.get('noise_only_error'))} | | |",
        f"| schedules whose time error is within noise | {'n/a' if wt is None else f'{wn} of {wt}'} | | |",
        f"| max loss difference (emulated vs executed) | {_f(summary.get('max_loss_rel_diff'), '.1e')} | | |",
        "",
        *_goal_terms_section(summary),
    ]


def _goal_terms_section(summary: dict[str, Any]) -> list[str]:
    """Each missed time or replay goal with the term that carries most of it (its measured size)."""
    from stalesim.validate.breakdown import goal_term_line

    terms = summary.get("goal_terms") or {}
    if not terms:
        return []
    return ["The term behind each missed goal (`goal_terms` in summary.json; the groups of the table "
            "above, signed toward |error|, against the prediction for a time goal and the replay for "
            "a replay goal):", "", *(f"* {goal_term_line(g, e)}" for g, e in terms.items()), ""]


def _noise_only(n: dict[str, Any] | None) -> str:
    """``summary["noise_only_error"]`` as ``median (lo-hi) / max (lo-hi)``, or n/a."""
    if not n:
        return "n/a"
    return (f"{n['median']:.1%} ({n['median_90'][0]:.1%}-{n['median_90'][1]:.1%}) / "
            f"{n['max']:.1%} ({n['max_90'][0]:.1%}-{n['max_90'][1]:.1%})")


def _figures_section(summary: dict[str, Any]) -> list[str]:
    """Links to the figures and traces, then the phase times (the report's last lines)."""
    files = summary.get("files") or {}
    L = ["## Figures and traces", ""]
    if files.get("iteration_time_figure"):
        L += [f"![predicted vs measured]({files['iteration_time_figure']})", ""]
    if files.get("loss_figure"):
        L += [f"![emulated vs executed loss]({files['loss_figure']})", ""]
    for name, p in (files.get("timeline_figures") or {}).items():
        L.append(f"* {name}: [timeline]({p})" + "".join(
            f", [{k} trace]({v})" for k, v in (files.get("traces") or {}).get(name, {}).items()))
    L.append("")
    L.append("Traces open in Perfetto (ui.perfetto.dev); simulated and measured slices carry the same "
             "IR labels (`1F3`, `0SEND_F3.2`, `w1:0AR5`).")
    t = summary.get("timings_s") or {}
    L.append("")
    L.append("Phase times: " + ", ".join(f"{k[:-2]} {v:.1f} s" for k, v in t.items()))
    L.append("")
    return L


def _attribution_section(summary: dict[str, Any]) -> list[str]:
    """Where each device's time error lies: measured - predicted ms per iteration by term."""
    from stalesim.validate.breakdown import markdown_table

    att = summary.get("attribution") or []
    if not att:
        return []
    return ["", "### Where the time error lies", "",
            "Measured minus predicted milliseconds per iteration of the median run, per device, inside "
            "each side's steady window: time inside each action kind (a receive includes waiting for its "
            "message), `gaps` between actions (the runtime's loop, a compute action waiting for a core), "
            "`idle` before a device's first action. Per device the terms add up to `total` = measured - "
            "predicted iteration time. Every stage and term with both sides and the replay: "
            "[attribution.csv](attribution.csv).", "", *markdown_table(att)]


def write_report(out: Path, summary: dict[str, Any]) -> Path:
    path = Path(out) / "report.md"
    write_text_atomic(path, render_report(summary))
    return path
