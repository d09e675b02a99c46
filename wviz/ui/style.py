"""How a page reads on a projector: CSS for every page (metrics that shrink instead of being cut, display equations
scaled down to the column's width) and, in presentation mode, larger text, tables, metrics and sidebar controls with
the toolbar hidden, and the page's main slider above its figure (:func:`beside_figure`). The sidebar is collapsed by
app.py (set_page_config), which must run before anything is drawn. And text that a URL, a file or a model brings,
shown as text (:func:`plain`)."""
from __future__ import annotations

import json
from urllib.parse import parse_qs

import streamlit as st

PRESENTATION_PARAM = "presentation"   # the URL's parameter and the lecture panel's toggle
_SESSION_KEY = "_wviz_presenting"     # the session's mode (presenting)

# Every ASCII punctuation mark, which CommonMark lets a backslash make literal: links, images, emphasis, code, HTML,
# headings and lists, $LaTeX$, Streamlit's :emoji: / :material/icon: / :color[text] directives. Web addresses and
# e-mail addresses are linked after that, in the text itself (GitHub's autolinks: https://..., www...., a@b.c), so an
# invisible word joiner (U+2060) sits after each colon and before each full stop and @, which those patterns need next
# to their neighbours
_JOIN = "\u2060"
_MARKDOWN = str.maketrans({**{c: "\\" + c for c in "\\`*_{}[]()<>#+-!|~$\"'&%=?^,;/"},
                           ":": "\\:" + _JOIN, ".": _JOIN + "\\.", "@": _JOIN + "\\@"})


def plain(text: object) -> str:
    r"""``text`` as Streamlit's markdown shows it literally: for what a URL, a file, a folder or a model brings
    (names, labels, tokens, paths, the messages that quote them) inside a caption, an info box or an error, where
    ``x). **sign in** [here](https://evil.example)`` would otherwise draw bold text and a working link.

    A line that starts with "- " stays an item of a list (a message listing its problems, wviz.io.fail).

    >>> from wviz.ui.style import plain
    >>> print(plain("a_b **c** [d](https://e.f)").replace("\u2060", "+"))   # U+2060: the word joiner
    a\_b \*\*c\*\* \[d\]\(https\:+\/\/e+\.f\)
    >>> print(plain("2 problems:\n- x_1\n- y").replace("\u2060", ""))
    2 problems\:
    - x\_1
    - y
    """
    return "\n".join(("- " + line[2:].translate(_MARKDOWN)) if line.startswith("- ") else line.translate(_MARKDOWN)
                     for line in str(text).split("\n"))


# A metric's value shrinks with its column (container query units) and its label wraps, so "transport cost"
# and "4.5e-03" show whole at 800 px in four columns. Tables wrap too.
_ALWAYS = """
<style>
[data-testid="stMetric"] { container-type: inline-size; }
[data-testid="stMetricValue"] { font-size: min(2.25rem, 14cqi); }
[data-testid="stMetricValue"] *, [data-testid="stMetricLabel"] * {
  white-space: normal !important; overflow: visible !important; text-overflow: clip !important; }
.katex-display { overflow: hidden; }
</style>
"""

