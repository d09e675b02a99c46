"""Untrusted uploads: strict parsing with plain messages, zips refused by the checks every zip upload shares; and the
sample clouds."""
import dataclasses
import re
import struct
import zipfile
from io import BytesIO

import pandas as pd
import pytest
import torch
from PIL import Image

from wviz import io, sample_data
from wviz.models import safety
from tests.zips import zipped


def test_points_csv_round_trip_and_normalised_masses():
    csv = b"cloud,x,y,mass\nsource,0,0,1\nsource,1,0,3\ntarget,0,1,2\n"
    x, a, y, b = io.read_points_csv(csv)
    assert torch.equal(x, torch.tensor([[0.0, 0.0], [1.0, 0.0]], dtype=torch.float64))
    assert torch.allclose(a, torch.tensor([0.25, 0.75], dtype=torch.float64))
    assert torch.equal(y, torch.tensor([[0.0, 1.0]], dtype=torch.float64)) and b.item() == 1.0


def test_points_csv_default_masses_are_uniform():
    x, a, y, b = io.read_points_csv(b"cloud,x,y\nsource,0,0\nsource,1,1\nsource,2,2\ntarget,5,5\n")
    assert torch.allclose(a, torch.full((3,), 1 / 3, dtype=torch.float64))


@pytest.mark.parametrize("data, message", [
    (b"cloud,x\nsource,1\n", "missing: y"),
    (b"cloud,x,y\nsource,1,abc\ntarget,0,0\n", "line 2, column y"),
    (b"cloud,x,y\nsource,1,\ntarget,0,0\n", "empty or non-numeric"),
    (b"cloud,x,y\nleft,1,1\n", "'source' or 'target'"),
    (b"cloud,x,y\nsource,1,1\n", "no target points"),
    (b"cloud,x,y,mass\nsource,1,1,-1\nsource,0,0,2\ntarget,0,0,1\n", "non-negative"),
    (b"cloud,x,y\nsource,1,inf\ntarget,0,0\n", "non-numeric"),
    (b"\xff\xfe\x00garbage", "CSV"),
    (b"", "CSV"),
])
def test_points_csv_bad_input(data, message):
    with pytest.raises(ValueError, match=message):
        io.read_points_csv(data)


