"""Soak of the newer surfaces' bad inputs, each a real ``stalesim`` process under a time limit:
``plan``/``sweep``/``simulate --workload`` flags, schedule files (malformed, oversized, deadlocking),
every ``emulate``/``run --schedule-file`` flag combination, rank timeouts too short to start, a
char-GPT's synthetic text beyond its bound, and a user's data set or model factory whose products
are wrong (items, labels, input shapes, block outputs) through ``emulate``, ``run`` and ``validate``.

Each case must end within ``LIMIT_S`` (a success that trains: ``LIMIT_TRAIN_S``) in exactly one
``stalesim: error:`` line (exit 2) naming the field, or in exit 0 with the answer the flags ask for
(a flag applied, never ignored); never a traceback, never a hang. The processes run two at a time
(the CI boxes are small).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from stalesim.workloads.profile import uniform_profile

pytestmark = pytest.mark.slow  # about forty processes, a few of which import torch

LIMIT_S = 20
# a case that must succeed by training (emulate's few steps): torch's start on a busy CI box alone
# can take most of LIMIT_S; a refusal never gets that far
LIMIT_TRAIN_S = 90
LLM = ["--workload", "llama2-7b", "--node", "dgx-h100"]
TRAIN = ["--dataset", "synthetic", "--synthetic-size", "64", "--batch-size", "8"]


def _files(d: Path) -> dict[str, str]:
    """Schedule files, good and bad, and a profile."""
    out = {}
    prof = d / "p.json"
    uniform_profile(6, 1e-3, 2e-3, 128, output_bytes=10_000).to_json(prof)
    out["profile"] = str(prof)
    good = subprocess.run([sys.executable, "-m", "stalesim", "schedule", "1f1b", "-S", "2", "-M", "2", "--json"],
                          capture_output=True, text=True, timeout=60, check=True).stdout

    def put(name: str, text: str | bytes, ext: str = ".json") -> None:
        p = d / f"{name}{ext}"
        p.write_bytes(text if isinstance(text, bytes) else text.encode())
        out[name] = str(p)

    put("good", good)
    put("csv", "0F0,0F1,,0B0,0B1\n,1F0,1B0,1F1,1B1\n", ".csv")
    put("csv_unicode", "0F0,0F1,,0B0,0B1\n,1F0,1B0,1F1,1B\u00e9\n", ".csv")
    put("deep", "[" * 50_000 + "]" * 50_000)
    put("digits", good.replace('"stages": 2', '"stages": ' + "9" * 5000, 1))
    put("key", good.replace('"actions": {\n    "0"', '"actions": {\n    "device zero"', 1))
    put("truncated", good[: len(good) // 2])
    put("empty", "")
    # counts are derived from the actions (never trusted from the header): huge indices make them huge
    put("huge_batches", good.replace('"0F0.0v0"', '"0F99999999.0v0"', 1))
    put("huge_micro", good.replace('"0F0.0v0"', '"0F0.999999999v0"', 1))
    # device 0 starts with micro-batch 0's backward, which waits for device 1's, which waits for the
    # forward device 0 has not run: a cycle (communication is derived from the order, not read)
    bad = json.loads(good)
    acts = bad["actions"]["0"]
    acts.insert(0, acts.pop(acts.index("0B0.0v0")))
    put("deadlock", json.dumps(bad))
    os.mkfifo(d / "fifo.json")
    out["fifo"] = str(d / "fifo.json")
    (d / "rel48plug.py").write_text(PLUGINS)  # the processes start in d: ``rel48plug:factory`` resolves
    return out


# a user's factories whose products are wrong (data set items, block outputs)
PLUGINS = """
import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset


class Items(Dataset):
    def __init__(self, item, n=64):
        self.item, self.n = item, n
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        return self.item(i)


def _xy(shape=(1, 28, 28), top=9):
    x = torch.rand((64, *shape), generator=torch.Generator().manual_seed(0))
    y = torch.arange(64) % 10
    y[3] = top
    return TensorDataset(x, y)

def good():
    return _xy()