# A display equation wider than its column is drawn smaller until it fits (KaTeX sizes are in em): the pages split
# their long equations over lines, this catches what is left at 800 px. Runs in the page (st.html with scripts),
# once per browser tab. Sizes come from a ResizeObserver, which the browser feeds after its own layout: a slider
# move that changes no equation and no column reads no layout (reading each column's width after every change to
# the page forced a layout in the middle of Plotly's redraw, BENCHMARKS.md "Slider latency").
_FIT_EQUATIONS = """
<script>
(() => {
  if (window.__wvizFit) return;
  window.__wvizFit = true;
  // The equation's own box shrinks to its content; the element around it has the column's width.
  const roomOf = box => box.closest('[data-testid="stMarkdown"]') || box;
  const fit = box => {
    const katex = box.querySelector(':scope > .katex');
    const room = roomOf(box).clientWidth;
    if (!box.isConnected || !katex || room === 0) return;  // gone, or not laid out (a closed expander)
    const fitted = `${room}|${katex.textContent}`;
    // Our own resizing of it, reported back. Not when it overflows again at the same width: the equation grew
    // after its fit (as when KaTeX's fonts arrive after the first layout), and must be fitted anew.
    if (box.dataset.wvizFitted === fitted && katex.scrollWidth <= room) return;
    box.dataset.wvizFitted = fitted;
    katex.style.fontSize = '';
    // Scale by the overshoot, then step down: parts of an equation (spacing, tags) do not scale with it.
    let size = Math.floor(100 * room / katex.scrollWidth);
    while (katex.scrollWidth > room && size >= 40) {
      katex.style.fontSize = `${size}%`;
      size -= 2;
    }
  };
  // run() at the next frame, once however often it is asked for before then
  const onceAFrame = run => {
    let queued = false;
    return () => { if (!queued) { queued = true; requestAnimationFrame(() => { queued = false; run(); }); } };
  };
  const resized = new Set();
  const later = onceAFrame(() => { resized.forEach(fit); resized.clear(); });
  const sizes = new ResizeObserver(entries => {
    entries.forEach(({ target }) => {
      if (target.classList.contains('katex')) resized.add(target.parentElement);
      else target.querySelectorAll('.katex-display').forEach(box => resized.add(box));
    });
    later();
  });
  const watched = new Set();  // boxes whose equation and column are observed
  const watch = () => {
    watched.forEach(box => {  // React replaced it: let it go
      if (box.isConnected) return;
      watched.delete(box);
      box.querySelectorAll(':scope > .katex').forEach(k => sizes.unobserve(k));
      if (!roomOf(box).isConnected) sizes.unobserve(roomOf(box));
    });
    document.querySelectorAll('.katex-display').forEach(box => {
      if (watched.has(box)) return;
      watched.add(box);
      sizes.observe(roomOf(box));
      box.querySelectorAll(':scope > .katex').forEach(k => sizes.observe(k));
    });
  };
  new MutationObserver(onceAFrame(watch)).observe(document.body, { childList: true, subtree: true });
  watch();
})();
</script>
"""

