"""validate's loss.png says what it is: an exactness check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import stalesim.atomic as atomic
from stalesim.validate import figures


@pytest.mark.parametrize("n", [1, 3])
def test_loss_figure_is_titled_an_exactness_check(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, n: int) -> None:
    seen: dict[str, Any] = {}
    real = atomic.savefig_atomic

    def spy(fig: Any, path: Any, **kw: Any) -> Path:
        seen["title"] = fig.get_suptitle()
        return real(fig, path, **kw)

    monkeypatch.setattr(atomic, "savefig_atomic", spy)
    curves = {f"s{i}": ([2.3, 2.2, None], [2.3, 2.2, 2.1]) for i in range(n)}
    png = figures.loss_figure(curves, tmp_path / "loss.png")
    assert seen["title"].replace("\n", " ") == figures.LOSS_TITLE
    assert seen["title"].startswith("Exactness check") and "should coincide" in seen["title"].replace("\n", " ")
    assert png.read_bytes()[:4] == b"\x89PNG"