def labels_999():
    return _xy(top=999)
def cifar_shaped():
    return _xy(shape=(3, 32, 32))
def str_inputs():
    return Items(lambda i: ("abc", 1))
def raises():
    return Items(lambda i: {}["boom"] if i == 5 else (torch.zeros(1, 28, 28), 0))


class Tuple(nn.Module):
    def forward(self, x):
        return x, x
class Nothing(nn.Module):
    def forward(self, x):
        return None
class Integer(nn.Module):
    def forward(self, x):
        return x.long()
class TupleBeyondTwo(nn.Module):  # right for the check's batch of 2, a tuple for the run's
    def forward(self, x):
        return x if x.shape[0] == 2 else (x,)
class RaisesBeyondTwo(nn.Module):
    def forward(self, x):
        if x.shape[0] != 2:
            raise ValueError("my block takes pairs")
        return x


def _net(mid=None, last=None):
    seq = nn.Sequential(nn.Sequential(nn.Flatten(), nn.Linear(784, 32)), mid or nn.Identity(), nn.Linear(32, 10),
                        last or nn.Identity())
    seq.input_shape = (1, 28, 28)
    return seq

def net_tuple():
    return _net(mid=Tuple())
def net_none():
    return _net(last=Nothing())
def net_int():
    return _net(last=Integer())
def net_lazy():
    return _net(mid=TupleBeyondTwo())
def net_raises():
    return _net(mid=RaisesBeyondTwo())
