"""The Streamlit helpers the pages share, one module per job; the only part of wviz that imports streamlit.

    page        page_setup: title, intro, guided experiments (Try this), device badge, Reset to defaults, lecture
                panel; cite (a link to the References page)
    lecture     the lecture being recorded (figures, equations, settings) and its bundle; equation
    state       the URL: share link, table_editor (and table_from_url while it is not drawn), renamed_params;
                own_page (page_setup: each page's settings its own across a page switch)
    widgets     log_slider (log_grid: its options), view_selector
    drag        follow: a figure recomputed in the browser while its sliders move (wviz/ui/js)
    runs        live (the main slider and what it drives, in a fragment), fragment, guarded
    output      show_figure (with its export menu), shared_figure (built once per server), show_chart (Altair), views /
                View / figure_view (one secondary view drawn, the others deferred to the lecture bundle), side_by_side
                (two values of the main parameter), example_file (for an upload), animation (GIF / MP4)
    style       the CSS and script that fit a page to a projector; presentation mode; plain (text shown as text)
    background  background / wait_for: work of many seconds in a worker thread
    process     freeze_imports, torch threads
    models      choose_model: the sidebar's Model selector of the pages that open a real transformer
"""
from wviz.ui.background import background, wait_for
from wviz.ui.drag import LIVE_MAX_ENTRIES, Slider, follow
from wviz.ui.lecture import built, equation
from wviz.ui.models import choose_model
from wviz.ui.output import (View, animation, example_file, figure_view, shared_figure, show_chart, show_figure,
                            side_by_side, views)
from wviz.ui.page import cite, device_badge, page_setup, where_solved
from wviz.ui.process import freeze_imports
from wviz.ui.runs import fragment, guarded, live
from wviz.ui.state import renamed_params, table_editor, table_from_url
from wviz.ui.style import plain
from wviz.ui.widgets import log_grid, log_slider

__all__ = ["background", "wait_for", "built", "equation", "choose_model", "View", "animation", "example_file",
           "figure_view", "shared_figure", "show_chart", "show_figure", "side_by_side", "views", "cite",
           "device_badge", "page_setup", "where_solved", "freeze_imports", "fragment", "guarded", "live",
           "renamed_params", "table_editor", "table_from_url", "log_slider", "log_grid", "LIVE_MAX_ENTRIES", "Slider",
           "follow", "plain"]
