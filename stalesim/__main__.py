"""``python -m stalesim`` is the same as the ``stalesim`` console script."""

import sys

from stalesim.cli.common import hold_standard_streams

hold_standard_streams()  # before anything opens a file: see its docstring

from stalesim.cli import main  # noqa: E402 - after the streams are held
from stalesim.plugins import user_exit  # noqa: E402


def _main() -> int:
    """:func:`stalesim.cli.main`, with a ``sys.exit()`` from the user's code (a model or data
    set that exits while it trains) reported as an error, not taken as the command's status."""
    try:
        return main()
    except SystemExit as exc:
        said = user_exit(exc)
        if said is None:
            raise
        print(f"stalesim: error: {said}", file=sys.stderr)
        return 2


raise SystemExit(_main())
