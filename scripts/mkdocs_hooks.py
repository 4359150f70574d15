"""MkDocs hook of `make docs`: the docstrings' reStructuredText roles become links in the site.

The library's docstrings name other objects the way Python tools read them (``:class:`Client```,
``:meth:`~rebalanser.client.Client.stop```). Rendered as Markdown, such a role arrives as
``:class:<code>Client</code>``; this turns it into a cross-reference that mkdocs-autorefs resolves
when the object is in the API reference, and into plain code otherwise (never a warning).
"""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(
    r":(?:class|meth|func|mod|attr|exc|data|obj):<code>(?P<tilde>~?)(?P<target>[\w.]+)(?P<call>\(\))?</code>"
)


def _link(match: re.Match[str]) -> str:
    target = match["target"]
    shown = target.rsplit(".", 1)[-1] if match["tilde"] else target
    return f'<autoref identifier="{target}" optional><code>{shown}{match["call"] or ""}</code></autoref>'


def on_page_content(html: str, **_: Any) -> str:
    return ROLE.sub(_link, html)
