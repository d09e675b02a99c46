"""Guided experiments: "Try this" links that open a page in a stated state, each with what to watch."""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode


@dataclass(frozen=True)
class Try:
    """One guided experiment.

    label   the link's text, an instruction ("Send tau to 0.001")
    params  the query parameters the link sets: a page's widget keys (bound to the URL) and the values the widgets
            take (a list for a multiselect); every other setting opens at its default
    watch   one sentence on what to look at
    """

    label: str
    params: dict
    watch: str

    def query(self) -> str:
        """The link, relative to the page: ``?key=value&...`` (a list repeats its key, as Streamlit's URL does)."""
        def text(value):  # as the widget writes it: 100.0 -> "100" (a slider's label), True -> "true"
            if isinstance(value, bool):
                return str(value).lower()
            return f"{value:g}" if isinstance(value, float) else str(value)

        pairs = [(k, text(x)) for k, v in self.params.items() for x in (v if isinstance(v, (list, tuple)) else [v])]
        return "?" + urlencode(pairs)
