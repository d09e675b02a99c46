"""The lecture hall, in a real browser, on every view a page offers besides its opening one (test_lecture_hall.py
checks that one), at a projector (1024x768) in presentation mode: each option of each view selector (ui.views: a
segmented control; the inspector has two), chosen by a click as a user does, draws no exception, every heatmap with
a colour scale, nothing cut (CUT) or pushed (PUSHED) and no chart text or control value under TEXT_PX. The same
views at half a laptop screen in the plain style: test_lecture_hall_views_narrow.py (a file of its own, so that the
two run on two workers: each takes minutes)."""
import pytest

from tests.e2e.views import PROJECTOR, WITH_VIEWS, every_view_found_wrong


@pytest.mark.parametrize("path", WITH_VIEWS)
def test_every_other_view_is_whole_scaled_and_readable_in_the_hall(server, page, path):
    found = every_view_found_wrong(page, f"{server}/{path}?presentation=true", PROJECTOR, readable=True)
    assert found == {}, "\n".join(f"presentation, {view}: {what}" for view, what in found.items())
