"""What the "Wasserstein self-attention" page computes, built on :mod:`wviz.wsa` (source: the 000 note).

X is a preset sequence or an upload; Q = X W_Q, K = X W_K, V = X W_V; W_ij = W(q_i, k_j) a Wasserstein distance
between the distributions q_i and k_j stand for, A_ij = f(W_ij) and Y = A V, next to scaled dot-product attention
softmax(Q K^T / sqrt(d)) V on the same X and projections.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from wviz import io, sample_data, wsa
from wviz.guide import Try

PRESETS = sample_data.SEQUENCES
UPLOAD = "uploaded CSV"
MAX_ROWS, MAX_MB = io.MAX_POINTS, io.MAX_UPLOAD_BYTES // 2**20   # what an uploaded sequence may hold
REPRESENTATIONS, WEIGHT_MAPS = wsa.REPRESENTATIONS, wsa.WEIGHT_MAPS
EXAMPLE = ("noisy sinusoids", 12, 4, 0)                     # the example upload: preset, n, d, seed


# ---- widget keys and view labels -------------------------------------------------------------------------------

class Keys:
    """The page's widget keys: the names its URL holds (bind="query-params"). The page, TRY_THIS and the tests
    read them here, so a rename cannot leave a guided link pointing nowhere."""
    SEQUENCE = "sequence"
    SEQUENCE_CSV = "sequence_csv"
    N = "n"
    D = "d"
    SEED = "seed"
    IDENTITY = "identity"
    REPRESENTATION = "representation"
    P = "p"
    K = "k"
    WEIGHT_MAP = "weight_map"
    TAU = "tau"
    B = "b"
    S = "s"
    NORMALIZE = "normalize"
    VIEW = "view"


class Labels:
    """The labels of the page's views (the values of its view selectors)."""
    PIPELINE = "The pipeline"
    OUTPUTS = "Outputs along the sequence"


# Guided experiments: query parameters of the page's widgets (bound to the URL) and what to watch.
TRY_THIS = (
    Try("Send tau to 0.01", {Keys.TAU: 0.01, Keys.VIEW: Labels.OUTPUTS},
        "A becomes the identity (each token is at distance 0 from itself and farther from every other; the caption "
        "under the matrices reads A's entries from 0 to 1), so Y (Wasserstein) copies the input X."),
    Try("Send tau to 100", {Keys.TAU: 100, Keys.VIEW: Labels.OUTPUTS},
        "Every row of A is nearly uniform (the caption reads A's entries from about 0.038 to 0.045, near 1/24), so "
        "Y (Wasserstein) is almost a flat line at the average of the values, where X swings by more than 1."),
    Try("Use random projections", {Keys.IDENTITY: False},
        "The diagonal of W is no longer zero: a token's query and key are different vectors, so most rows put "
        "their largest weight on another token (the caption under the matrices: only 2 of the 24 rows on the "
        "token itself)."),
    Try("Use the note's sigmoid, rows not normalised", {Keys.WEIGHT_MAP: "sigmoid", Keys.NORMALIZE: False},
        "The rows of A no longer sum to 1 (the caption under the matrices reads sums from about 1.4 to 3.3: every "
        "key closer than b = 1 gets a weight above 1/2, every farther one less), so an output is no longer an "
        "average of the values."),
    Try("Read vectors as empirical distributions", {Keys.REPRESENTATION: "empirical"},
        "W_1 compares the sorted coordinates and ignores which channel holds which value: the distances are all "
        "under 1 (the caption under the matrices reads W from 0 to about 0.92)."),
)


def sequence(preset: str, n: int | None, d: int | None, seed: int, upload: bytes | None) -> torch.Tensor:
    """The input X (n, d): a preset sequence of n tokens of width d from ``seed``, or, for preset UPLOAD, the
    uploaded CSV (one token per row)."""
    if preset != UPLOAD:
        if n is None or d is None:
            raise ValueError("a preset sequence needs its length n and width d")
        return sample_data.sequence(preset, n, d, seed)
    if upload is None:
        raise ValueError("upload a CSV sequence (n rows of d numbers; the example file under the uploader is one), "
                         "or choose a preset")
    return io.read_matrix_csv(upload, "sequence")


