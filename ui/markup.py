"""Text from users (names in links, uploads and custom catalogs, and planner messages that quote
them) shown as itself wherever Markdown is rendered: `st.markdown`, captions, alerts, labels, help
texts and the Markdown report.

Markdown would otherwise turn a cluster named `[x](http://evil)` into a link, `![i](http://evil/i.png)`
into an image the victim's browser loads, `$x$` into a formula, `:red[x]` into coloured text and a
line break into a new paragraph, list or heading.
"""
from __future__ import annotations

import re
import string

# CommonMark lets a backslash escape any ASCII punctuation character, which then shows as itself.
# All of them are escaped but those that are inert inside a line (so that names such as
# llama-3.1-8b stay readable in the Markdown report); escaping every other one, not a list of
# today's special ones, also stops Streamlit's directives (:red[...], :material/...:) and emoji
# short codes, HTML, and the maths delimiters. The text's first character is escaped too (a line
# may start with it: "- x" is a list, "1. x" a numbered one, "---" a rule).
_INERT_IN_A_LINE = set("-.,/%'\";?=")
_PUNCTUATION = re.compile("([" + re.escape("".join(sorted(set(string.punctuation) - _INERT_IN_A_LINE))) + "])")
_LINE_START = re.compile(r"^(\s*\d*)([" + re.escape("".join(sorted(_INERT_IN_A_LINE))) + "])")
# GFM's autolinks (www.x, http://x, a@x) and Streamlit's icons (:material/name:) are found in the
# text after escapes are resolved: an invisible word joiner where they start keeps them text.
_LINK_OR_ICON = re.compile(r"(?i)(?<=www)(?=\.)|(?=://)|(?=@)|(?<=:)(?=material/)")
WORD_JOINER = "\u2060"
_SURROGATE = re.compile("[\ud800-\udfff]")
# Line breaks and other control characters, and the bidirectional overrides that make text read in an
# order other than the one it is stored in.
_INVISIBLE = re.compile("[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]+")


def plain(text: object) -> str:
    """`text` on one line: line breaks and other control characters become one space each run,
    and a lone surrogate (which cannot be sent to the browser) becomes U+FFFD."""
    text = _SURROGATE.sub("\ufffd", str(text))
    return _INVISIBLE.sub(" ", text)


def md(text: object, line_start: bool = True) -> str:
    """`text` as Markdown that renders as exactly that text, on one line. `line_start=False` for a table
    cell, which holds only inline Markdown: its first character is not escaped ("69,553", not "69\\,553")."""
    text = _PUNCTUATION.sub(r"\\\1", _LINK_OR_ICON.sub(WORD_JOINER, plain(text)))
    return _LINE_START.sub(r"\1\\\2", text) if line_start else text


_UNSAFE_IN_FILE_NAMES = re.compile(r"[^A-Za-z0-9._+-]+")
MAX_FILE_STEM_CHARS = 80


def file_stem(name: object, default: str = "cluster") -> str:
    """A name made safe as the start of a downloaded file's name: letters, digits and ._+- only
    (no folders, no hidden or empty names), at most MAX_FILE_STEM_CHARS characters."""
    stem = _UNSAFE_IN_FILE_NAMES.sub("_", plain(name)).strip("._")[:MAX_FILE_STEM_CHARS]
    return stem or default
