"""assets/cache (wviz.precompute): the results a first visit at the defaults asks for, each shipped under the key
the app asks with now (its weights, split, corpus, version), and nothing else; the app reads them before computing."""
import torch

from wviz import disk_cache, precompute


def test_every_result_the_defaults_ask_for_is_shipped_and_nothing_else():
    asked = precompute.requests()
    assert sorted(n for n, _, _ in asked) == (["figure4"] * 3 + ["vit_calibration"] * 4 + ["vit_maps"] * 2
                                              + ["vit_occlusion"] * 2 + ["vit_panel"] * 4)
    assert sorted(p["alpha"] for n, p, _ in asked if n == "figure4") == [0.1, 1.0, 10.0]
    stale = [(n, p) for n, p, v in asked if not disk_cache.precomputed(n, p, v)]
    assert not stale, f"assets/cache is out of date (run `make cache`): {stale}"
    files = {disk_cache.address(*request)[0] for request in asked}
    assert {f.name for f in disk_cache.PRECOMPUTED.iterdir()} == files


def test_a_shipped_result_is_read_before_computing(monkeypatch, tmp_path):
    """cached() returns the shipped file's result without computing it or writing to the user's folder; what is not
    shipped is computed there."""
    monkeypatch.setattr(disk_cache, "PRECOMPUTED", tmp_path / "shipped")
    monkeypatch.setenv("WVIZ_CACHE_DIR", str(tmp_path / "shipped"))
    disk_cache.cached("job", {"alpha": 1.0}, 1, lambda: {"x": torch.arange(3)})   # written where PRECOMPUTED is read
    monkeypatch.setenv("WVIZ_CACHE_DIR", str(tmp_path / "user"))

    def compute():
        raise AssertionError("computed")

    assert torch.equal(disk_cache.cached("job", {"alpha": 1.0}, 1, compute)["x"], torch.arange(3))
    assert disk_cache.precomputed("job", {"alpha": 1.0}, 1) and not disk_cache.precomputed("job", {"alpha": 1.0}, 2)
    assert not (tmp_path / "user").exists()
    assert torch.equal(disk_cache.cached("job", {"alpha": 0.5}, 1, lambda: {"x": torch.ones(1)})["x"], torch.ones(1))
    assert len(list((tmp_path / "user").glob("*.safetensors"))) == 1
