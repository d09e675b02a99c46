"""How a page reruns: its main slider and what it drives in a fragment, and computations that fail with a
message instead of an exception."""
from __future__ import annotations

from contextvars import ContextVar
from collections.abc import Callable
from typing import Any, TypeVar

import streamlit as st

from wviz.ui import lecture, state
from wviz.ui.style import plain

T = TypeVar("T")
R = TypeVar("R")

# What live() draws below its fragment (see below()): a list while live() runs the fragment in a full run, () while
# the fragment reruns alone, None outside live().
_below: ContextVar[list | tuple | None] = ContextVar("wviz_below", default=None)
_BELOW = "_wviz_below"   # the view the last full run drew below the fragment, or None


def guarded(key: str, compute: Callable[[], R]) -> R | None:
    """Run ``compute``; on a ValueError show it with st.error and return the last good result (or None).

    Bad input never crashes a page and never turns into NaN: the page keeps showing its last good state.
    """
    store = st.session_state.setdefault("_wviz_last_good", {})
    try:
        result = compute()
    except ValueError as err:
        st.error(plain(err))   # a message may quote what a file or a link holds: shown as text
        if key in store:
            st.caption("Showing the last valid result while the input above is fixed.")
        return store.get(key)
    store[key] = result
    return result


def fragment(func: Callable[[], None]) -> Callable[[], None]:
    """st.fragment for a page's results: a widget drawn inside ``func`` (even into a sidebar container made
    outside it) reruns ``func`` alone, not the page, so a slider move redraws only the figures it drives.

    The share link changes with that widget, and a fragment may redraw a container made outside it only if it
    wrote there during the last full run: so each run draws the link once, at its end (state.link_at_end), when
    the URL has settled; the figures' own copies (ui.show_figure) are left out, each one more message before the
    next figure. A rerun replaces the equations it recorded in the lecture, keeping those the page recorded after
    it.
    """
    span: list[int] = []  # where this fragment's equations sit in the lecture's list, from its last run

    @st.fragment
    def run() -> None:
        equations = lecture.current().equations
        start, end = span or (len(equations), len(equations))
        after = equations[end:]
        del equations[start:]
        try:
            with state.link_at_end():
                func()
        finally:
            span[:] = [start, len(equations)]
            equations.extend(after)

    return run


def live(key: str, slot, slider: Callable[[Any], T], compute: Callable[[T], R | None],
         draw: Callable[[R], None]) -> None:
    """The page's main slider and everything it drives, run now and rerun alone on every move (fragment).

    ``slider(slot)`` draws the slider into ``slot``, a sidebar container the page reserved where the slider
    belongs among its controls; ``compute(value)`` is guarded under ``key`` (a ValueError is shown and the last
    good result kept); ``draw(result)`` lays out what it returns, unless it returned None (nothing to show).
    """
    @fragment
    def run() -> None:
        # Streamlit reruns run() alone on a move: () tells below() that nothing will be drawn after it this time
        token = _below.set(() if _below.get() is None else _below.get())
        try:
            value = slider(slot)
            result = guarded(key, lambda: compute(value))
            if result is not None:
                draw(result)
        finally:
            _below.reset(token)

    below_draws: list[Callable[[], None]] = []
    st.session_state[_BELOW] = None
    token = _below.set(below_draws)
    try:
        run()
    finally:
        _below.reset(token)
    for draw_below in below_draws:
        draw_below()


def below(view: str | None, draw: Callable[[], None] | None = None) -> bool:
    """Draw the view named ``view`` below live()'s fragment instead of inside it, when the main slider does not
    change it: a full run draws it after the fragment, and the slider's moves leave it standing instead of sending
    it again. ``view`` None: nothing below (the chosen view is drawn inside). A fragment rerun that wants another
    view below than the last full run drew reruns the page. False outside live(): the caller draws in place."""
    where = _below.get()
    if where is None:
        return False
    if isinstance(where, list):
        st.session_state[_BELOW] = view
        if draw is not None:
            where.append(draw)
    elif st.session_state.get(_BELOW) != view:
        st.rerun()
    return True
