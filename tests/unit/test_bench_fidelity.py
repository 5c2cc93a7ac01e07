"""The fidelity campaign's held-out grid holds only configurations ``validate`` accepts."""

from __future__ import annotations

import pytest

from benchmarks.bench_fidelity import grid_configs, spread
from stalesim.errors import StalesimError
from stalesim.validate.config import ValidateConfig, check_config


def test_every_grid_configuration_passes_validates_own_check() -> None:
    configs = grid_configs(["resnet20"], [16, 32, 96], [1, 2, 4], ["cpu:2", "cpu:3"])
    assert configs
    for c in configs:
        check_config(ValidateConfig(model=c["model"], devices=c["devices"], schedules=c["schedules"].split(","),
                                    batch_size=c["batch"], microbatches=c["micro"]))


def test_virtual_stage_schedules_are_left_out_where_their_stages_refuse_the_micro_batches() -> None:
    """At M = 1 and 2 on 2 devices DualPipeV (S = 4 stages, needs M >= S) is refused by
    validate; the grid leaves it out instead of failing the whole configuration (it
    checked the schedule at S = devices, not devices x chunks)."""
    by = {(c["devices"], c["batch"], c["micro"]): c["schedules"].split(",")
          for c in grid_configs(["resnet20"], [16, 96], [1, 2, 4], ["cpu:2"])}
    for key in (("cpu:2", 16, 1), ("cpu:2", 96, 2)):
        for name in by[key]:
            check_config(ValidateConfig(model="resnet20", devices="cpu:2", schedules=[name], batch_size=key[1],
                                        microbatches=key[2]))
        with pytest.raises(StalesimError):
            check_config(ValidateConfig(model="resnet20", devices="cpu:2", schedules=["dualpipev"],
                                        batch_size=key[1], microbatches=key[2]))
        assert "dualpipev" not in by[key]
    assert "dualpipev" in by[("cpu:2", 16, 4)]


def test_spread_picks_evenly() -> None:
    assert spread(list(range(10)), 3) == [0, 3, 6]
    assert spread([1, 2], None) == [1, 2] and spread([1, 2], 0) == []
