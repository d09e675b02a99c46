"""wviz.ui.drag's Python side: what it sends the browser, and the size above which a figure stays on release."""
import math

import torch

from wviz.ui import drag


def test_inputs_reach_json_with_infinities_spelled_out():
    """JSON has no infinities: -inf (a masked key) travels as null and inf (a rho slider's balanced end) as
    "Infinity", which drag.js reads back; dicts and tuples nest."""
    assert drag._plain({"s": torch.tensor([1.5, -math.inf])}) == {"s": [1.5, None]}
    assert drag._plain([[0.25, -math.inf], (2, "softmax")]) == [[0.25, None], [2, "softmax"]]
    assert drag._plain({"rho": {"options": (0.0, 1e-3, math.inf)}}) == {"rho": {"options": [0.0, 1e-3, "Infinity"]}}
    assert drag._plain(None) is None


def test_a_problem_above_the_frame_budget_is_not_followed():
    """Above LIVE_MAX_ENTRIES nothing is mounted (no Streamlit call is made) and the caller is told so."""
    for figure, cap in drag.LIVE_MAX_ENTRIES.items():
        assert drag.follow("chart", figure, {}, {}, {}, entries=cap + 1) is False
