"""The one cost model behind ``simulate``, ``sweep``, ``plan`` and ``validate``.

Modules: ``model`` (:class:`~stalesim.cost.model.CostModel`: a profile and the measured
terms), ``terms`` (each term turned into per-stage simulator costs or a link), ``apply``
(a schedule simulated with them: :func:`~stalesim.cost.apply.predict`, the one
iteration-time predictor), ``calibration`` (a machine's terms, stored and reused:
:class:`~stalesim.cost.calibration.MachineCalibration`) and ``memory`` (the bytes the memory
model reads, measured as the executor counts them). See docs/validate.md for how each
term is measured.
"""