def test_upload_size_limit():
    with pytest.raises(ValueError, match="limit"):
        io.read_points_csv(b"cloud,x,y\n" + b"source,1,1\n" * (io.MAX_UPLOAD_BYTES // 10))


def test_matrix_csv_and_typed_matrix():
    assert torch.equal(io.read_matrix_csv(b"0,1\n2,3\n"), torch.tensor([[0.0, 1.0], [2.0, 3.0]], dtype=torch.float64))
    assert torch.equal(io.parse_matrix("0 1\n2, 3"), torch.tensor([[0.0, 1.0], [2.0, 3.0]], dtype=torch.float64))
    with pytest.raises(ValueError, match="same number"):
        io.parse_matrix("0 1\n2")
    with pytest.raises(ValueError, match="not a number"):
        io.parse_matrix("0 x\n2 3")
    with pytest.raises(ValueError, match="line 2, column 1"):
        io.read_matrix_csv(b"0,1\nfoo,3\n")


@pytest.mark.parametrize("preset", sample_data.PRESETS)
def test_presets_are_reproducible_and_shaped(preset):
    x1, y1 = sample_data.point_clouds(preset, 30, 20, seed=3)
    x2, y2 = sample_data.point_clouds(preset, 30, 20, seed=3)
    assert x1.shape == (30, 2) and y1.shape == (20, 2)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert torch.isfinite(x1).all() and torch.isfinite(y1).all()


def test_rings_have_their_radii():
    x, y = sample_data.point_clouds("rings", 2000, 2000, seed=0)
    assert abs(float(x.norm(dim=1).mean()) - 0.5) < 0.01
    assert abs(float((y - torch.tensor([0.3, 0.0], dtype=torch.float64)).norm(dim=1).mean()) - 1.2) < 0.01


def test_unknown_preset():
    with pytest.raises(ValueError, match="unknown preset"):
        sample_data.point_clouds("spiral", 3, 3)


def test_matrix_csv_skips_a_header_row_of_names():
    m = io.read_matrix_csv(b"a,b\n1,2\n3,4\n", "sequence")
    assert torch.equal(m, torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64))
    with pytest.raises(ValueError, match="line 1, column 2"):  # a half-numeric first row is data, not a header
        io.read_matrix_csv(b"1,b\n1,2\n")
    with pytest.raises(ValueError, match="line 3, column 1"):  # lines counted in the file, header included
        io.read_matrix_csv(b"a,b\n1,2\nx,4\n")


def test_sequences():
    X = sample_data.sequence("noisy sinusoids", 50, 4, seed=1, noise=0.0)
    assert X.shape == (50, 4) and X.abs().max() <= 1 + 1e-12
    assert torch.equal(X, sample_data.sequence("noisy sinusoids", 50, 4, seed=1, noise=0.0))
    assert sample_data.sequence("random", 7, 3, seed=0).shape == (7, 3)
    with pytest.raises(ValueError, match="unknown sequence"):
        sample_data.sequence("walk", 5, 2)


def test_projections():
    W_Q, W_K, W_V = sample_data.projections(4, None)
    assert torch.equal(W_Q, torch.eye(4, dtype=torch.float64)) and torch.equal(W_V, W_K)
    R = sample_data.projections(200, seed=0)
    assert abs(float(R[0].var()) * 200 - 1) < 0.05 and not torch.equal(R[0], R[1])


def test_typed_numbers_are_read_or_the_bad_piece_is_named():
    assert io.parse_numbers("1, 2.5 -3;4e-1") == [1.0, 2.5, -3.0, 0.4]
    assert io.parse_numbers("-inf 2") == [float("-inf"), 2.0]
    with pytest.raises(ValueError, match=r"score 2 \('x'\) is not a number"):
        io.parse_numbers("1 x", "score")
    with pytest.raises(ValueError, match="type at least one mass"):
        io.parse_numbers(" , ", "mass")


def test_points_table_is_read_like_the_csv():
    table = pd.DataFrame({"cloud": ["source", "source", "target"], "x": [0.0, 1.0, 0.0], "y": [0.0, 0.0, 1.0],
                          "mass": [1.0, 3.0, 2.0]})
    x, a, y, b = io.read_points_table(table)
    for got, want in zip((x, a, y, b), io.read_points_csv(table.to_csv(index=False).encode())):
        assert torch.equal(got, want)
    assert torch.allclose(a, torch.tensor([0.25, 0.75], dtype=torch.float64)) and b.item() == 1.0
    assert list(table.columns) == ["cloud", "x", "y", "mass"] and table["mass"].tolist() == [1.0, 3.0, 2.0]
    x, a, _, _ = io.read_points_table(table.drop(columns="mass"))   # masses default to uniform
    assert torch.equal(a, torch.full((2,), 0.5, dtype=torch.float64))


@pytest.mark.parametrize("change, message", [
    (lambda t: t.assign(x=[0.0, None, 0.0]),
     r"points table has a problem:\n- an empty or non-numeric entry in row 2, column x"),
    (lambda t: t.assign(y=[0.0, "a", 0.0]), r"row 2, column y \('a'\)"),
    (lambda t: t.assign(mass=[1.0, -2.0, 1.0]), r"source masses must be non-negative, but row 2 .* mass -2"),
    (lambda t: t.assign(mass=[1.0, 1.0, 0.0]), "target masses must have a positive total"),
    (lambda t: t.assign(cloud=["source", "source", "left"]), r"not 'left'"),
    (lambda t: t.assign(cloud=["source"] * 3), "points table has no target points"),
    (lambda t: t.drop(columns="y"), "points table has a problem:\n- it needs columns cloud, x, y .* missing: y"),
])
def test_points_table_bad_input_names_the_row_and_column(change, message):
    table = pd.DataFrame({"cloud": ["source", "source", "target"], "x": [0.0, 1.0, 0.0], "y": [0.0, 0.0, 1.0],
                          "mass": [1.0, 1.0, 1.0]})
    with pytest.raises(ValueError, match=message):
        io.read_points_table(change(table))


def test_typed_matrix_errors_name_the_row_and_column():
    with pytest.raises(ValueError, match="row 1 has 2, row 3 has 3"):
        io.parse_matrix("0 1\n2 3\n4 5 6")
    with pytest.raises(ValueError, match=r"entry in row 2, column 1 \('x'\) is not a number"):
        io.parse_matrix("0 1\nx 3")
    with pytest.raises(ValueError, match=r"entry in row 1, column 2 \('inf'\) is not finite"):
        io.parse_matrix("0 inf\n1 3")
    with pytest.raises(ValueError, match=r"row 1, column 1 \('nan'\) is not finite"):
        io.parse_matrix("nan, 1")
    with pytest.raises(ValueError, match="type the cost matrix"):
        io.parse_matrix(" \n ")
    with pytest.raises(ValueError, match=f"the limit is {io.MAX_POINTS} per side"):
        io.parse_matrix(" ".join(["1"] * (io.MAX_POINTS + 1)))


def test_typed_masses_are_counted_and_checked_piece_by_piece():
    assert torch.equal(io.parse_masses("1, 2.5 0", 3, "a"), torch.tensor([1.0, 2.5, 0.0], dtype=torch.float64))
    with pytest.raises(ValueError, match=r"a needs 3 masses \(one per row\), got 2"):
        io.parse_masses("1 1", 3, "a", per="row")
    with pytest.raises(ValueError, match=r"mass of b 2 \('y'\) is not a number"):
        io.parse_masses("1 y", 2, "b")
    with pytest.raises(ValueError, match=r"mass of b 2 \(-1\) must be a non-negative finite number"):
        io.parse_masses("1 -1", 2, "b")
    with pytest.raises(ValueError, match=r"mass of a 1 \(inf\) must be a non-negative finite number"):
        io.parse_masses("inf 1", 2, "a")
    with pytest.raises(ValueError, match="type at least one mass of a"):
        io.parse_masses("", 2, "a")


def test_every_problem_of_a_file_is_named_at_once_in_the_users_words():
    with pytest.raises(ValueError) as err:
        io.read_points_csv(b"cloud,x,y\nleft,1,a\nsource,b,1\n")
    message = str(err.value)
    assert message.startswith("The points file has 3 problems:")
    for part in ("line 2: the cloud column may only say 'source' or 'target', not 'left'",
                 "line 2, column y ('a')", "line 3, column x ('b')", io.POINTS_EXAMPLE):
        assert part in message
    with pytest.raises(ValueError, match="line 3 has 2 values, but the header \\(line 1\\) has 3") as err:
        io.read_points_csv(b"cloud,x,y\nsource,0,0\nsource,1\ntarget,1,1,1\n")
    assert "line 4 has 4 values" in str(err.value) and "Error tokenizing" not in str(err.value)
    with pytest.raises(ValueError, match="not CSV text in UTF-8: byte 0xe0 at position 6") as err:
        io.read_points_csv("cloud,\u00e0".encode("latin-1"))
    assert "codec" not in str(err.value)
    with pytest.raises(ValueError, match="2 problems") as err:
        io.parse_matrix("0 x\n1 2 3")
    assert "row 2 has 3" in str(err.value) and "row 1, column 2 ('x')" in str(err.value)
    with pytest.raises(ValueError, match="2 problems"):
        io.parse_numbers("1 a 2 b", "score")


def test_the_example_files_are_read_by_their_own_parsers():
    x, a, y, b = io.read_points_csv(io.POINTS_EXAMPLE.encode())
    assert x.shape == (3, 2) and y.shape == (2, 2)
    assert torch.allclose(a, torch.tensor([0.25, 0.25, 0.5], dtype=torch.float64))
    assert torch.allclose(b, torch.tensor([0.25, 0.75], dtype=torch.float64))
    C = io.read_matrix_csv(io.MATRIX_EXAMPLE.encode(), example=io.MATRIX_EXAMPLE)
    assert torch.equal(C, torch.tensor([[0.0, 1, 4], [1, 0, 1], [4, 1, 0]], dtype=torch.float64))


# ---- zip uploads: a test split and a model, through the same checks (wviz.io.open_zip) --------------------------

def picture() -> bytes:
    buffer = BytesIO()
    Image.new("RGB", (8, 8), (200, 30, 30)).save(buffer, "PNG")
    return buffer.getvalue()


def refusals(raw: bytes) -> tuple[str, str]:
    """The refusals of ``raw`` as a test split (read_test_zip) and as a model (safety.unpacked)."""
    with pytest.raises(ValueError) as as_test:
        io.read_test_zip(raw, 3, 8, ["a", "b"])
    with pytest.raises(ValueError) as as_model, safety.unpacked(raw):
        pass
    return str(as_test.value), str(as_model.value)


def forged_count(raw: bytes, count: int) -> bytes:
    """``raw`` with the number of entries its end record states set to ``count``."""
    end = struct.unpack("<4s4H2LH", raw[-22:])
    return raw[:-22] + struct.pack("<4s4H2LH", *end[:3], count, count, *end[5:])


HOSTILE_ZIPS = [
    ({"../evil.png": None}, (), r"'\.\./evil\.png' leads outside the zip's folder \('\.\.', backslashes\)"),
    ({"test/a/link.png": b"/etc/passwd"}, ("test/a/link.png",), r"'test/a/link\.png' is a symbolic link"),
    ({"test/a/big.png": bytes(2 * 2 ** 20)}, (), r"'test/a/big\.png' unpacks to 10\d\d times its packed size: "
                                                 "refused as a zip bomb"),
]


@pytest.mark.parametrize("members, links, problem", HOSTILE_ZIPS, ids=[p[:20] for *_, p in HOSTILE_ZIPS])
def test_a_hostile_test_images_zip_is_refused_as_a_model_zip_is(members, links, problem):
    good = {"test/a/1.png": picture(), "test/b/2.png": picture()}
    raw = zipped(good | {k: picture() if v is None else v for k, v in members.items()}, links)
    as_test, as_model = refusals(raw)
    assert re.match(f"The test-images zip has a problem:\n- {problem}\n\nA valid test-images zip looks like", as_test)
    assert re.match(f"The model zip has a problem:\n- {problem}\n\nA valid model zip looks like", as_model)


def test_a_test_images_zip_of_too_many_entries_is_refused_before_it_is_parsed(monkeypatch):
    raw = zipped({"test/a/1.png": picture(), "test/b/2.png": picture(), "test/b/3.png": picture()})
    monkeypatch.setattr(io.zipfile, "ZipFile", lambda *a, **k: pytest.fail("zipfile parsed the directory"))
    as_test, as_model = refusals(forged_count(raw, 65_535))
    assert as_test == ("The test-images zip has a problem:\n- it holds 65,535 files; at most 10,000 images are read "
                       "(wviz opens zips of at most 20,000)")
    assert as_model.startswith("The model zip has a problem:\n- it holds 65,535 files; a model folder has tens")
    # an end record that understates them: the entries' own signatures in the directory are counted
    monkeypatch.setattr(io, "TEST_ZIP", dataclasses.replace(io.TEST_ZIP, most=2))
    with pytest.raises(ValueError, match=r"- it holds 3 files; at most 10,000 images are read \(wviz opens zips of "
                                         r"at most 2\)$"):
        io.read_test_zip(forged_count(raw, 1), 3, 8, ["a", "b"])


def test_a_test_image_whose_declared_size_lies_is_refused_as_it_is_read():
    raw = bytearray(zipped({"test/a/1.png": picture(), "test/b/2.png": picture()}))
    at = raw.index(b"PK\x01\x02")                         # the directory's entry of test/a/1.png
    size = struct.unpack_from("<L", raw, at + 24)[0]
    for change, problem in ((+1000, "test/a/1.png: unpacks to fewer bytes than its header declares"),
                            (-1, "test/a/1.png: Bad CRC-32 for file 'test/a/1.png'")):   # zipfile stops at the size
        struct.pack_into("<L", raw, at + 24, size + change)
        with pytest.raises(ValueError) as err:
            io.read_test_zip(bytes(raw), 3, 8, ["a", "b"])
        assert str(err.value) == f"The test-images zip has a problem:\n- {problem}"


def test_a_member_is_never_read_past_its_declared_size():
    """zipfile itself stops at the declared size; io.unzipped does not rely on it."""
    class Lying:
        def open(self, info):
            return BytesIO(bytes(10))

    info = zipfile.ZipInfo("test/a/1.png")
    info.file_size = 4
    with pytest.raises(ValueError, match="^unpacks to more bytes than its header declares$"):
        b"".join(io.unzipped(Lying(), info))        # type: ignore[arg-type]
    info.file_size = 10
    assert b"".join(io.unzipped(Lying(), info)) == bytes(10)   # type: ignore[arg-type]
