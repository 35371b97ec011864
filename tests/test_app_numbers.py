"""Issue 20: numbers written one way on every page (ui.numbers): every page of the app, rendered after a
plan, is scanned for the forms the app used to mix in: "2048" beside "2,048", "131k" beside "131,369",
"1.00 s" beside "0.998 s" and "998 ms", "1.06x" beside "1.06×", "1 pools", raw floats in tables."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.app_helpers import SMALL, new_app, ok, press_plan, shown, texts

pytestmark = pytest.mark.filterwarnings("ignore")

PAGES = sorted(p.stem for p in (Path(__file__).resolve().parent.parent / "ui" / "pages").glob("*.py")
               if p.stem != "__init__")
NOUNS = ("pools|GPUs|stages|nodes|replicas|engines|jobs|layers|workers|micro-batches|passes|seconds|hosts|"
         "sequences|plans|candidates|searches|epochs|tokens|samples")

# what each old form looks like, and an example of it the pattern must catch (the new form must not match)
OLD_FORMS = {
    "a whole number of 4 or more digits without thousands separators":
        (r"(?<!RTX )(?<![\w.,\-/#@:=&+'])\d{4,}(?![\w.,:%/\-'])", "layers × hidden 24 × 2048", "24 × 2,048"),
    "a count of one with a plural noun":
        (rf"(?<![\d.,])\b1 (?:{NOUNS})\b", "1 pools", "1 pool"),
    "a compact figure (k, M)":
        (r"(?<![\w.])\$?\d[\d.,]*[kM]\b", "tokens / s 131k", "tokens / s 131,369"),
    "a ratio written with an x":
        (r"\d\.\d+x\b", "the best placement is 1.06x its samples", "1.06×"),
    "a count of GPUs or replicas written with an x (the CLI's form)":
        (r"\b\d[\d,]*x [a-z]", "stage 0: 4x a100 tp2", "stage 0: 4× a100 tp2"),
    "a percentage with two decimals from 1% up":
        (r"(?<![\d.])[1-9]\d*\.\d{2,}%", "MFU 62.53%", "MFU 62.5%"),
    "GiB with two decimals":
        (r"\d\.\d{2,} GiB", "1.89 GiB", "1.9 GiB"),
    "a raw float (four decimals or more)":
        (r"(?<![\d$.])\d+\.\d{4,}(?!\d)", "16.480017", "16.5"),
    "a duration under a second written in seconds":
        (r"(?<![\d.,])0\.\d+ s\b", "iteration 0.998 s", "iteration 998 ms"),
    "dollars with one decimal":
        (r"\$\d[\d,]*\.\d(?!\d)", "$4.4 per step", "$4.41 per step"),
}


def test_each_old_form_is_caught_and_the_new_one_is_not():
    for name, (pattern, old, new) in OLD_FORMS.items():
        assert re.search(pattern, old), name
        assert not re.search(pattern, new), name


def _printf(fmt: str, value) -> str:
    """A NumberColumn's printf format ("%,d", "%.1f", "%,.1f") as Streamlit's grid applies it."""
    m = re.fullmatch(r"([^%]*)%(,?)(\.\d+)?([dfi])(.*)", fmt)
    assert m, f"a format this test does not read: {fmt}"
    kind = "d" if m.group(4) in "di" else "f"
    number = round(value) if kind == "d" else value
    return f"{m.group(1)}{number:{m.group(2)}{m.group(3) or ''}{kind}}{m.group(5)}".replace("%%", "%")


def table_text(element) -> str:
    """A read-only table as the page shows it: numeric columns through their column_config format, the
    others (and numbers without a format, which Streamlit may show ungrouped) as their values."""
    config = json.loads(element.proto.columns or "{}")
    df = element.value
    cells = []
    for col in df.columns:
        fmt = config.get(str(col), {}).get("type_config", {}).get("format")
        for v in df[col]:
            if v is None or (isinstance(v, float) and v != v):
                continue
            if fmt and isinstance(v, (int, float)) and not isinstance(v, bool):
                cells.append(_printf(fmt, v))
            else:
                cells.append(str(v))
    return " | ".join(cells)


@pytest.fixture(scope="module")
def rendered():
    """Every page's text and read-only tables after planning the small job."""
    from tests.app_helpers import use_search
    import streamlit as st
    mp = pytest.MonkeyPatch()
    use_search(mp)
    st.cache_data.clear()
    at = ok(new_app(SMALL).run())
    press_plan(at)
    out = {}
    for page in PAGES:
        at.switch_page(f"ui/pages/{page}.py").run(timeout=300)
        ok(at)
        tables = [table_text(d) for d in at.dataframe if not d.proto.editing_mode]
        out[page, "None"] = none_cells(at.dataframe)
        out[page] = texts(at) + "\n" + "\n".join(tables) + "\n" + shown("\n".join(str(s.value) for s in at.subheader))
    mp.undo()
    return out


def none_cells(frames) -> list[str]:
    """Columns of text whose empty cells Streamlit would show as a grey 'None' (a missing optional value
    reads as an empty cell, or as a word that says why it is empty)."""
    found = []
    for d in frames:
        df = d.value
        for col in df.columns:
            if df[col].dtype == object and any(v is None for v in df[col]):
                found.append(str(col))
    return found


@pytest.mark.parametrize("page", PAGES)
def test_no_table_shows_None_in_an_empty_text_cell(rendered, page):
    assert not rendered[page, "None"], f"{page}: columns with None cells: {rendered[page, 'None']}"


@pytest.mark.parametrize("page", PAGES)
def test_no_page_writes_a_number_the_old_way(rendered, page):
    text = rendered[page]
    assert len(text) > 200, f"{page} rendered almost nothing: {text!r}"
    found = {name: sorted(set(re.findall(pattern, text)))[:5] for name, (pattern, _, _) in OLD_FORMS.items()}
    assert not any(found.values()), {k: v for k, v in found.items() if v}


def test_the_number_helpers_write_one_way():
    from ui.numbers import counts_times, dollars, duration, factor, gib, per_million_tokens, percent, signed
    assert (duration(0.998), duration(1.3412), duration(44.3), duration(26.4 * 86400)) == (
        "998 ms", "1.34 s", "44.3 s", "26.4 d")
    assert (percent(0.625, 1), percent(0.0085, 1), percent(0.31), signed(-0.03), signed(0.125)) == (
        "62.5%", "0.85%", "31%", "-3.0%", "+12.5%")
    assert (dollars(4.41), dollars(3512.3), dollars(1_873_456), per_million_tokens(0.0321)) == (
        "$4.41", "$3,512", "$1.87 M", "$0.032")
    assert (gib(16.48 * 2 ** 30), gib(5120 * 2 ** 30), factor(1.0567), factor(12.3)) == (
        "16.5 GiB", "5,120 GiB", "1.06×", "12×")
    assert counts_times("L0–7: 1,024x h100 tp8 + 2x a100 tp2, 1.06x faster") == (
        "L0–7: 1,024× h100 tp8 + 2× a100 tp2, 1.06× faster")  # a ratio too, as factor() writes it
