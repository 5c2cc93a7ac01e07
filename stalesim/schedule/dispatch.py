"""Engine dispatch: every engine that executes actions runs each kind through one method,
and the methods have the same names in every engine.

The emulator (:class:`stalesim.emulator.replay.Emulator`) and the executor
(:class:`stalesim.executor.rank.Rank`) both build their table once with :func:`dispatch_table`,
as DeepSpeed's pipeline engine maps each instruction type to one ``_exec_*`` method,
so a reader who knows one engine finds the same step in the other under the same
name, and an engine that lacks a kind's method fails when it is built, not when the
first action of that kind runs.
"""

from __future__ import annotations

from collections.abc import Callable

from stalesim.schedule.actions import Action, Kind

#: The method of each kind (every engine defines all of them; a kind that moves nothing
#: in an engine, e.g. a send inside the one-process emulator, has a method that does nothing).
EXEC_METHODS: dict[Kind, str] = {
    Kind.F: "_exec_forward",
    Kind.LOSS: "_exec_loss",
    Kind.B: "_exec_backward",
    Kind.I: "_exec_backward_input",
    Kind.W: "_exec_backward_weight",
    Kind.U: "_exec_update",
    Kind.SEND_F: "_exec_send_activation",
    Kind.RECV_F: "_exec_recv_activation",
    Kind.SEND_B: "_exec_send_grad",
    Kind.RECV_B: "_exec_recv_grad",
    Kind.AR: "_exec_allreduce_start",
    Kind.ARW: "_exec_allreduce_wait",
}

Handler = Callable[[Action], None]


def dispatch_table(engine: object) -> dict[Kind, Handler]:
    """Kind -> ``engine``'s bound method for it (subclass overrides included)."""
    missing = [name for name in EXEC_METHODS.values() if not callable(getattr(engine, name, None))]
    if missing:
        raise TypeError(f"{type(engine).__name__} lacks the action method(s) {', '.join(missing)}")
    return {k: getattr(engine, name) for k, name in EXEC_METHODS.items()}
