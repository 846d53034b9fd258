"""Text from input (labels, model and task names, paths, warnings) on its way into Markdown: shown, never interpreted.

`markdown_text` escapes what would make a Markdown viewer build something: raw HTML (`<script>`, `<img onerror=...>`,
entities) loses its `<` and `&` to entities (a lone `>`, as in "T > 41 s", stays), link and image brackets and code backticks are backslash-escaped (so `[x](javascript:...)`
and `![x](...)` stay text), a table cell's `|` is escaped, and line breaks become spaces (one line stays one line).
Emphasis characters (`*`, `_`) are left alone: they cannot run anything, and labels such as p4_g8_sqrt stay
readable in the Markdown source. (Data is never put in code spans: a viewer that renders HTML inside one, or a
backtick in the data that closes it, would undo the escaping.)
`markdown_link` percent-encodes a relative path for a link target. (HTML output uses html.escape; the console,
rich.markup.escape.)
"""

from __future__ import annotations

import re
from urllib.parse import quote

_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029\x0b\x0c\x85]+")
_ENTITIES = {"&": "&amp;", "<": "&lt;"}  # no tag or entity starts without these; a lone ">" stays readable
_BACKSLASHED = set("\\`[]|")


def markdown_text(text) -> str:
    """`text` as literal Markdown inline text (see the module docstring)."""
    out = []
    for c in _LINE_BREAKS.sub(" ", str(text)):
        out.append(_ENTITIES.get(c) or ("\\" + c if c in _BACKSLASHED else c))
    return "".join(out)


def markdown_link(path: str) -> str:
    """A relative path as a link target: every character outside a plain path percent-encoded."""
    return quote(str(path), safe="/._-~")