"""


# refused only once the run reaches the model at its batch size: the process starts training first
AT_RUN_TIME = ("net_lazy", "net_raises")


def _cases(f: dict[str, str]) -> list[tuple[str, list[str], str | None]]:
    """(id, argv, what exit 0 must print, or None: must be refused)."""
    sim = ["simulate", "--profile", f["profile"]]
    cases: list[tuple[str, list[str], str | None]] = [
        # plan --workload: flags that were accepted and ignored, and the two that hung
        ("plan zero 4", ["plan", *LLM, "--devices", "8", "--zero", "4"], None),
        ("plan recompute", ["plan", *LLM, "--devices", "8", "--recompute", "bogus"], None),
        ("plan precision", ["plan", *LLM, "--devices", "8", "--precision", "fp8"], None),
        ("plan optimizer", ["plan", *LLM, "--devices", "8", "--optimizer", "nosuch"], None),
        ("plan sp", ["plan", *LLM, "--devices", "8", "--tp", "1", "--sp"], None),
        ("plan node-size", ["plan", "--workload", "llama2-7b", "--target", "h100-sxm", "--link", "nvlink4",
                            "--node-size", "3", "--inter-link", "ib-ndr", "--devices", "8"], None),
        ("plan batch", ["plan", *LLM, "--devices", "8", "--batch-size", "7"], None),
        ("plan check", ["plan", *LLM, "--devices", "8", "--check", "1"], None),
        ("plan profile", ["plan", *LLM, "--devices", "8", "--profile", f["profile"]], None),
        ("plan ok", ["plan", *LLM, "--devices", "8", "--schedules", "1f1b", "--zero", "1"], "1f1b"),
        # sweep --workload: each list item checked
        ("sweep recompute", ["sweep", *LLM, "--schedules", "1f1b", "--recompute", "none,bogus"], None),
        ("sweep zero", ["sweep", *LLM, "--schedules", "1f1b", "--zero", "0,9"], None),
        ("sweep tp -8", ["sweep", *LLM, "--schedules", "1f1b", "--tp", "-8"], None),
        ("sweep tp 0", ["sweep", *LLM, "--schedules", "1f1b", "--tp", "0"], None),
        ("sweep gpus", ["sweep", *LLM, "--schedules", "1f1b", "--tp", "8", "--pp", "8", "-P", "4", "--gpus", "64"],
         None),
        ("sweep schedules", ["sweep", *LLM, "--schedules", "1f1b,nosuch"], None),
        ("sweep ok", ["sweep", *LLM, "--schedules", "1f1b", "--tp", "1,2"], "1f1b"),
        # simulate --workload
        ("simulate zero", ["simulate", *LLM, "--schedule", "1f1b", "--zero", "5"], None),
        ("simulate batch", ["simulate", *LLM, "--schedule", "1f1b", "--tp", "2", "-P", "2", "-B", "3"], None),
        ("simulate ppv", ["simulate", *LLM, "--schedule", "1f1b", "--ppv", "3"], None),
        ("simulate nodes", ["simulate", *LLM, "--schedule", "1f1b", "-P", "12"], None),
        # schedule files: bounded and checked before use
        *((f"simulate file {k}", [*sim, "--schedule-file", f[k]], None)
          for k in ("deep", "digits", "key", "truncated", "empty", "huge_batches", "huge_micro", "csv_unicode",
                    "fifo", "deadlock")),
        ("simulate file ok", [*sim, "--schedule-file", f["good"]], "iteration"),
        ("simulate file -S", [*sim, "--schedule-file", f["good"], "-S", "3"], None),
        # emulate/run --schedule-file with the flags that shape a schedule: applied or refused
        ("emulate file -S 3", ["emulate", "--schedule-file", f["good"], *TRAIN, "-S", "3"], None),
        ("emulate file ppv 1,2", ["emulate", "--schedule-file", f["good"], *TRAIN, "--ppv", "1,2"], None),
        ("emulate file warmup", ["emulate", "--schedule-file", f["good"], *TRAIN, "--warmup", "1"], None),
        ("emulate file -V", ["emulate", "--schedule-file", f["good"], *TRAIN, "-V", "2"], None),
        ("emulate file schedule", ["emulate", "--schedule-file", f["good"], *TRAIN, "--schedule", "1f1b"], None),
        ("emulate file -M", ["emulate", "--schedule-file", f["good"], *TRAIN, "-M", "4"], None),
        ("emulate file ppv 2", ["emulate", "--schedule-file", f["good"], *TRAIN, "--ppv", "2", "--json"],
         '"ppv": [\n    2\n  ]'),
        ("emulate csv -S 3", ["emulate", "--schedule-file", f["csv"], *TRAIN, "--iterations", "8", "-S", "3"], None),
        ("run file -S 3", ["run", "--schedule-file", f["good"], *TRAIN, "--devices", "cpu:2", "-S", "3"], None),
        ("run file ppv 1,2", ["run", "--schedule-file", f["good"], *TRAIN, "--devices", "cpu:2", "--ppv", "1,2"],
         None),
        ("run file fold", ["run", "--schedule-file", f["good"], *TRAIN, "--devices", "cpu:2", "--fold", "1"], None),
        # a rank group's timeout below what its rendezvous takes: refused before the ranks start
        ("run timeout 0.001", ["run", *TRAIN, "--devices", "cpu:2", "-S", "2", "--timeout", "0.001"], None),
        ("run timeout 0", ["run", *TRAIN, "--devices", "cpu:2", "-S", "2", "--timeout", "0"], None),
        # the char-GPT's synthetic text beyond its bound (it drew 74M characters for minutes)
        ("emulate gpt block 65536", ["emulate", "--model", "gpt-char:n_layer=1,n_embd=16,n_head=1,block_size=65536",
                                     "--dataset", "synthetic", "--batch-size", "2", "--iterations", "2"], None),
        ("run gpt block 65536", ["run", "--model", "gpt-char:n_layer=1,n_embd=16,n_head=1,block_size=65536",
                                 "--dataset", "synthetic", "--batch-size", "2", "--iterations", "2", "--devices",
                                 "cpu:2", "-S", "2"], None),
        *_plugin_cases(),
    ]
    return cases


def _plugin_cases() -> list[tuple[str, list[str], str | None]]:
    """A user's data set or model factory whose products are wrong, through emulate, run and validate."""
    small = ["--batch-size", "8", "--iterations", "2", "-S", "2", "--schedule", "1f1b"]
    cmds = {"emulate": ["emulate", *small, "--quiet"], "run": ["run", *small, "--devices", "cpu:2"],
            "validate": ["validate", "--devices", "cpu:2", "--schedules", "1f1b", "--iterations", "4",
                         "--batch-size", "8", "--quiet", "--out", "validated"]}
    cases: list[tuple[str, list[str], str | None]] = []
    for cmd, argv in cmds.items():
        for data in DATA_SAYS:
            cases.append((f"{cmd} data {data}", [*argv, "--model", "lenet5", "--dataset", f"rel48plug:{data}"], None))
        for net in ("net_tuple", "net_none", "net_int"):
            cases.append((f"{cmd} model {net}", [*argv, "--model", f"rel48plug:{net}", "--dataset", "rel48plug:good"],
                          None))
    # wrong only at the run's batch size: refused at the block, in the emulator and in the ranks
    for cmd, net in itertools.product(("emulate", "run"), AT_RUN_TIME):
        cases.append((f"{cmd} model {net}", [*cmds[cmd], "--model", f"rel48plug:{net}", "--dataset",
                                              "rel48plug:good"], None))
    return cases


