"""User-facing errors.

Anything a user can get wrong (a flag, a JSON field, a schedule parameter)
raises :class:`StalesimError` with a one-line message that names the bad field
or value. The CLI turns it into ``stalesim: error: ...`` and exit status 2,
never a traceback. Library callers can catch it like any ``ValueError``.
"""

from __future__ import annotations


class StalesimError(ValueError):
    """A problem with the user's input, reported in one line (CLI exit status 2)."""


class ScheduleError(StalesimError):
    """A schedule that cannot be built, is malformed, or deadlocks."""
