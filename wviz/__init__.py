"""wviz: attention as optimal transport, as a library (no streamlit here; see wviz/ui for the app helpers)."""