# Presentation mode: the hall reads the page from 10 m. Streamlit's toolbar (deploy, menu) is hidden; the
# dataframe grid draws on a canvas, so it is zoomed rather than given a font size: its element's box, narrowed by
# the zoom, so that Streamlit lays the grid out to a width that the zoom brings back to the column's (zooming the
# grid itself drew it 1.35 times the column's width, past the page's edge).
# The sidebar's controls (labels, options, slider values and ends, fields, captions, a multiselect's chosen tags
# and a selectbox's chosen value, which wrap instead of being cut: _CHOSEN_WRAPS) are as large as the main column's,
# at least wviz.export.TEXT_PX (they were Streamlit's 14 px), in a sidebar of 22rem (352 px; the figures keep 640 px
# beside it at 1024x768). Its navigation keeps its size: larger, it would push the controls further down. A
# selectbox's or multiselect's open list (drawn apart from its field, anywhere on the page) has options of the same
# size, on one line each, the list as wide as its longest (its rows have a fixed height: a wrapped option overlapped
# the next).
_PRESENTING = """
<style>
[data-testid="stToolbarActions"], [data-testid="stAppDeployButton"], [data-testid="stMainMenu"] {
  display: none !important; }
.stMainBlockContainer { font-size: 1.35rem; padding: 3rem 2rem 2rem 2rem; max-width: 100%; }
.stMainBlockContainer p, .stMainBlockContainer li { font-size: 1.35rem; }
.stMainBlockContainer h1 { font-size: 2.8rem; }
.stMainBlockContainer [data-testid="stCaptionContainer"] p { font-size: 1.15rem; }
.stMainBlockContainer .katex { font-size: 1.5em; }
[data-testid="stMetricLabel"] p { font-size: 1.3rem; }
[data-testid="stMetricValue"] { font-size: min(3rem, 14cqi); }
[data-testid="stElementContainer"]:has([data-testid="stDataFrame"], [data-testid="stTable"]) {
  zoom: 1.35; width: calc(100% / 1.35) !important; max-width: calc(100% / 1.35) !important; }
.stMainBlockContainer label p { font-size: 1.2rem; }
.stMainBlockContainer input, .stMainBlockContainer textarea,
.stMainBlockContainer [data-testid="stSliderThumbValue"], .stMainBlockContainer [data-testid^="stSliderTickBar"] {
  font-size: 1.2rem; }
[data-testid="stSidebar"][data-collapsed="false"] { min-width: 22rem !important; }
[data-testid="stSidebarUserContent"] :is(p, li, a, summary, input, textarea, [data-testid="stHtml"],
  [data-tag], [data-testid="stSliderThumbValue"], [data-testid^="stSliderTickBar"],
  [data-testid="stFileUploaderDropzoneInstructions"] span) { font-size: 1.2rem; }
[data-testid="stSidebarUserContent"] [data-testid="stCaptionContainer"] p { font-size: 1.15rem; }
[data-testid="stSidebarUserContent"] [data-tag] { max-width: none; height: auto; }
[data-testid="stSidebarUserContent"] [data-tag] > span { white-space: normal; overflow: visible; text-overflow: clip; }
[data-testid="stSidebarUserContent"] [role="group"][data-wviz-chosen]:not(:has(input[aria-expanded="true"])) {
  position: relative; height: auto; min-height: 2.5rem; }
[data-testid="stSidebarUserContent"] [role="group"][data-wviz-chosen]:not(:has(input[aria-expanded="true"]))::before {
  content: attr(data-wviz-chosen); flex: 1; align-self: center; padding: 0.25rem 0 0.25rem 0.5rem;
  font-size: 1.2rem; line-height: 1.3; white-space: normal; overflow-wrap: anywhere; pointer-events: none; }
[data-testid="stSidebarUserContent"] [role="group"][data-wviz-chosen]:not(:has(input[aria-expanded="true"])) input {
  position: absolute; inset: 0; width: 100%; opacity: 0; }
[data-testid="stSidebarUserContent"] [role="group"][data-wviz-chosen] button { position: relative; z-index: 1; }
[data-testid="stSidebarUserContent"] [data-testid="stIconMaterial"] { font-size: 1.5rem; }
:is([data-testid="stSelectboxVirtualDropdown"], [data-testid="stMultiSelectDropdown"]) {
  min-width: max-content !important; }
:is([data-testid="stSelectboxVirtualDropdown"], [data-testid="stMultiSelectDropdown"]) [role="option"] {
  font-size: 1.2rem; }
[data-testid="stSidebarUserContent"] [data-testid="stTooltipHoverTarget"] svg { width: 1.2rem; height: 1.2rem; }
</style>
"""


# Presentation mode: a sidebar selectbox's chosen value on as many lines as it needs. Streamlit draws it in an <input>
# (a combobox), whose text cannot wrap: at 1.2rem in the 352 px sidebar "all-MiniLM-L6-v2 (encoder, 22.7M
# parameters)" was cut. The value is copied onto the input's box (data-wviz-chosen), where _PRESENTING's CSS draws it
# wrapped, over the input made transparent: the input still takes the clicks, and while its list is open it is drawn
# as it is (what is typed shows). Only selectboxes: a multiselect's box holds its tags.
_CHOSEN_WRAPS = """
<script>
(() => {
  if (window.__wvizChosen) return;
  window.__wvizChosen = true;
  let queued = false;
  const copy = () => {
    queued = false;
    document.querySelectorAll('[data-testid="stSidebarUserContent"] [data-testid="stSelectbox"] input[role="combobox"]')
      .forEach(input => {
        const box = input.parentElement;
        if (input.value && box.dataset.wvizChosen !== input.value) box.dataset.wvizChosen = input.value;
        if (!input.value) delete box.dataset.wvizChosen;   // the placeholder shows, in the input
      });
  };
  // a choice changes the input's value attribute (React keeps it in step); a rerun brings new selectboxes. Only the
  // sidebar is watched: the main column changes on every frame of a slider's drag
  const sidebar = document.querySelector('[data-testid="stSidebar"]') || document.body;
  new MutationObserver(() => { if (!queued) { queued = true; requestAnimationFrame(copy); } })
    .observe(sidebar, { childList: true, subtree: true, attributes: true, attributeFilter: ['value'] });
  copy();
})();
</script>
"""


