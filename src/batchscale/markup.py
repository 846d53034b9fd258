"""Text from input (labels, model and task names, paths, warnings) on its way into Markdown: shown, never interpreted.

`markdown_text` escapes what would make a Markdown viewer build something: raw HTML (`<script>`, `<img onerror=...>`,
entities) loses its `<` and `&` to entities (a lone `>`, as in "T > 41 s", stays), link and image brackets and code backticks are backslash-escaped (so `[x](javascript:...)`
and `![x](...)` stay text), a table cell's `|` is escaped, and line breaks become spaces (one line stays one line).
Emphasis characters (`*`, `_`) are left alone: they cannot run anything, and labels such as p4_g8_sqrt stay
readable in the Markdown source. (Data is never put in code spans: a viewer that renders HTML inside one, or a
backtick in the data that closes it, would undo the escaping.)
`markdown_link` percent-encodes a relative path for a link target.

`inert` runs first everywhere text from a run is shown (Markdown, HTML, the console): it writes each character that
would act rather than show as its visible escape: C0 and C1 control characters and DEL (a lone `\\r` that rewinds a
terminal line, ESC that starts a terminal escape sequence) as `\\xNN`, and Unicode's bidirectional controls (U+202A-E
embeddings and overrides such as U+202E, which shows `exe.png` as `gnp.exe`; U+2066-9 isolates; U+200E/F, U+061C
marks) as `\\uNNNN`. Line breaks are left to the caller (`markdown_text` makes them spaces). `html_text` and
`console_text` are `inert` followed by html.escape and rich.markup.escape.
"""

from __future__ import annotations

import html
import re
from urllib.parse import quote

_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029\x0b\x0c\x85]+")
_ENTITIES = {"&": "&amp;", "<": "&lt;"}  # no tag or entity starts without these; a lone ">" stays readable
_BACKSLASHED = set("\\`[]|")
_ACTIVE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def inert(text) -> str:
    """`text` with every control and bidirectional-control character written as its visible escape (module
    docstring); a newline stays."""
    return _ACTIVE.sub(_visible, str(text))


def html_text(text) -> str:
    return html.escape(inert(text))


def console_text(text) -> str:
    """For rich markup: inert, and its brackets escaped."""
    from rich.markup import escape

    return escape(inert(text))


def markdown_text(text) -> str:
    """`text` as literal Markdown inline text (see the module docstring)."""
    out = []
    for c in inert(_LINE_BREAKS.sub(" ", str(text))):
        out.append(_ENTITIES.get(c) or ("\\" + c if c in _BACKSLASHED else c))
    return "".join(out)


def markdown_link(path: str) -> str:
    """A relative path as a link target: every character outside a plain path percent-encoded."""
    return quote(str(path), safe="/._-~")
