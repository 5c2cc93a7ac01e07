"""The demo's report from small fake step outputs: every table, the figures embedded."""

from __future__ import annotations

import base64
import re
from pathlib import Path

from stalesim.cli.demo_report import Section, write_report


def _png(path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1, 1))
    ax.plot([0, 1], [0, 1])
    fig.savefig(path)
    plt.close(fig)
    return path


def test_report_holds_every_table_and_embeds_the_figures(tmp_path: Path) -> None:
    (tmp_path / "validate" / "figures").mkdir(parents=True)
    pred = _png(tmp_path / "predict_speedup.png")
    loss = _png(tmp_path / "validate" / "figures" / "loss.png")
    sections = [Section("1. schedules", "schedule  policy\ngpipe     sync <flush>"),
                Section("4. prediction", "hardware  N  gpipe\nthis CPU  2  1.50x", (pred,)),
                Section("5. validation", "schedule  error\n1f1b      +3.1%", (loss, tmp_path / "absent.png"))]
    md, page = write_report(tmp_path, "stalesim demo", sections)
    text = page.read_text()
    for table in ("gpipe     sync &lt;flush&gt;", "this CPU  2  1.50x", "1f1b      +3.1%"):
        assert table in text  # escaped, in <pre>
    uris = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    assert [base64.b64decode(u) for u in uris] == [pred.read_bytes(), loss.read_bytes()]
    assert "http" not in text and "absent" not in text  # offline; a missing figure left out
    mtext = md.read_text()
    assert "## 5. validation" in mtext and "1f1b      +3.1%" in mtext and "sync <flush>" in mtext
    assert "![predict_speedup](predict_speedup.png)" in mtext
    assert "![loss](validate/figures/loss.png)" in mtext
    assert not list(tmp_path.glob("*.tmp*"))  # written atomically: no temporary left behind