# On a page opened in presentation mode the sidebar starts collapsed, however the page was reached: a new page
# (the sidebar's navigation, which the lecturer opened the sidebar for) collapses it once. Streamlit applies
# set_page_config's initial_sidebar_state only when its value changes, and a browser's stored choice wins on a
# reload, so this runs in the page. The page's title makes the element new on each page, so that it runs there.
_COLLAPSE_ON_A_NEW_PAGE = """
<script>
(() => {
  const page = %s;
  if (window.__wvizPresentedPage === page) return;
  window.__wvizPresentedPage = page;
  const collapse = () => {
    const sidebar = document.querySelector('[data-testid="stSidebar"]');
    const button = document.querySelector('[data-testid="stSidebarCollapseButton"] button');
    if (sidebar && button && sidebar.getBoundingClientRect().width > 0) button.click();
  };
  requestAnimationFrame(collapse);
})();
</script>
"""


def presenting() -> bool:
    """Presentation mode is on for this session: asked for by the URL of the session's first run
    (``?presentation=true``), or by the lecture panel's toggle since (:func:`toggled`).

    One answer for the whole run, kept in the session rather than read off the toggle or the URL: on a page reached
    by the sidebar's navigation or Home's page list, the URL has lost the parameter before the page runs (Streamlit
    drops a parameter bound to the last page's widget, and its links carry no query) and the page's toggle is a new
    widget (Streamlit's widget ids include the page), which starts off after the page's CSS was decided from the
    last page's toggle: large body text, small figures."""
    if _SESSION_KEY not in st.session_state:
        st.session_state[_SESSION_KEY] = st.query_params.get(PRESENTATION_PARAM, "").lower() == "true"
    return st.session_state[_SESSION_KEY]


def beside_figure(sidebar_slot):
    """Where ui.live draws a page's main slider: ``sidebar_slot``, its place among the sidebar's controls; in
    presentation mode a container made here, in the main column just above what the slider drives (ui.live draws it
    next), so that the lecturer who moves it, and the hall, see the figure move. In the sidebar, at 1024x768, the
    slider sat below the navigation and the figure below the main column's fold."""
    return st.container() if presenting() else sidebar_slot


def toggled() -> None:
    """The lecture panel's toggle (its on_change): the lecturer turned presentation mode on or off."""
    st.session_state[_SESSION_KEY] = bool(st.session_state[PRESENTATION_PARAM])


def sidebar_state() -> str:
    """For st.set_page_config: the hall sees the figures, not the controls (the lecturer opens the sidebar)."""
    return "collapsed" if presenting() else "auto"


def keep_presenting(query: str) -> str:
    """A link's query (``?key=value&...``) with presentation mode kept on while it is on: the link loads the page
    in a new session, which takes the mode from its URL. A parameter that merely ends in the name
    (``representation=``) is not it."""
    if not presenting() or PRESENTATION_PARAM in parse_qs(query.lstrip("?"), keep_blank_values=True):
        return query
    return query + ("&" if len(query) > 1 else "") + f"{PRESENTATION_PARAM}=true"


def apply(title: str) -> None:
    """The page's CSS and the equation-fitting script (they draw nothing). In presentation mode the URL says so
    (a page reached by the sidebar's navigation has none of the last page's query) and the sidebar starts
    collapsed."""
    st.html(_ALWAYS + (_PRESENTING if presenting() else ""))
    st.html(_FIT_EQUATIONS, unsafe_allow_javascript=True)
    if presenting():
        if st.query_params.get(PRESENTATION_PARAM) != "true":
            st.query_params[PRESENTATION_PARAM] = "true"
        st.html(_COLLAPSE_ON_A_NEW_PAGE % json.dumps(title) + _CHOSEN_WRAPS, unsafe_allow_javascript=True)