# what the one line of a refused plug-in case says (beyond naming the factory)
DATA_SAYS = {"labels_999": "labels up to class 999, but model lenet5 has 10 classes",
             "cifar_shaped": "inputs of shape (3, 32, 32), but model lenet5 reads (1, 28, 28)",
             "str_inputs": "train item 0's input is str", "raises": "reading train item 5 raised KeyError"}
MODEL_SAYS = {"net_tuple": "returned a tuple", "net_none": "returned None", "net_int": "returned a torch.int64 tensor",
              "net_lazy": "block 'block1' returned a tuple",
              "net_raises": "block 'block1' raised ValueError: my block takes pairs"}


def _says(name: str) -> list[str]:
    """The words a refused case's line must hold (none: any one line)."""
    kind, what = (name.split()[1:3] + ["", ""])[:2]
    if kind == "data" and what in DATA_SAYS:
        return [f"--dataset: rel48plug:{what}", DATA_SAYS[what]]
    if kind == "model" and what in MODEL_SAYS:
        return [f"--model: rel48plug:{what}: ", MODEL_SAYS[what]]
    if "timeout" in name:
        return ["--timeout"]
    if "block 65536" in name:
        return ["synthetic_size: 1,024 windows of block_size 65,536"]
    return []


def _run(argv: list[str], cwd: Path, limit: float) -> tuple[int | None, str, str]:
    try:
        p = subprocess.run([sys.executable, "-m", "stalesim", *argv], capture_output=True, text=True,
                           timeout=limit, cwd=cwd, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, "", ""
    return p.returncode, p.stdout, p.stderr


def _limit(name: str, argv: list[str], expect: str | None) -> float:
    trains = expect is not None or name.split()[-1] in AT_RUN_TIME
    return LIMIT_TRAIN_S if trains and argv[0] in ("emulate", "run") else LIMIT_S


def test_bad_inputs_end_in_one_line_or_a_correct_answer(tmp_path: Path) -> None:
    files = _files(tmp_path)
    cases = _cases(files)
    assert len(cases) >= 40
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda c: _run(c[1], tmp_path, _limit(*c)), cases))
    problems: list[Any] = []
    for (name, argv, expect), (rc, out, err) in zip(cases, results):
        lines = err.strip().splitlines()
        if rc is None:
            problems.append((name, f"no answer in {_limit(name, argv, expect)} s"))
        elif "Traceback" in err:
            problems.append((name, "traceback", err[-300:]))
        elif expect is None and not (rc == 2 and len(lines) == 1 and lines[0].startswith("stalesim: error: ")):
            problems.append((name, rc, err[-300:]))
        elif expect is None and not all(w in lines[0] for w in _says(name)):
            problems.append((name, "refused for another reason", lines[0][:300]))
        elif expect is not None and not (rc == 0 and expect in out):
            problems.append((name, rc, out[-300:], err[-300:]))
    assert problems == [], "\n".join(map(str, problems))
