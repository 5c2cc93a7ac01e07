"""``python -m executor``: one rank of a distributed run.

- ``python -m executor --spec FILE``: started by the local launcher.
- ``torchrun --nnodes 2 --nproc-per-node 4 ... -m executor --model ... --schedule ...``:
  the same flags as ``stalesim run`` (without spawning: torchrun already did).
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 2 and argv[0] == "--spec":
        with open(argv[1]) as fh:
            spec = json.load(fh)
        from executor.worker import worker_main

        return worker_main(spec)
    from stalesim.cli.run_cmd import torchrun_main

    return torchrun_main(argv)


if __name__ == "__main__":
    sys.exit(main())
