"""The works wviz implements or cites, in full: the five source documents that the pages implement (000 to 004:
notes and papers, cited in docstrings by these short names) and the papers behind Sinkhorn, sparse regularised
transport, sparsemax and entmax, semi-relaxed (unbalanced) transport and its solver, doubly-stochastic attention
and attention rollout. The References page lists them; pages link to an entry with ui.cite(key)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reference:
    key: str       # the anchor on the References page, "ref-<key>"
    short: str     # how a page names it in a sentence
    citation: str  # the full citation (markdown)
    url: str = ""  # where to read it, when it has a public address
    used_on: str = ""  # which wviz pages implement what

    @property
    def anchor(self) -> str:
        return f"ref-{self.key}"


REFERENCES = {r.key: r for r in (
    Reference("000", "Wasserstein self-attention note (000)",
              "*Wasserstein Self-Attention Mechanism*. Unpublished technical note (no author or date given), source "
              "document 000 of wviz. It proposes attention weights A_ij = f(W(q_i, k_j)), with W a Wasserstein "
              "distance between the distributions that a query and a key stand for and f decreasing (e.g. a "
              "sigmoid), and outputs Y = A V.",
              used_on="Wasserstein self-attention"),
    Reference("001", "One-sided entropic OT note (001)",
              "MTandHJ. *Scaled-Dot-Product Attention as One-Sided Entropic Optimal Transport*. Note, 29 July "
              "2025, on arXiv:2508.08369. Source document 001 of wviz.",
              "https://arxiv.org/abs/2508.08369", "Attention as transport, Transport plans"),
    Reference("002", "Fenchel-dual paper (002)",
              "Anonymous authors. *Deciphering Attention Mechanisms: Optimization and Fenchel Dual Solutions*. "
              "Paper under double-blind review. Source document 002 of wviz.",
              used_on="Attention solves a dual problem, Real transformer"),
    Reference("003", "Vuckovic et al. 2020 (003)",
              "James Vuckovic, Aristide Baratin, Remi Tachet des Combes. *A Mathematical Theory of Attention*. "
              "arXiv:2007.02876, 2020. Source document 003 of wviz.",
              "https://arxiv.org/abs/2007.02876", "Particles and contraction"),
    Reference("004", "Stochastic ViT paper (004)",
              "Franciskus Xaverius Erick, Mina Rezaei, Johanna Paula Müller, Bernhard Kainz. *Stochastic Vision "
              "Transformers with Wasserstein Distance-Aware Attention*. arXiv:2311.18645, 2023. Source document "
              "004 of wviz (a summary of the paper).",
              "https://arxiv.org/abs/2311.18645", "Gaussian W2 attention, Uncertainty inspector"),
    Reference("cuturi2013", "Cuturi 2013",
              "Marco Cuturi. *Sinkhorn Distances: Lightspeed Computation of Optimal Transport*. Advances in Neural "
              "Information Processing Systems 26 (NIPS 2013), 2292-2300.",
              "https://arxiv.org/abs/1306.0895", "Transport plans (Sinkhorn), Fenchel dual (OT attention)"),
    Reference("blondel2018", "Blondel et al. 2018",
              "Mathieu Blondel, Vivien Seguy, Antoine Rolet. *Smooth and Sparse Optimal Transport*. Proceedings of "
              "the 21st International Conference on Artificial Intelligence and Statistics (AISTATS 2018), PMLR 84, "
              "880-889.",
              "https://arxiv.org/abs/1710.06276",
              "Attention as transport (sparsemax and entmax as regularised argmax), Transport plans (quadratic OT)"),
    Reference("martins2016", "Martins and Astudillo 2016",
              "André F. T. Martins, Ramón F. Astudillo. *From Softmax to Sparsemax: A Sparse Model of Attention and "
              "Multi-Label Classification*. Proceedings of the 33rd International Conference on Machine Learning "
              "(ICML 2016), PMLR 48, 1614-1623.",
              "https://arxiv.org/abs/1602.02068", "Attention as transport, Real transformer (sparsemax)"),
    Reference("peters2019", "Peters et al. 2019",
              "Ben Peters, Vlad Niculae, André F. T. Martins. *Sparse Sequence-to-Sequence Models*. Proceedings of "
              "the 57th Annual Meeting of the Association for Computational Linguistics (ACL 2019), 1504-1519.",
              "https://aclanthology.org/P19-1146", "Attention as transport, Real transformer (alpha-entmax)"),
    Reference("chizat2018", "Chizat et al. 2018",
              "Lénaïc Chizat, Gabriel Peyré, Bernhard Schmitzer, François-Xavier Vialard. *Scaling Algorithms for "
              "Unbalanced Optimal Transport Problems*. Mathematics of Computation 87(314), 2563-2609, 2018 "
              "(arXiv:1607.05816).",
              "https://arxiv.org/abs/1607.05816",
              "Attention as transport, Transport plans, Real transformer (semi-relaxed OT: the rho slider)"),
    Reference("sejourne2022", "Séjourné et al. 2022",
              "Thibault Séjourné, François-Xavier Vialard, Gabriel Peyré. *Faster Unbalanced Optimal Transport: "
              "Translation Invariant Sinkhorn and 1-D Frank-Wolfe*. Proceedings of the 25th International Conference "
              "on Artificial Intelligence and Statistics (AISTATS 2022), PMLR 151.",
              "https://arxiv.org/abs/2201.00730", "Transport plans (the semi-relaxed solver's translation of the "
              "dual potentials)"),
    Reference("sander2022", "Sander et al. 2022",
              "Michael E. Sander, Pierre Ablin, Mathieu Blondel, Gabriel Peyré. *Sinkformers: Transformers with "
              "Doubly Stochastic Attention*. Proceedings of the 25th International Conference on Artificial "
              "Intelligence and Statistics (AISTATS 2022), PMLR 151, 3515-3530.",
              "https://arxiv.org/abs/2110.11773", "Real transformer (Sinkhorn attention), Attention as transport"),
    Reference("abnar2020", "Abnar and Zuidema 2020",
              "Samira Abnar, Willem Zuidema. *Quantifying Attention Flow in Transformers*. Proceedings of the 58th "
              "Annual Meeting of the Association for Computational Linguistics (ACL 2020), 4190-4197.",
              "https://arxiv.org/abs/2005.00928", "Uncertainty inspector (attention rollout)"),
)}


def link_text(key: str, text: str | None = None) -> str:
    """A markdown link to the entry ``key`` on the References page (a relative URL: it works behind any host)."""
    ref = REFERENCES[key]
    return f"[{text or ref.short}](references#{ref.anchor})"
