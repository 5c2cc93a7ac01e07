"""``python -m stalesim`` is the same as the ``stalesim`` console script."""

from stalesim.cli.common import hold_standard_streams

hold_standard_streams()  # before anything opens a file: see its docstring

from stalesim.cli import main  # noqa: E402 - after the streams are held

raise SystemExit(main())
