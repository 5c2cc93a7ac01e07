"""The Python API checks its arguments as the CLI checks its flags: a wrong type is a
TypeError and a value out of range a ValueError (StalesimError), each naming the argument,
before any work starts (no AttributeError from deep inside, no rank started)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import stalesim
from stalesim.workloads.profile import uniform_profile

PROF = uniform_profile(4, 1e-3, 2e-3, 16, param_bytes=1000, output_bytes=100, saved_bytes=100)


@pytest.mark.parametrize(("call", "error", "said"), [
    (lambda: stalesim.simulate({"layers": []}, "1f1b", stages=2), ValueError, "^profile: "),
    (lambda: stalesim.simulate(3, "1f1b", stages=2), TypeError, "^profile: expected a Profile"),
    (lambda: stalesim.simulate("no-such-profile.json", "1f1b", stages=2), ValueError, "^profile 'no-such"),
    (lambda: stalesim.simulate(PROF, "1f1b", stages=2, hardware="h100-sxm"), TypeError,
     r"^hardware: expected a Hardware or SimHardware, got str \(for the catalog device 'h100-sxm'"),
    (lambda: stalesim.simulate(PROF, "1f1b", ppv="1,2"), TypeError, "^ppv: expected a sequence"),
    (lambda: stalesim.simulate(PROF, "1f1b", stages=2, method=1), TypeError, "^method: "),
    (lambda: stalesim.emulate(cfg="x"), TypeError, "^cfg: expected a TrainConfig"),
    (lambda: stalesim.emulate(threads=-1, iterations=1), ValueError, "^threads: expected an integer >= 1"),
    (lambda: stalesim.emulate(threads=2.5, iterations=1), TypeError, "^threads: expected an integer"),
    (lambda: stalesim.emulate(threads=True, iterations=1), TypeError, "^threads: "),
    (lambda: stalesim.emulate(out=3, iterations=1), TypeError, "^out: expected a folder path"),
    (lambda: stalesim.profile("lenet5", [8], threads=-1), ValueError, "^threads: "),
    (lambda: stalesim.profile("lenet5", [8], device=3), TypeError, "^device: "),
    (lambda: stalesim.profile(None, [8]), TypeError, "^model: "),  # type: ignore[arg-type]
    (lambda: stalesim.run(timeout_s=-1, iterations=1), ValueError, "^timeout_s: expected a number >= 1"),
    (lambda: stalesim.run(timeout_s=0.001, iterations=1), ValueError, "^timeout_s: expected a number >= 1"),
    (lambda: stalesim.run(timeout_s=float("nan"), iterations=1), ValueError, "^timeout_s: "),
    (lambda: stalesim.run(timeout_s="60", iterations=1), TypeError, "^timeout_s: "),
    (lambda: stalesim.run(threads=0, iterations=1), ValueError, "^threads: "),
    (lambda: stalesim.run(threads=None, iterations=1), TypeError, "^threads: "),
    (lambda: stalesim.run(devices=2, iterations=1), TypeError, "^devices: expected a text"),
    (lambda: stalesim.run(devices="tpu:2", iterations=1), ValueError, "devices|cpu:N"),
    (lambda: stalesim.run(cfg="x"), TypeError, "^cfg: expected a TrainConfig"),
    # the default config is one stage: two ranks are refused before any starts
    (lambda: stalesim.run(devices="cpu:2", iterations=1), ValueError,
     r"^devices: cpu:2 gives 2 rank\(s\) but schedule 'sequential' needs 1"),
])
def test_bad_arguments_name_the_argument(call: Any, error: type[Exception], said: str) -> None:
    with pytest.raises(error, match=said) as exc:
        call()
    assert "\n" not in str(exc.value)


def test_a_profile_file_or_its_dict_is_read_as_the_cli_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    PROF.to_json(path)
    want = stalesim.simulate(PROF, "1f1b", stages=2, microbatches=2, batches=6).iteration_time_s
    assert stalesim.simulate(path, "1f1b", stages=2, microbatches=2, batches=6).iteration_time_s == want
    assert stalesim.simulate(str(path), "1f1b", stages=2, microbatches=2, batches=6).iteration_time_s == want
    doc = json.loads(path.read_text())
    assert stalesim.simulate(doc, "1f1b", stages=2, microbatches=2, batches=6).iteration_time_s == want


def test_hardware_objects_are_still_taken() -> None:
    from stalesim.sim.model import SimHardware
    from stalesim.workloads.hardware import hardware_from_catalog

    hw = hardware_from_catalog("cpu-core", "gloo-loopback")
    a = stalesim.simulate(PROF, "1f1b", stages=2, microbatches=2, batches=6, hardware=hw)
    b = stalesim.simulate(PROF, "1f1b", stages=2, microbatches=2, batches=6, hardware=SimHardware.from_hardware(hw))
    assert a.iteration_time_s == pytest.approx(b.iteration_time_s) and a.iteration_time_s > 0
