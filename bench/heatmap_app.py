"""A second reference for bench_latency: the floor's slider driving one plain 40 x 30 Plotly heatmap (the default
size of the Transport plans page's plan), nothing else on the page and nothing computed beyond it. The distance
from the floor to this page is what the browser's drawing of one heatmap costs, before any page's own work."""
import gc

import numpy as np
import plotly.graph_objects as go
import streamlit as st

if not gc.get_freeze_count():  # as the floor and the app do (wviz.ui.freeze_imports)
    gc.collect()
    gc.freeze()

x = st.sidebar.slider("x", 0, 100, 50, key="x", help="Sharpens the matrix.")
P = np.random.default_rng(0).random((40, 30)) ** (1 + x / 10)
st.plotly_chart(go.Figure(go.Heatmap(z=P / P.sum()), layout=dict(title="one heatmap")), key="heatmap")
