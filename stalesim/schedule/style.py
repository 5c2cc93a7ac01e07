"""One colour, marker and line style per schedule, for every figure that draws schedules.

Why a table here: figures drew schedules in matplotlib's default cycle, so the colour a
schedule got depended on the order it was drawn in, and with more than ten schedules
two of them shared a colour (gpipe and dualpipev did in the demo's prediction figure).
The style is keyed by the schedule's place in the registry, so it is the same in every
figure, and the colour is distinct for the first 20 registered schedules: the ten
colours of the Tableau palette (matplotlib's ``tab10``) and ten more, plus a marker per
registry index and, from the eleventh schedule on, a dashed line, so that a reader who
cannot tell two colours apart still has the shape. A name outside the registry (a user's plug-in) gets a style
derived from a checksum of its name: stable across runs, not guaranteed unique.

It lives beside the registry (the lowest layer) so that every drawing layer, the
emulator's study plot included, can import it.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # typing only: drawing is the caller's, this module needs no matplotlib
    from matplotlib.typing import LineStyleType

# matplotlib's tab10 (spelled out so this module needs no matplotlib import), then ten
# darker or stronger colours unlike any of tab10's (tab20's second half is tab10 lightened:
# too close to tell apart in a legend), for the eleventh schedule on
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
           "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
           "#800000", "#469990", "#000075", "#6a3d9a", "#f032e6",
           "#000000", "#e6ab02", "#b2df8a", "#fb9a99", "#808000")
# filled shapes that stay readable at 5-6 pt; the count is coprime with the palette's
# so colour and marker do not repeat together before 20 x 11 styles
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "p", "h")
LINESTYLES: tuple[LineStyleType, ...] = ("-", "--", "-.", ":")


class ScheduleStyle(NamedTuple):
    """Keyword arguments for ``Axes.plot``: ``ax.plot(x, y, **style._asdict())``."""

    color: str
    marker: str
    linestyle: LineStyleType


def style_at(index: int) -> ScheduleStyle:
    """The ``index``-th style: colour cycles every 20, marker every 11, and the line style
    changes every 10 (the second ten colours are drawn dashed as well)."""
    return ScheduleStyle(PALETTE[index % len(PALETTE)], MARKERS[index % len(MARKERS)],
                         LINESTYLES[(index // 10) % len(LINESTYLES)])


def schedule_style(name: str) -> ScheduleStyle:
    """The style of schedule ``name`` (its registry index; a checksum of the name otherwise)."""
    from stalesim.schedule import schedule_names

    names = schedule_names()
    index = names.index(name) if name in names else len(names) + zlib.crc32(name.encode()) % 97
    return style_at(index)


# The x-axis of every accuracy-vs-staleness figure, in words: the formula (max over stages
# of u - 1 - v_F) meant nothing to a reader who has not read the IR's docs
DEPTH_AXIS_LABEL = "staleness depth: updates the weights lag behind, deepest stage (0 = sequential)"
