"""The floor of bench_latency: one slider and one small Plotly chart, nothing computed. What Streamlit itself costs
for a slider move -> rerun -> chart update in the browser, with the same garbage-collector set-up as the app."""
import gc

import plotly.graph_objects as go
import streamlit as st

if not gc.get_freeze_count():  # as the app does (wviz.ui.freeze_imports): Streamlit's collection after each run
    gc.collect()               # would otherwise walk these modules' objects every time
    gc.freeze()

x = st.sidebar.slider("x", 0, 100, 50, key="x", help="Moves the bar.")
st.plotly_chart(go.Figure(go.Bar(x=["x"], y=[x]), layout=dict(title="floor", yaxis_range=[0, 100])), key="floor")
