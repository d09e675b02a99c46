"""Figure builders: results (numpy / torch on any device) -> Plotly figures. Layout only, no math."""
