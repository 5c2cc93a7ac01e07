"""Re-run the probe of bad inputs (docs/failure.md) against the real CLI, each case in a fresh process.

    python -m lab.checks.probe_inputs              # every case (about 3 min on 2 quiet cores)
    python -m lab.checks.probe_inputs 0 5 17       # only these cases (numbers as printed)

Each case is ``python -m stalesim ARGS`` with a 60 s limit. An ``err`` case passes when it
exits 2 with a ``stalesim: error:`` line and no traceback; an ``ok`` case (large but valid
input, or a flag that is used rather than dropped) when it exits 0 with no traceback. The
fixtures (profiles of 5, 10^4 and 10^6 layers, broken JSON, hardware, corrupt data folders,
a FIFO, ...) are built in a temporary folder, with a private data cache; with
``$STALESIM_DATA`` holding MNIST the cache is first filled from it, so the corrupt-folder
cases also check that a warm cache does not mask a broken ``--data-dir``. Exit status 0
only if every case passes. The same items are regression tests in ``tests/`` and
``tests/integration/test_cli_fuzz.py`` fuzzes every flag.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from stalesim.atomic import atomic_open
from stalesim.runtime.datapaths import pin_data_env

LIMIT_S = 60
MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
               "t10k-labels-idx1-ubyte")


def cases(W: str) -> list[tuple[str, str]]:
    """(expected outcome, arguments) per probe item; ``W``: the fixtures folder."""
    PROF = f"{W}/p.json"
    E = "--model lenet5 --dataset synthetic --iterations 2 --batch-size 8 --quiet"
    R = E.replace(" --quiet", "")
    M = "--model lenet5 --dataset mnist --iterations 1 --batch-size 8 --schedule sequential --quiet"
    return [
        # hangs on large input
        ("err", "schedule stale -S 1000000"),
        ("err", "schedule gpipe -N 1000000"),
        ("err", "schedule gpipe -M 1000000"),
        ("err", "schedule dp -P 1000000"),
        ("err", f"emulate {E} --schedule stale -S 1000000 --out {W}/o_em1"),
        ("err", f"simulate --profile {PROF} --schedule gpipe -S 2 -N 1000000"),
        ("err", f"partition --profile {W}/big6.json --stages 4"),
        ("ok", f"partition --profile {W}/big4.json --stages 100"),
        ("err", f"partition --profile {W}/big6min.json --stages 4"),
        ("err", f"demo --schedules nosuch --out {W}/o_demo1 --quick"),
        # tracebacks
        ("err", f"simulate --profile {W}/huge_t.json --schedule gpipe -S 2"),
        ("err", f"partition --profile {W}/huge_t.json --stages 2"),
        ("err", f"simulate --profile {PROF} --schedule gpipe -S 2 --loss-time nan"),
        ("err", f"simulate --profile {PROF} --schedule gpipe -S 2 --plot {W}/file.txt"),
        ("err", f"emulate {E} --schedule stale -S 2 --out {W}/p.json"),
        ("err", f"run {R} --schedule gpipe -S 2 --devices cpu:2 --master-addr no.such.host.invalid --out {W}/o_run1"),
        ("err", f"validate --hardware {W}/hw_trunc.json --devices cpu:2 --out {W}/o_val1 --quiet"),
        ("err", f"emulate {M} --data-dir {W}/data_corrupt --out {W}/o_em2"),
        ("err", f"emulate {M} --data-dir {W}/data_trunc --out {W}/o_em3"),
        ("err", f"emulate {M} --data-dir {W}/data_emptyfiles --out {W}/o_em4"),
        ("err", f"emulate {M} --data-dir {W}/data_empty --out {W}/o_em5"),
        # wrong successes
        ("err", "schedule gpipe -S 2 -P 2"),
        ("ok", f"simulate --profile {PROF} --schedule gpipe -S 2 -P 2"),  # P = pipeline replicas (used, printed)
        ("err", f"sweep --profile {PROF} --schedules '' -S 2"),
        ("err", f"sweep --profile {PROF} --schedules nosuch -S 2"),
        ("err", f"sweep --profile {PROF} --schedules gpipe -S 100"),
        ("err", f"demo --iterations -1 --out {W}/o_demo2"),
        ("err", f"figures --only '' --out {W}/o_fig"),
        ("err", f"partition --profile {PROF} --ppv 1,,2"),
        ("err", f"simulate --profile {PROF} --schedule gpipe -S 2 --hardware {W}/hw_trunc.json"),
        ("err", f"partition --profile {PROF} --stages 2 --include-comm --hardware {W}/hw_trunc.json"),
        ("err", f"simulate --profile {W}/bad_dtype.json --schedule gpipe -S 2"),
        ("err", f"simulate --profile {W}/bad_device.json --schedule gpipe -S 2"),
        # output paths (the atomic writer; a FIFO and a directory as targets)
        ("err", f"simulate --profile {PROF} --schedule gpipe -S 2 --trace {W}/fifo"),
        ("err", f"simulate --profile {PROF} --schedule gpipe -S 2 --trace {W}"),
        ("ok", f"simulate --profile {PROF} --schedule gpipe -S 2 --trace {W}/no/such/t.json"),  # parents are made
        ("err", f"sweep --profile {PROF} --schedules gpipe -S 2 --csv {W}/fifo"),
        ("err", f"profile --model lenet5 --batch-size 8 --repeats 1 -o {W}/fifo"),
        # cases added after the first probe list
        ("err", f"emulate {E} --schedule stale -S 2 --lr nan --out {W}/o_n1"),
        ("err", f"emulate {E} --schedule stale -S 2 --momentum inf --out {W}/o_n2"),
        ("err", f"emulate {E} --schedule stale -S 0 --out {W}/o_n3"),
        ("err", f"emulate {E} --schedule stale -S 2 --batch-size 0 --out {W}/o_n4"),
        ("err", f"emulate {E} --schedule stale -S 2 --synthetic-size 1000000000000 --out {W}/o_n5"),
        ("err", f"emulate {E} --schedule stale -S 2 --checkpoint-every -1 --out {W}/o_n6"),
        ("err", f"emulate {E} --schedule stale -S 2 --resume --out {W}/o_n7_none"),
        ("err", f"emulate {E} --schedule stale -S 2 --ppv 1,,2 --out {W}/o_n8"),
        ("err", f"emulate {E} --schedule hybrid -S 2 --switch 1000000000 --out {W}/o_n9"),
        ("err", f"emulate {E} --schedule stale -S 2 --seed -1 --out {W}/o_n10"),
        ("err", f"study {E} --schedules stale -S 2 --seeds '' --out {W}/o_n11"),
        ("err", f"study {E} --schedules stale -S 2 --jobs 100000 --out {W}/o_n12"),
        ("err", f"run {R} --schedule gpipe -S 2 --devices cpu:100000 --out {W}/o_n13"),
        ("err", f"run {R} --schedule gpipe -S 2 --devices cpu:2 --timeout nan --out {W}/o_n14"),
        ("err", f"validate --devices cpu:2 --iterations 1000000000 --out {W}/o_n15 --quiet"),
        ("err", f"validate --devices cpu:2 --threads 0 --out {W}/o_n16 --quiet"),
        ("err", f"calibrate --ranks 100000 -o {W}/o_hw.json"),
        ("err", f"calibrate --sizes 1e30 -o {W}/o_hw.json"),
        ("err", f"calibrate --repeats 0 -o {W}/o_hw.json"),
        ("err", f"profile --model lenet5 --batch-size 1000000000 -o {W}/o_p.json"),
        ("err", f"profile --model lenet5 --batch-size 8 --threads 0 -o {W}/o_p.json"),
        ("err", f"profile --model nosuch --batch-size 8 -o {W}/o_p.json"),
        ("err", f"profile --roofline h100-sxm --from {W}/nosuch.json -o {W}/o_p.json"),
        ("err", f"profile --roofline h100-sxm --from {W}/huge_t.json -o {W}/o_p.json"),
        ("err", f"partition --profile {PROF} --stages 2 --memory-limit -1"),
        ("err", f"partition --profile {PROF} --stages 2 --include-comm --bandwidth 1e-308"),
        ("err", f"partition --profile {PROF} --stages 0"),
        ("err", f"partition --profile {W}/trunc.json --stages 2"),
        ("err", f"simulate --profile {PROF} --schedule dp -P 2 --bucket-mb 0"),
        ("ok", f"simulate --profile {PROF} --schedule dp -P 2 --bucket-mb 0.000001"),  # dp: closed form
        ("err", f"simulate --profile {PROF} --schedule gpipe -S 2 -P 2 --bucket-mb 0.000001"),
        ("err", f"simulate --profile {PROF} --schedule gpipe -S 2 --node-size 1000000000"),
        ("err", f"simulate --profile {PROF} --schedule gpipe -S 2 --cpu-comm-occupancy 2"),
        ("err", f"simulate --profile {PROF} --schedule gpipe -S 2 -B 0"),
        ("err", f"simulate --profile {PROF} --schedule gpipe -S 2 --fold 0"),
        ("err", f"simulate --profile {PROF} --schedule stale -S 4 --warmup 1000000000"),
        ("err", f"simulate --profile {PROF} --schedule gpipe -S 2 --target nosuch"),
        ("err", f"simulate --profile {W}/nosuch.json --schedule gpipe -S 2"),
        ("err", f"simulate --profile {W} --schedule gpipe -S 2"),
        ("err", "simulate --profile /dev/zero --schedule gpipe -S 2"),
        ("err", f"simulate --profile {W}/fifo --schedule gpipe -S 2"),
        ("err", f"sweep --profile {PROF} --schedules gpipe -S 2 -j 100000"),
        ("err", f"sweep --profile {PROF} --schedules gpipe -S 2,3,4,5,6,7,8 -M 1,2,3,4,5,6,7,8,9,10,11,12 "
                "-P 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 --targets h100-sxm,h200,a100-80gb-sxm "
                "--links nvlink4,ib-ndr,pcie4-x16,10gbe --ppv-candidates 1 2 3 4 -N 100000"),
        ("err", f"figures --only nosuch --out {W}/o_fig2"),
        ("err", f"demo --stages 100 --out {W}/o_demo3 --quick"),
        ("err", f"demo --devices cpu:0 --out {W}/o_demo4 --quick"),
        ("err", "schedule nosuch"),
        ("ok", "schedule stale -S 4 --fold 3"),  # 4 stages on 3 devices, contiguously
        ("err", "schedule --json stale -S -1"),
        # the language model (main's lm merge)
        ("err", f"emulate {E} --model gpt-char:n_layer=1000000 --out {W}/o_g1"),
        ("err", f"emulate {E} --model gpt-char --dataset mnist --out {W}/o_g2"),
        ("err", f"emulate {E} --model gpt-char -S 7 --schedule stale --out {W}/o_g3"),
        ("err", f"emulate {E} --model gpt-char --eps nan --out {W}/o_g4"),
        ("err", f"emulate {E} --model gpt-char --betas nan,0.9 --out {W}/o_g5"),
        ("err", f"emulate {E} --model gpt-char --lr-warmup 10000000000 --out {W}/o_g6"),
        ("err", f"emulate {E} --model gpt-char --clip-grad-norm inf --out {W}/o_g7"),
        ("err", f"emulate {E} --model gpt-char --eval-windows 0 --out {W}/o_g8"),
        ("err", f"emulate {E} --model gpt-char --optimizer adam --error-feedback "
                f"--error-feedback-beta 1e300 --out {W}/o_g9"),
        ("err", f"emulate {E} --model gpt-char --dataset shakespeare --data-dir {W}/data_empty --out {W}/o_g10"),
        ("err", f"profile --model gpt-char:n_layer=1000000 --batch-size 4 -o {W}/o_pg.json"),
        ("err", f"profile --model gpt-char --batch-size 1000000000 -o {W}/o_pg.json"),
        ("err", f"run {R} --model gpt-char:n_embd=7,n_head=2 --devices cpu:2 --schedule gpipe -S 2 --out {W}/o_g11"),
        ("err", f"emulate {E} --model gpt-char --dataset shakespeare --data-dir {W}/sh_empty --out {W}/o_s1"),
        ("err", f"emulate {E} --model gpt-char --dataset shakespeare --data-dir {W}/sh_trunc --out {W}/o_s2"),
        ("err", f"emulate {E} --model gpt-char --dataset shakespeare --data-dir {W}/sh_garbage --out {W}/o_s3"),
        ("err", f"emulate {E} --model gpt-char --dataset shakespeare --data-dir {W}/sh_binary --out {W}/o_s4"),
        ("err", f"emulate {E} --model gpt-char --dataset shakespeare --data-dir {W}/sh_tiny --out {W}/o_s5"),
        # torch.distributed.pipelining interop and virtual stages (main's sched merge)
        ("err", "schedule --from-torch GPipe --ranks 1000000 -M 4"),
        ("err", "schedule --from-torch Interleaved1F1B --ranks 4 -M 8 --stages-per-rank 1000000"),
        ("err", "schedule --from-torch GPipe --ranks 2 -M 2 -N 1000000"),
        ("err", f"schedule --from-torch-csv {W}/csv_bigstage.csv"),
        ("err", f"schedule --from-torch-csv {W}/csv_bin.csv"),
        ("err", f"schedule --from-torch-csv {W}/fifo"),
        ("err", "schedule --from-torch-csv /dev/zero"),
        ("err", f"schedule --from-torch-csv {W}/csv_ok.csv -N 1000000"),
        ("err", f"schedule interleaved-1f1b -S 8 -M 8 --to-torch-csv {W}/fifo"),
        ("err", f"simulate --profile {PROF} --schedule interleaved-1f1b -S 4 -V 2 -M 1000000"),
        ("err", f"emulate {E} --schedule zb-v -S 4 -M 4 --iterations 1000000 --out {W}/o_v2"),
        ("ok", "schedule --from-torch ZBVZeroBubble --ranks 16 -M 64"),
        ("ok", f"schedule --from-torch-csv {W}/csv_ok.csv -N 3"),
        # reliability, third round: one writer per folder, bounded checkpoints and inputs,
        # write faults, memory preflight, environment, strict torch interop ("sh:" cases are
        # shell lines in which %STALESIM% is the command)
        ("err", f"sh:%STALESIM% study {E} --iterations 300 --schedules stale --placements S2 --seeds 0 "
                f"--out {W}/o_lock >/dev/null 2>&1 & until [ -s {W}/o_lock/.stalesim.lock ]; do sleep 0.2; done; "
                f"%STALESIM% study {E} --schedules stale --placements S2 --seeds 1 --batched --out {W}/o_lock; "
                "r=$?; wait; exit $r"),
        ("err", f"emulate {E} --schedule stale -S 2 --resume --out {W}/ck_deep"),
        ("err", f"emulate {E} --schedule stale -S 2 --resume --out {W}/ck_ints"),
        ("err", f"emulate {E} --schedule stale -S 2 --resume --out {W}/ck_cycle"),
        ("err", f"study {E} --schedules stale --placements S2 --seeds 0,1 --batched --resume --out {W}/st_deep"),
        ("err", f"sh:ulimit -f 200; %STALESIM% emulate {E} --schedule stale -S 2 --checkpoint-every 1 "
                f"--out {W}/o_fsize"),
        ("err", "schedule stale -S 2 -N 3 > /dev/full"),
        ("err", f"emulate {E} --schedule stale -S 2 --json > /dev/full"),
        ("err", f"validate --devices cpu:2 --iterations 4 --out {W}/val_subfile --quiet"),
        ("err", f"emulate {E} --model gpt-char --dataset shakespeare --data-dir {W}/sh_bomb --out {W}/o_b1"),
        ("err", f"emulate {E} --model gpt-char:n_layer=1,n_embd=64,n_head=1,block_size=65536 --batch-size 128 "
                f"--synthetic-size 4 --out {W}/o_m1"),
        ("err", f"emulate {E} --model gpt-char:n_layer=1024,n_embd=576,n_head=8,block_size=16 --optimizer adam "
                f"--out {W}/o_m2"),
        ("err", f"emulate {E} --model gpt-char:block_size=65536 --synthetic-size 100000 --batch-size 1 "
                f"--out {W}/o_m3"),
        ("err", f"study {E} --model gpt-char:n_layer=1,n_embd=64,n_head=1,block_size=65536 --batch-size 128 "
                f"--synthetic-size 4 --schedules stale --placements S2 --seeds 0,1 --batched --out {W}/o_m4"),
        ("err", f"run {R} --model gpt-char:n_layer=1,n_embd=64,n_head=1,block_size=65536 --batch-size 128 "
                f"--synthetic-size 4 --schedule gpipe -S 2 --devices cpu:2 --out {W}/o_m5"),
        ("err", f"profile --model gpt-char:n_layer=1,n_embd=64,n_head=1,block_size=65536 --batch-size 128 "
                f"-o {W}/o_m6.json"),
        ("err", f"validate --model vgg16 --devices cpu:2 --batch-size 1048576 --out {W}/o_m7 --quiet"),
        # no home folder: the cache falls back to a private temporary folder (downloads are off here)
        ("err", f"sh:env -u STALESIM_CACHE -u STALESIM_DATA HOME={W}/nonexistent %STALESIM% emulate {M} "
                f"--out {W}/o_h1"),
        ("ok", f"sh:env -u STALESIM_CACHE -u HOME %STALESIM% emulate {E} --schedule stale -S 2 --out {W}/o_h2"),
        ("ok", f"sh:env -u STALESIM_CACHE HOME={W}/nonexistent %STALESIM% emulate {E} --schedule stale -S 2 "
               f"--out {W}/o_h3"),
        ("err", f"schedule --from-torch-csv {W}/csv_junk.csv"),
        ("err", f"schedule --from-torch-csv {W}/csv_semi.csv"),
        ("err", "schedule 1f1b -S 2 -M 2 --to-torch-csv ''"),
        ("err", "schedule --from-torch PipelineScheduleMulti --ranks 2 -M 2"),
        ("err", "schedule --from-torch PipelineScheduleSingle --ranks 2 -M 2"),
        # valid and fast
        ("ok", "schedule stale -S 8 -N 16"),
        ("ok", f"simulate --profile {PROF} --schedule gpipe -S 2 -N 1000 -M 4"),
    ]


def _layer(i: int, forward_s: float = 1e-3) -> dict:
    return {"name": f"l{i}", "forward_s": forward_s, "backward_s": 2e-3, "update_s": 1e-4,
            "param_bytes": 4096, "output_bytes": 1024, "saved_bytes": 2048, "flops": 10**6}


def make_fixtures(W: Path) -> None:
    """Every input file the cases name, in ``W``."""
    prof: dict[str, Any] = {"schema_version": 1, "model": "lenet5", "device": "cpu", "dtype": "float32",
                            "batch_size": 64, "threads": 1, "layers": [_layer(i, 1e-3 * (i + 1)) for i in range(5)]}

    def put(name: str, doc: object) -> None:
        (W / name).write_text(json.dumps(doc))

    put("p.json", prof)
    put("big4.json", {**prof, "layers": [_layer(i, 1e-3 * (1 + i % 7)) for i in range(10_000)]})
    with atomic_open(W / "big6min.json", "w") as fh:  # 10^6 layers, ~160 MB: under the size limit
        fh.write(json.dumps({**prof, "layers": []})[:-2])
        fh.write(",".join(json.dumps(_layer(i)) for i in range(10**6)))
        fh.write("]}")
    with atomic_open(W / "big6.json", "wb") as big:  # larger than any document the tool reads (sparse)
        big.truncate(300 << 20)
    put("huge_t.json", {**prof, "layers": [_layer(0, 1e300), *prof["layers"][1:]]})
    put("bad_dtype.json", {**prof, "dtype": "float7"})
    put("bad_device.json", {**prof, "device": "tpu9"})
    (W / "trunc.json").write_text(json.dumps(prof)[:100])
    hw = json.dumps({"schema_version": 1, "device": "h100-sxm", "link": "nvlink4"})
    (W / "hw.json").write_text(hw)
    (W / "hw_trunc.json").write_text(hw[:30])
    for name, data in (("data_corrupt", b"garbage"), ("data_trunc", os.urandom(1000)), ("data_emptyfiles", b"")):
        raw = W / name / "MNIST" / "raw"
        raw.mkdir(parents=True)
        for f in MNIST_FILES:
            (raw / f"{f}.gz").write_bytes(data)
    (W / "data_empty").mkdir()
    text = gzip.compress(b"To be, or not to be, that is the question.\n" * 2000)
    tiny = gzip.compress(b"to be")
    for name, data in (("sh_trunc", text[:len(text) // 2]), ("sh_empty", b""), ("sh_garbage", b"garbage"),
                       ("sh_binary", gzip.compress(bytes(range(256)) * 10)), ("sh_tiny", tiny)):
        (W / name / "shakespeare").mkdir(parents=True)
        (W / name / "shakespeare" / "shakespeare_complete.txt.gz").write_bytes(data)
    (W / "csv_bigstage.csv").write_text("0F0,0B0,999999999F0\n")
    (W / "csv_bin.csv").write_bytes(b"0F0,\xd0\xff\n")
    (W / "csv_ok.csv").write_text("0F0,0B0\n")
    os.mkfifo(W / "fifo")
    (W / "file.txt").write_text("")
    (W / "csv_junk.csv").write_text("0F0junk,0B0\n")
    (W / "csv_semi.csv").write_text("0F0,1F0;0B0\n")
    (W / "val_subfile").mkdir()
    (W / "val_subfile" / "traces").write_text("a file where validate writes a folder")
    with gzip.open(W / "sh_bomb.gz", "wb", compresslevel=1) as bomb:  # ~1 MiB unpacking to 1.1 GiB
        zeros = b"a" * (64 << 20)
        for _ in range(18):
            bomb.write(zeros)
    (W / "sh_bomb" / "shakespeare").mkdir(parents=True)
    (W / "sh_bomb.gz").rename(W / "sh_bomb" / "shakespeare" / "shakespeare_complete.txt.gz")
    _hostile_checkpoints(W)


def _torch_zip(path: Path, pkl: bytes) -> None:
    """A file laid out as torch.save writes it, holding the pickle ``pkl`` (no tensors)."""
    import zipfile

    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/version", "3\n")


def _hostile_checkpoints(W: Path) -> None:
    """Plain data that is still hostile: 10^6 nested lists, 60 MB of small ints, a cycle."""
    import pickle

    deep = b"\x80\x02}X\x06\x00\x00\x00format" + b"]" * 10**6 + b"a" * (10**6 - 1) + b"s."
    _torch_zip(W / "ck_deep" / "checkpoint.pt", deep)
    _torch_zip(W / "st_deep" / "batches" / "b00_stale_S2" / "checkpoint.pt", deep)
    _torch_zip(W / "ck_ints" / "checkpoint.pt",
               pickle.dumps({"format": 1, "a": [i % 100 for i in range(30 * 10**6)]}, protocol=2))
    _torch_zip(W / "ck_cycle" / "checkpoint.pt", b"\x80\x02}X\x06\x00\x00\x00format]q\x01h\x01as.")


def run_case(i: int, want: str, args: str, W: Path, env: dict) -> bool:
    t0 = time.monotonic()
    rc: int | str
    me = f"{sys.executable} -m stalesim"
    line = args[3:].replace("%STALESIM%", me) if args.startswith("sh:") else f"{me} {args}"
    try:
        p = subprocess.run(line, shell=True, capture_output=True, text=True, timeout=LIMIT_S, cwd=W, env=env,
                           executable="/bin/bash")
        rc, err = p.returncode, p.stderr
    except subprocess.TimeoutExpired:
        rc, err = "TIMEOUT", ""
    dt = time.monotonic() - t0
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    if want == "err":
        good = rc == 2 and "Traceback" not in err and any(ln.startswith("stalesim: error:") for ln in lines)
    else:
        good = rc == 0 and "Traceback" not in err
    last = lines[-1][:160] if lines else ""
    print(f"{i:3d} {'PASS' if good else 'FAIL'} rc={rc} {dt:5.1f}s [{want}] {args[:100]}\n        {last}",
          flush=True)
    return good


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m lab.checks.probe_inputs", description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", type=int, help="only these case numbers (as printed); default: all")
    only = set(ap.parse_args(argv).cases)
    root = Path(__file__).resolve().parents[2]  # the folder holding the `stalesim` package
    with tempfile.TemporaryDirectory(prefix="stalesim-probe-") as tmp:
        W = Path(tmp)
        make_fixtures(W)
        data = pin_data_env()  # absolute: the cases run in W
        env = {**os.environ, "STALESIM_CACHE": str(W / "cache"), "STALESIM_NO_DOWNLOAD": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
        if data and (Path(data) / "MNIST" / "raw").is_dir():  # warm the private cache from good data
            warm = (f"emulate --model lenet5 --dataset mnist --data-dir {data} --iterations 1 --batch-size 8 "
                    f"--schedule sequential --quiet --out {W}/o_warm")
            run_case(-1, "ok", warm, W, env)
        todo = cases(str(W))
        picked = [(i, c) for i, c in enumerate(todo) if not only or i in only]
        passed = sum(run_case(i, want, args, W, env) for i, (want, args) in picked)
    print(f"{passed} of {len(picked)} cases pass, {len(picked) - passed} fail")
    return 0 if passed == len(picked) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
