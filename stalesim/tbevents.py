"""A TensorBoard writer whose event file TensorBoard reads after every file already in its folder.

TensorBoard reads a run folder's event files one after another in the text order of their
names (``tensorboard.backend.event_processing.directory_watcher.DirectoryWatcher``: the
paths are ``sorted()`` and a live reader only moves on to a name greater than the current
one; a file that appears with a smaller name is never read). While reading, a
``SessionLog.START`` event at step s (what ``SummaryWriter(purge_step=s)`` writes first)
drops every point already read at a step >= s (``EventAccumulator._CheckForRestartAndMaybePurge``).
So a writer that replaces or continues an earlier writer's curve is right only if its file
name sorts after the earlier file's.

The writer names its file ``events.out.tfevents.<whole seconds, 10 digits>.<host>.<pid>.<n>``
(``tensorboard.summary.writer.event_file_writer.EventFileWriter``; ``n`` counts the
writers this process opened). Within one second, names differ by pid and counter compared
as text, which is not their order of creation (``...<pid>.10`` sorts before ``...<pid>.9``,
and a later process can have a pid that sorts first). Across seconds, the fixed-width time
field decides. :func:`open_writer` therefore waits, when its folder already holds an event
file of the current second, until the next second starts (at most one second): its file's
time field is then greater than every existing one, whatever the pids and counters.

Known gap: a file whose time field lies more than :data:`MAX_WAIT_S` ahead of this clock
(another machine's clock, writing into a shared folder) is not waited for, and still sorts
after the new file.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

#: event file names as TensorBoard's writer makes them; group 1 is the time field
EVENT_FILE = re.compile(r"^events\.out\.tfevents\.(\d+)\.")

#: the longest wait for a later second; longer means an existing file's clock is ahead of ours
MAX_WAIT_S = 2.0


def newest_second(folder: Path) -> int | None:
    """The greatest time field among the event files in ``folder`` (None: no event file)."""
    if not folder.is_dir():
        return None
    seconds = [int(m.group(1)) for p in folder.iterdir() if (m := EVENT_FILE.match(p.name))]
    return max(seconds, default=None)


def wait_past(second: int | None) -> None:
    """Sleep until the clock's whole second is greater than ``second`` (not when that takes
    longer than :data:`MAX_WAIT_S`)."""
    if second is None:
        return
    left = second + 1 - time.time()
    if 0 < left <= MAX_WAIT_S:
        time.sleep(left)
        while int(time.time()) <= second:  # sleep may return a little early
            time.sleep(0.001)


def open_writer(folder: Path, purge_step: int | None = None) -> SummaryWriter:
    """A ``SummaryWriter`` into ``folder`` whose event file sorts after the folder's existing
    ones, so its ``purge_step`` (TensorBoard drops the points read before it from that step
    on) and its points are read last."""
    from torch.utils.tensorboard import SummaryWriter

    wait_past(newest_second(folder))
    return SummaryWriter(log_dir=str(folder), purge_step=purge_step)
