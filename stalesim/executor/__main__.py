"""``python -m stalesim.executor --spec FILE``: one rank of a local run (started by the launcher).

Under torchrun the entry point is the CLI itself: ``torchrun ... -m stalesim run
FLAGS`` (the run command sees torchrun's environment and acts as one rank).
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 2 and argv[0] == "--spec":
        with open(argv[1]) as fh:
            spec = json.load(fh)
        from stalesim.executor.worker import worker_main

        return worker_main(spec)
    print("stalesim: error: `python -m stalesim.executor FLAGS` is now `torchrun ... -m stalesim run FLAGS` "
          "(python -m stalesim.executor only takes --spec FILE from the local launcher)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
