"""Every view a page offers besides its opening one, at half a laptop screen (800x1000, the narrowest column) in the
plain style: each option of each view selector, chosen by a click, draws no exception, every heatmap with a colour
scale and nothing cut (CUT) or pushed (PUSHED). The same views at a projector in presentation mode:
test_lecture_hall_views.py."""
import pytest

from tests.e2e.views import HALF_LAPTOP, WITH_VIEWS, every_view_found_wrong


@pytest.mark.parametrize("path", WITH_VIEWS)
def test_every_other_view_is_whole_and_scaled_at_half_a_laptop(server, page, path):
    found = every_view_found_wrong(page, f"{server}/{path}", HALF_LAPTOP, readable=False)
    assert found == {}, "\n".join(f"plain, {view}: {what}" for view, what in found.items())
