"""A second reference for bench_latency: the floor's slider driving the Transport plans page's main figure alone
(wviz.figures.transport_plans.plan_with_marginals: a 40 x 30 plan as a heatmap with the marginals as bars on its sides, the
page's default size), nothing else on the page and nothing computed but a random matrix. Its distance from the
floor is what the browser's drawing of that one figure costs, before any of the page's own work."""
import gc

import numpy as np
import streamlit as st

from wviz.figures.transport_plans import plan_with_marginals

if not gc.get_freeze_count():  # as the floor and the app do (wviz.ui.freeze_imports)
    gc.collect()
    gc.freeze()

x = st.sidebar.slider("x", 0, 100, 50, key="x", help="Sharpens the plan.")
P = np.random.default_rng(0).random((40, 30)) ** (1 + x / 10)
P /= P.sum()
st.plotly_chart(plan_with_marginals(P, P.sum(1), P.sum(0), "plan"), key="plan")
