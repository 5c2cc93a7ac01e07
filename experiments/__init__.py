"""Experiments: modules that answered one question about this machine or about a stored
``validate`` run, kept so that their finding can be re-checked, not run by ``make bench``.

A benchmark (``benchmarks/``) measures a target the project keeps meeting (simulator speed,
executor speed-up, emulator cost) and is run again after every change that could move it. An
experiment here asked once why a measured run differed from its prediction; its answer went
into the cost model (the module that models the effect cites the experiment) and into the
docs' measurement record. Each is run by hand, ``python -m experiments.<module> --help``:

* on the machine: ``bench_wake`` (a wait, and a move to another core, before an action),
  ``bench_after_recv`` (an action after a gloo receive while the peer computed),
  ``bench_duty_cycle`` (compute between frequent short waits), ``bench_process_speed``
  (does a process keep its own speed), ``bench_peer_stage`` (a stage as a rank of a real
  group), ``bench_layout_timing`` (the stage timing against itself over layouts and passes),
  ``bench_grad_faults`` (page faults of held gradient buffers, per heap policy),
  ``bench_stalls`` (do gloo's threads wait for a core);
* on a stored ``validate`` folder, measuring nothing again: ``bench_stage_estimators``,
  ``bench_across_runs``, ``bench_replay_jitter``, ``bench_compute_over_predicted``, and
  ``attribute_validate`` (their shared re-prediction of a folder);
* shared helpers: ``block_ratios`` (per-block ratios to a baseline condition) and
  ``cli_types`` (a zoo model checked when the arguments are parsed).
"""
