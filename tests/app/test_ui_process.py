"""wviz.ui.process: the server's torch threads leave a core to the browser and the other sessions."""
import torch

from wviz.ui.process import cores, limit_threads, torch_threads


def test_one_core_is_left_to_the_rest_and_at_most_two_threads():
    assert [torch_threads(n) for n in (1, 2, 3, 4, 16)] == [1, 1, 2, 2, 2]


def test_limit_threads_lowers_the_count_and_never_raises_it():
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        limit_threads()
        assert torch.get_num_threads() == torch_threads(cores())
        torch.set_num_threads(1)   # as OMP_NUM_THREADS=1 would leave it
        limit_threads()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(saved)
