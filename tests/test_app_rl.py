"""Issue 23: the RL page shows the best placement's step timeline by role, where roles sit, the baseline."""
from __future__ import annotations

import re

import pytest

from tests.app_helpers import new_app, ok

pytestmark = pytest.mark.filterwarnings("ignore")
PAGE = "ui/pages/rl.py"


def _rl_page(**values):
    at = ok(new_app().run())
    at.switch_page(PAGE)
    ok(at.run(timeout=120))
    for key, value in values.items():
        at.number_input(key=key).set_value(value)
    return ok(at.run(timeout=120))


def test_rl_page_shows_timeline_roles_and_baseline():
    at = _rl_page(**{"w.rl.prompts": 64})
    text = " ".join(m.value for m in at.markdown)
    assert "Colocated on h100 (the best GPU)" in text
    assert [m.label for m in at.metric] == ["Step time", "Samples / s", "Tokens / s", "Dollars / step"]
    assert any("rollout:" in c.value for c in at.code)
    assert at.get("plotly_chart")


def test_async_overlap_visible_on_the_timeline():
    at = _rl_page(**{"w.rl.prompts": 64})
    at.radio(key="w.rl.mode").set_value("async")
    ok(at.run(timeout=120))
    from ui.views.rl import _search, timeline_frame
    result = _search("rl/h100-l40s.yaml", "llama-3-8b", "grpo", 64, 8, 512, 2048, 2048, "async", True)
    apart = next(c for c in result.candidates if c.plan.overlapped)
    frame = timeline_frame(apart.estimate)
    gen = frame[frame.phase == "generation"].iloc[0]
    train = frame[frame.phase == "actor training"].iloc[0]
    assert train.start_s < gen.end_s           # training of step k-1 runs while step k generates


def test_the_rl_timeline_axis_says_how_its_ticks_read():
    """Browser walk: the axis read "seconds into the step" under ticks 00:30, 01:00, ... (minutes:seconds);
    past an hour, %M:%S would start again at 00:00."""
    import pandas as pd
    from ui.views.rl import timeline_chart
    for end_s, title, ticks in ((150.0, "time into the step (min:s)", "%M:%S"),
                                (4000.0, "time into the step (h:min:s)", "%H:%M:%S")):
        frame = pd.DataFrame([{"lane": "rollout GPUs", "phase": "generation", "role": "rollout", "start_s": 0.0,
                               "end_s": end_s, "seconds": end_s}])
        fig = timeline_chart(frame)
        assert (fig.layout.xaxis.title.text, fig.layout.xaxis.tickformat) == (title, ticks)


def test_the_rl_page_plans_on_the_composed_cluster_by_default_and_writes_counts_as_the_app_does():
    at = _rl_page(**{"w.rl.prompts": 64})
    box = at.selectbox(key="w.rl.cluster")
    assert box.value == "the cluster on Compose" and "h100-a100-v100-64" in box.help
    roles = "\n".join(c.value for c in at.code)
    assert "l40s" not in " ".join(at.dataframe[0].value["GPUs"])   # the example's pool: not on the composed cluster
    assert "× " in roles and not re.search(r"\b\d+x [a-z]", roles)   # "16× h100 tp1", as the app writes counts
    box.set_value("rl/h100-l40s.yaml")
    ok(at.run(timeout=120))
    assert "l40s" in " ".join(at.dataframe[0].value["GPUs"])
