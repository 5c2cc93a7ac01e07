"""The training processes' heap policy: freed activations are reused, not faulted back in."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# allocate ten 8 MiB blocks, write them, free them all; the third round's minor page faults
_PROBE = """
import json, resource, sys, torch
if sys.argv[1] == "keep":
    from stalesim.runtime.heap import keep_heap
    assert keep_heap()  # it says it was set
faults = []
for _ in range(3):
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    blocks = [torch.ones(2 << 20) for _ in range(10)]
    del blocks
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
print(json.dumps(faults))
"""


def _faults(mode: str) -> list[int]:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_kept_heap_reuses_freed_blocks_where_the_default_faults_them_back() -> None:
    default, kept = _faults("default"), _faults("keep")
    pages = 10 * (8 << 20) // 4096
    assert default[2] > pages // 2  # glibc returned the freed 80 MiB and faulted it back in
    assert kept[2] < pages // 50  # kept: the third round touches memory it already has

