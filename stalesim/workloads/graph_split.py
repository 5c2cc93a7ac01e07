"""A backward split into ``I`` (input gradients) and ``W`` (weight gradients), found on
autograd's own graph: the one mechanism behind the zero-bubble schedules' split backward in
the stage runtime (emulator and executor) and in the profiler's I/W timing.

Why the graph and not the modules: a module-level split (keep each parameter-owning
module's output, ask it for its parameters' gradients) assumes every parameter is used
inside its owner's own ``forward``, each module runs once and returns a tensor.
``nn.MultiheadAttention`` alone breaks all three: it returns a tuple and reads its
``out_proj`` weights without calling ``out_proj``; a patch embedding keeps its class token
and positions as parameters beside its conv; a block may be called twice.

The method (the same as ``torch.distributed.pipelining``'s ``stage_backward_input`` /
``stage_backward_weight``, written from the graph's definition): walk the backward graph
from the outputs. ``D`` is the set of nodes from which an input needing a gradient is
reachable: ``I`` runs exactly these (``torch.autograd.grad(outputs, inputs)``). For each
parameter, its *boundary* is the set of ``D`` nodes met first when walking from the
parameter towards the outputs: every path from an output to the parameter leaves ``D`` for
the last time at one of them. During ``I`` a pre-hook on each boundary node keeps the
gradient arriving there (its total: every consumer of a ``D`` node is in ``D``, so ``I``
runs them all). ``W`` restarts autograd at the boundary nodes with those gradients
(``GradientEdge`` outputs) and asks only for the parameters, which runs the
weight-gradient half of each boundary node (e.g. ``x^T g`` of a linear layer) and the
parameter side of the graph, nothing of ``I`` again. Parameters sharing a boundary node
are one group (one ``W`` call). Where a group's boundary nodes are linked through ``D``
(a parameter used at two depths, e.g. a module called twice) autograd would add the
deeper node's gradient twice, so each of that group's boundary nodes is clamped to its
kept gradient by a pre-hook during ``W`` (correct; the ``D`` nodes between them run
again). Output nodes outside ``D`` (no input needs a gradient, e.g. a first stage) are
boundary nodes too, with the output gradient as their kept gradient: ``W`` then does the
whole backward and ``I`` nothing.

Parameters that do not require a gradient are not asked for; parameters the graph does
not reach (an unused parameter) get ``None``, which the runtime's buffer treats as a zero
gradient (:func:`stalesim.runtime.stage_record.accumulate` adds nothing, ``grads()``
materialises zeros), so a split and an unsplit backward give the same update.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import torch
from torch.autograd.graph import GradientEdge, Node, get_gradient_edge


def _graph(roots: Sequence[Node]) -> tuple[list[Node], dict[Node, list[Node]]]:
    """The nodes reachable from ``roots`` (breadth-first, a deterministic order) and, per
    node, its consumers (the nodes with an edge to it)."""
    order: dict[Node, None] = {}
    consumers: dict[Node, list[Node]] = {}
    queue: deque[Node] = deque()
    for r in roots:
        if r not in order:
            order[r] = None
            consumers[r] = []
            queue.append(r)
    while queue:
        node = queue.popleft()
        for nxt, _ in node.next_functions:
            if nxt is None:
                continue
            if nxt not in order:
                order[nxt] = None
                consumers[nxt] = []
                queue.append(nxt)
            consumers[nxt].append(node)
    return list(order), consumers


def _upstream(starts: Sequence[Node], consumers: dict[Node, list[Node]],
              stop: set[Node] | dict[Node, int]) -> tuple[set[Node], list[Node]]:
    """Walk from ``starts`` towards the outputs; nodes in ``stop`` end a path. Returns the
    nodes walked and the ``stop`` nodes met (in the order met)."""
    seen: set[Node] = set(starts)
    met: dict[Node, None] = {}
    queue: deque[Node] = deque(starts)
    while queue:
        for c in consumers[queue.popleft()]:
            if c in stop:
                met[c] = None
            elif c not in seen:
                seen.add(c)
                queue.append(c)
    return seen, list(met)


def _slots(node: Node) -> int:
    """How many gradients ``node`` receives (one per output of its forward op)."""
    return len(node._input_metadata)


class GraphSplit:
    """The I/W split of one forward's graph.

    ``outputs`` and ``grad_outputs`` (None: ones, e.g. a scalar loss): where the backward
    starts; ``inputs``: the tensors ``I`` gives gradients for (those not requiring one get
    None); ``params``: the tensors ``W`` gives gradients for, in order (None where the
    graph does not reach one). Build it after the forward, before ``I``."""

    def __init__(self, outputs: Sequence[torch.Tensor], grad_outputs: Sequence[torch.Tensor | None],
                 inputs: Sequence[torch.Tensor], params: Sequence[torch.Tensor]) -> None:
        if len(outputs) != len(grad_outputs):
            raise ValueError("grad_outputs: one per output")
        self.outputs: list[torch.Tensor] = []
        self.grad_outputs: list[torch.Tensor] = []
        for o, g in zip(outputs, grad_outputs):
            if o.requires_grad:
                self.outputs.append(o)
                self.grad_outputs.append(torch.ones_like(o) if g is None else g)
        self.inputs = list(inputs)
        roots = [get_gradient_edge(o) for o in self.outputs]
        nodes, consumers = _graph([e.node for e in roots])
        known = set(nodes)
        wanted = [get_gradient_edge(t).node for t in self.inputs if t.requires_grad]
        in_d = _upstream([n for n in wanted if n in known], consumers, set())[0]
        # output nodes outside D start W's walk themselves, from the output gradients
        outer: dict[Node, list[torch.Tensor | None]] = {}
        for e, g in zip(roots, self.grad_outputs):
            if e.node not in in_d:
                slot = outer.setdefault(e.node, [None] * _slots(e.node))
                prev = slot[e.output_nr]
                slot[e.output_nr] = g if prev is None else prev + g
        stop = in_d | set(outer)
        rank = {n: i for i, n in enumerate(nodes)}
        # per parameter: its node in this graph and its boundary
        self._param_edges: list[GradientEdge | None] = []
        groups: list[tuple[list[int], set[Node]]] = []
        for i, p in enumerate(params):
            edge = get_gradient_edge(p) if p.requires_grad else None
            if edge is None or edge.node not in known:
                self._param_edges.append(None)  # unused by this graph
                continue
            self._param_edges.append(edge)
            start = [edge.node]
            bound = set(start) & stop or set(_upstream(start, consumers, stop)[1])
            # merge with every group sharing a boundary node (W runs a node once per call)
            joined = [grp for grp in groups if grp[1] & bound]
            members, nodes_of = [i], set(bound)
            for grp in joined:
                members += grp[0]
                nodes_of |= grp[1]
                groups.remove(grp)
            groups.append((sorted(members), nodes_of))
        self.groups: list[tuple[list[int], list[Node]]] = [
            (m, sorted(b, key=rank.__getitem__)) for m, b in groups]
        self.groups.sort(key=lambda g: g[0][0])
        # the boundary nodes, in graph order: I keeps each one's incoming gradients
        boundary = sorted({n for _, b in self.groups for n in b}, key=rank.__getitem__)
        self.boundary = boundary
        self.kept: dict[Node, list[torch.Tensor | None]] = {n: list(outer[n]) for n in boundary if n in outer}
        self._inner = [n for n in boundary if n not in outer]

    # ------------------------------------------------------------------ I
    def input_grads(self) -> list[torch.Tensor | None]:
        """``I``: the inputs' gradients (the graph kept for ``W``); the gradient arriving
        at each boundary node inside ``D`` is kept."""
        handles = [n.register_prehook(self._keeper(n)) for n in self._inner]
        try:
            want = [t for t in self.inputs if t.requires_grad]
            got = list(torch.autograd.grad(self.outputs, want, self.grad_outputs, retain_graph=True,
                                           allow_unused=True)) if want and self.outputs else []
        finally:
            for h in handles:
                h.remove()
        it = iter(got)
        return [next(it) if t.requires_grad else None for t in self.inputs]

    def _keeper(self, node: Node) -> Any:
        def hook(grads: tuple[torch.Tensor | None, ...]) -> None:
            self.kept[node] = list(grads)
        return hook

    # ------------------------------------------------------------- saved
    def saved(self) -> list[torch.Tensor | None]:
        """The gradients ``W`` reads, flat in boundary order (what a checkpoint stores)."""
        return [g for n in self.boundary for g in self.kept.get(n, [None] * _slots(n))]

    def restore(self, flat: Sequence[torch.Tensor | None]) -> None:
        """Install :meth:`saved`'s list on a rebuilt graph of the same forward (resume)."""
        need = sum(_slots(n) for n in self.boundary)
        if len(flat) != need:
            raise RuntimeError(f"stalesim: a deferred W keeps {len(flat)} gradients, its graph needs {need}")
        it = iter(flat)
        self.kept = {n: [next(it) for _ in range(_slots(n))] for n in self.boundary}

    # ------------------------------------------------------------------ W
    def weight_grads(self) -> list[torch.Tensor | None]:
        """``W``: every parameter's gradient (None where the graph does not reach it),
        from the boundary gradients ``I`` kept; one autograd call per group."""
        out: list[torch.Tensor | None] = [None] * len(self._param_edges)
        for members, bound in self.groups:
            starts: list[GradientEdge] = []
            grads: list[torch.Tensor] = []
            for n in bound:
                for k, g in enumerate(self.kept.get(n, ())):
                    if g is not None:
                        starts.append(GradientEdge(n, k))
                        grads.append(g)
            if not starts:
                continue  # no gradient reached this group: its parameters' gradients are zero
            clamps = [n.register_prehook(self._clamp(n)) for n in bound] if len(bound) > 1 else []
            try:
                edges = [e for e in (self._param_edges[i] for i in members) if e is not None]
                got = torch.autograd.grad(starts, edges, grads, retain_graph=True, allow_unused=True)
            finally:
                for h in clamps:
                    h.remove()
            for i, g in zip(members, got):
                out[i] = g
        return out

    def _clamp(self, node: Node) -> Any:
        kept = tuple(self.kept.get(node, ()))

        def hook(_grads: tuple[torch.Tensor | None, ...]) -> tuple[torch.Tensor | None, ...]:
            return kept
        return hook
