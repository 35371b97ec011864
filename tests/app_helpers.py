"""Shared set-up for the AppTest tests: a small, fast job, and the search to plan it with."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SMALL = {"preset": "single-node-8", "model": "gpt3-1.3b", "batch": "64", "seq": "2048"}
TIMEOUT_S = 60


def use_search(monkeypatch) -> None:
    """The real planner.search where it is installed, else the stand-in with its API."""
    try:
        from planner.search import search  # noqa: F401
    except ImportError:
        from tests import fake_search
        monkeypatch.setitem(sys.modules, "planner.search", fake_search)


def new_app(params: dict | None = None):
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT_S)
    for k, v in (params or {}).items():
        at.query_params[k] = v
    return at


def example_plan() -> dict:
    return json.loads((ROOT / "examples/plans/single-node-8-small.json").read_text())


def plan_that_no_longer_fits_state():
    """The app's state after a pool lost GPUs on Compose: single-node-8 with 2 GPUs per node, and the
    example plan on view, which uses all 8 GPUs of 2 pools."""
    import copy
    from ui.state import AppState, presets
    cluster = copy.deepcopy(presets()["single-node-8"])
    for pool in cluster["pools"]:
        pool["gpus_per_node"] = 2
    return AppState(cluster=cluster, model="gpt3-1.3b", global_batch=64, seq_len=2048, plan=example_plan())


def shown(markdown: str) -> str:
    """What a reader sees of Markdown text as far as `ui.markup.md` escapes it: backslash escapes
    resolved, the invisible word joiners dropped."""
    from ui.markup import WORD_JOINER
    return re.sub(r"\\(.)", r"\1", str(markdown)).replace(WORD_JOINER, "")


def texts(at) -> str:
    """Everything the page says in markdown, captions, alerts and metrics, as one string (as shown)."""
    parts = [e.value for kind in ("markdown", "caption", "error", "warning", "info", "success") for e in at.get(kind)]
    parts += [f"{m.label} {m.value}" for m in at.metric]
    return shown("\n".join(str(p) for p in parts))


@pytest.fixture(autouse=True)
def real_search_and_fresh_cache(monkeypatch):
    """Autouse in the modules that import it: the real search (or the stand-in), an empty cache."""
    use_search(monkeypatch)
    import streamlit as st
    st.cache_data.clear()
    st.cache_resource.clear()


def ok(at):
    """The AppTest run raised nothing; returns it for chaining."""
    assert not at.exception, [e.value for e in at.exception]
    return at


H100_2X8 = {"name": "h", "pools": [{"name": "h100", "gpu": "h100-sxm", "nodes": 2, "gpus_per_node": 8,
                                   "inter_node_gbps": 400}]}


def link_token(data: dict) -> dict:
    """A share link's query parameters for raw state data (as an older or hand-edited link holds it)."""
    import base64
    import json
    import zlib
    from ui.state import VERSION
    raw = json.dumps(data).encode()
    return {"v": VERSION, "s": base64.urlsafe_b64encode(zlib.compress(raw)).decode().rstrip("=")}


def sidebar_text(at) -> str:
    return shown("\n".join(m.value for m in at.sidebar.markdown))


def press_plan(at):
    at.sidebar.button(key="sidebar_plan").click().run()
    return ok(at)


def keyed(elements, name: str):
    """The widget among `elements` (e.g. `at.selectbox`) drawn with `ui.session.fresh_key(name)`,
    whatever the state's generation."""
    found = [e for e in elements if e.key == f"w.{name}" or str(e.key).startswith(f"w.{name}#")]
    assert len(found) == 1, [e.key for e in elements]
    return found[0]
