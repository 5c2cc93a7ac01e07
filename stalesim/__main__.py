"""``python -m stalesim`` is the same as the ``stalesim`` console script."""

from stalesim.cli import main

raise SystemExit(main())