def example_sequence() -> bytes:
    """An example upload: a header row c1..c4, then 12 tokens of 4 channels (the noisy sinusoids of seed 0, to 4
    decimals); even width, so every reading takes it."""
    preset, n, d, seed = EXAMPLE
    X = sample_data.sequence(preset, n, d, seed)
    lines = [",".join(f"c{c + 1}" for c in range(d))] + [",".join(f"{v:.4f}" for v in row) for row in X.tolist()]
    return ("\n".join(lines) + "\n").encode()


@dataclass(frozen=True)
class Inputs:
    """What the controls set apart from tau: the sequence X (n, d); the seed of W_Q, W_K, W_V (None: identities);
    how a vector is read as a distribution (representation, with k points per cloud and the order p of the
    empirical W_p); the weight map f, with the sigmoid's offset b, scale s and row normalisation."""

    X: torch.Tensor
    seed: int | None
    representation: str
    weight_map: str
    b: float
    s: float
    normalize: bool
    k: int
    p: int

    @property
    def projections(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(W_Q, W_K, W_V), each d x d: identities, or i.i.d. N(0, 1/d) entries from the seed."""
        return sample_data.projections(self.X.shape[-1], self.seed)


@dataclass(frozen=True)
class Attention:
    """Wasserstein self-attention of note 000 (ours) and scaled dot-product attention (dot) at temperature
    tau, each a wsa.WSAResult (Y, A, W)."""

    inputs: Inputs
    tau: float
    ours: wsa.WSAResult
    dot: wsa.WSAResult


def problems(i: Inputs) -> list[str]:
    """What stops the chosen reading from taking this sequence, in the page's words, every problem."""
    d = i.X.shape[-1]
    found = []
    if i.representation == "gaussian" and d % 2:
        found.append(f"the sequence has d = {d} channels, but the gaussian reading splits each vector into a mean "
                     f"half and a log-variance half, so its width must be even: choose an even d (or upload an even "
                     f"number of columns), or another reading")
    if i.representation == "cloud" and d % int(i.k):
        fits = [k for k in range(1, d + 1) if d % k == 0]
        found.append(f"the cloud reading cuts each vector of d = {d} numbers into k = {i.k} points of equal size, "
                     f"and {d} is not divisible by {i.k}: choose k among {', '.join(map(str, fits))}")
    return found


def attend(i: Inputs, tau: float) -> Attention:
    """A_ij = f(W(q_i, k_j)) and Y = A V for the chosen reading and weight map, and softmax(Q K^T / sqrt(d)) V;
    settings the reading cannot take raise one ValueError naming each problem."""
    found = problems(i)
    if found:
        raise ValueError("; ".join(found))
    W_Q, W_K, W_V = i.projections
    ours = wsa.wasserstein_self_attention(i.X, W_Q, W_K, W_V, representation=i.representation,
                                          weight_map=i.weight_map, tau=tau, b=i.b, s=i.s, normalize=i.normalize,
                                          k=int(i.k), p=int(i.p))
    return Attention(i, tau, ours, wsa.dot_product_attention(i.X, W_Q, W_K, W_V))


def at_defaults():
    """The page's attention at its default inputs (the first preset, n = 24, d = 8, seed 0, identity projections,
    the first reading and weight map) as a function of tau (its main slider): bench_latency's reference draws it."""
    inputs = Inputs(sequence(PRESETS[0], 24, 8, 0, None), None, REPRESENTATIONS[0], WEIGHT_MAPS[0], 1.0, 0.5, True,
                    2, 1)
    return lambda tau: attend(inputs, tau)


@dataclass(frozen=True)
class Summary:
    """What the caption under the matrices reads of an Attention: the range of W and of A's entries, the range of
    A's row sums, and how many of the n rows put their largest weight on the token itself (A_ii)."""

    w_range: tuple[float, float]
    a_range: tuple[float, float]
    row_sums: tuple[float, float]
    on_self: int
    n: int

    @property
    def stochastic(self) -> bool:
        """Whether every row of A sums to 1 (to rounding): each output an average of the values."""
        return max(abs(self.row_sums[0] - 1), abs(self.row_sums[1] - 1)) < 1e-9


def summary(a: Attention) -> Summary:
    """The numbers of the caption under the page's matrices (the note's W and A, not the dot product's)."""
    A, W = a.ours.A, a.ours.W
    sums = A.sum(dim=-1)
    on_self = int((A.argmax(dim=-1) == torch.arange(A.shape[0], device=A.device)).sum())
    return Summary((float(W.min()), float(W.max())), (float(A.min()), float(A.max())),
                   (float(sums.min()), float(sums.max())), on_self, int(A.shape[0]))
