"""Page "Particles and contraction": self-attention as interacting particles and W1 contraction (source: 003)."""
import streamlit as st

from wviz import ui
from wviz.figures import particles as figs
from wviz.figures.common import number_tex, number_text
from wviz.views import particles as pv

device = ui.page_setup(
    "Particles and contraction",
    f"*A Mathematical Theory of Attention* ({ui.cite('003')}) reads a set of tokens as the empirical measure "
    "$m(X) = \\frac1N\\sum_t \\delta_{x_t}$ and self-attention as a nonlinear Markov transport "
    "$\\mu \\mapsto \\mu\\mathbf A_\\mu$: every token is a particle that moves to the average of the values, "
    "weighted by a Boltzmann-Gibbs measure. Stack layers and the particles interact; measure how far two inputs end "
    "up with the 1-Wasserstein distance $W_1$, and ask whether attention contracts it.",
    try_this=pv.TRY_THIS, keys=pv.Keys,
)
ui.equation(r"\begin{aligned}\Psi_g(\nu)(dx) &= \frac{g(x)\,\nu(dx)}{\nu(g)} &&\text{(Def. 3)}\\ "
            r"\mathbf A_\mu(x, dz) &= \Pi\big[\Psi_{G(x,\cdot)}(\mu)\,L\big](dz) &&\text{(Def. 8)}\\ "
            r"\delta_q\mathbf A_{m(K)} &= \delta_{\sum_j \mathrm{softmax}_j(a(q,K))\, v_j} &&\text{(Prop. 9)}"
            r"\end{aligned}")
ui.equation(r"\begin{aligned}G(x,y) &= e^{\langle xW_Q,\, yW_K\rangle/\tau} &&\text{(dot)}\\ \text{or }G(x,y) &= "
            r"e^{-\lVert xW_Q - yW_K\rVert^2/\tau} &&\text{(gaussian)}\\ L(y, dv) &= \delta_{yW_V}(dv)\end{aligned}")
st.caption(r"On this page $\tau$ is the temperature of the potential $G$, and $\kappa(\mathbf A)$ the contraction "
           f"coefficient of Def. 22, which {ui.cite('003')} writes $\\tau(\\mathbf A)$.")

# ---- controls ---------------------------------------------------------------------------------------------
sb = st.sidebar
source = sb.selectbox("Particles", [*pv.PRESETS, pv.UPLOAD], key=pv.Keys.PRESET, bind="query-params",
                      help="The input tokens X^0 in the plane.")
source_slot = sb.container()  # N, or the uploader, drawn here by read_inputs below
seed = sb.number_input("seed", 0, 2**31 - 1, 0, key=pv.Keys.SEED, bind="query-params",
                       help="Seed of the preset, the random weights and the sampled perturbations.")
layers = sb.slider("layers", 1, 40, 10, key=pv.Keys.LAYERS, bind="query-params", help="Depth L of the particle flow.")
potential = sb.radio("Interaction potential G", list(pv.POTENTIALS), index=1, key=pv.Keys.POTENTIAL,
                     bind="query-params", horizontal=True,
                     help="dot: exp(<q, k> / tau), the Transformer's; gaussian: exp(-||q - k||^2 / tau) (Sec. 6.3).")
tau_slot = sb.container()  # tau is drawn here by ui.live below
identity = sb.toggle("W_Q = W_K = W_V = identity", True, key=pv.Keys.IDENTITY, bind="query-params",
                     help="Off: random N(0, 1/2) weights from the seed.")
shared = sb.toggle("shared weights (Universal Transformer)", True, key=pv.Keys.SHARED, bind="query-params",
                   disabled=identity,
                   help="One (W_Q, W_K, W_V) for every layer (Sec. 6.2); off: fresh random weights per layer.")
value_scale = sb.slider("value scale s (W_V -> s W_V)", 0.1, 1.5, 1.0, 0.05, key=pv.Keys.VALUE_SCALE,
                        bind="query-params",
                        help=r"Shrinks or stretches the lookup $l(y) = y W_V$; $K_\ell = \lVert W_V\rVert$ enters "
                             r"Thm. 23 as $\kappa(L)$.")
residual = sb.toggle("residual connection", False, key=pv.Keys.RESIDUAL, bind="query-params",
                     help="x^{h+1} = x^h + Attention(x^h) (Remark 10) instead of x^{h+1} = Attention(x^h).")
norm = sb.toggle("normalise onto the unit circle", False, key=pv.Keys.NORM, bind="query-params",
                 help="After each layer, x -> x / ||x|| (a LayerNorm without centring or gain).")
ground = sb.radio("W1 ground metric", list(pv.GROUNDS), key=pv.Keys.GROUND, bind="query-params", horizontal=True,
                  help="l1 is the paper's (Sec. 4) and the one its bounds are stated in; l2 for comparison.")


def read_inputs():
    """X^0 from a preset of N particles, or X and Y from an uploaded CSV, with the settings above."""
    n = data = None
    if source != pv.UPLOAD:
        n = source_slot.slider("N (particles)", 4, 200, 40, key=pv.Keys.N, bind="query-params",
                               help="Number of tokens.")
    else:
        upload = source_slot.file_uploader(
            "Particles (CSV)", type=["csv"], key=pv.Keys.PARTICLES_CSV,
            help="Columns cloud, x, y (as on the Transport plans page): the 'source' rows are X, the 'target' rows "
                 "a second input Y compared with X in the contraction view. Particles are uniform measures: leave "
                 "out the mass column or keep it constant.")
        with source_slot:
            ui.example_file("Example particles CSV", pv.example_particles_csv(), "particles_example.csv",
                            help="X: six points on the unit circle; Y: the same turned by 30 degrees and pulled in "
                                 "to radius 0.8. A file the uploader above accepts, to start from.")
        data = None if upload is None else upload.getvalue()
    return pv.inputs(source, n, data, seed, layers, potential, identity, shared, value_scale, residual, norm, ground)


inputs = ui.guarded("particles/inputs", read_inputs)


@st.cache_data(max_entries=1, show_spinner=False)
def cor30_failure():
    return pv.cor30_failure()


# ---- what tau drives ------------------------------------------------------------------------------------------

def tau_slider(where):
    return ui.log_slider("tau (temperature)", 1e-2, 1e2, 0.3, key=pv.Keys.TAU, where=where,
                         help="Small tau: each particle listens to its nearest neighbours only; large tau: to "
                              "everyone.")


def draw(f: pv.Flow):
    i = f.inputs
    st.subheader("The particle flow")
    ui.equation(r"\begin{aligned}\delta_{x_i^{h+1}} &= \delta_{x_i^h}\,\mathbf A^h_{m(X^h)}\\ "
                r"x_i^{h+1} &= \sum_j \frac{G(x_i^h, x_j^h)}{\sum_k G(x_i^h, x_k^h)}\, x_j^h W_V\end{aligned}")
    ui.show_figure(figs.main_figure(f), key="animation")
    taus = ui.log_grid(pv.Keys.TAU)
    flow_inputs = {**pv.live_inputs(f), "traces": figs.FLOW_TRACES, "taus": taus,
                   "titles": [figs.flow_title(i.layers, i.potential, tau) for tau in taus]}
    if not ui.follow("animation", "flow", {"tau": ui.Slider(pv.Keys.TAU, taus)}, {"tau": f.tau}, flow_inputs,
                     entries=i.n * i.n * i.layers):
        st.caption(f"The flow changes when tau is released: {i.n} particles through {i.layers} layers are more than "
                   "the browser recomputes within a frame.")
    ui.animation("flow", "The particle flow", lambda: figs.flow_frames(f.trajectory, f"{i.potential}, tau = {f.tau:g}"))
    st.caption("Press Play or drag the layer slider; grey lines are the paths so far, colours follow each particle. "
               "With the Gaussian potential and no residual, every layer is a step of Gaussian mean shift: particles "
               r"within about $\sqrt{\tau}$ of each other merge into clusters.")
    ui.show_figure(figs.layer_steps(f.steps, i.ground), key="layer_steps")
    st.caption("How far the measure moves at each layer. A map that contracts W1 makes these steps shrink "
               "geometrically; once the particles have merged, nothing moves. These steps follow tau when it is "
               "released: each W1 is an exact transport problem, solved in Python.")
    ui.views({pv.Labels.CONTRACTION: contraction_view(f), pv.Labels.INFINITE_DEPTH: fixed_point_view(f),
              pv.Labels.MAXIMUM_ENTROPY: max_entropy_view(f), pv.Labels.SIDE_BY_SIDE: side_view(f)},
             help="Does one layer bring two inputs closer (Def. 22, Thm. 23, Cor. 30)? Where does the shared layer "
                  "lead at infinite depth (Prop. 26)? Why softmax (Thm. 14)? The flow at two temperatures. The "
                  "lecture bundle holds them all.", key=pv.Keys.VIEW)


def contraction_figure(con: pv.ContractionCheck):
    return figs.contraction_scatter(con.sampled.w1_in, con.sampled.w1_out, con.slopes, con.pair, con.perturbation)


def contraction_notes(con: pv.ContractionCheck, i: pv.Inputs) -> str:
    notes = [("One attention layer (the first layer's weights, without residual or normalisation, as in the "
              "paper). Points below a line respect that bound.")]
    if con.perturbation == "swap":
        notes.append(r"Swap uses Prop. 25's two neighbourhoods of a token, but plots the whole-measure ratio "
                     r"$W_1(\mu\mathbf A_\mu, \nu\mathbf A_\nu) / W_1(\mu, \nu)$ over all $k$ tokens, not Prop. 25's "
                     r"single-query distance $\lVert \mathrm{Attention}(x_t, X_{N(t)}) - "
                     r"\mathrm{Attention}(x_t, X_{N'(t)})\rVert$.")
    if i.ground != "l1":
        notes.append("The bounds are stated for the l1 ground metric: switch to l1 to see them.")
        return " ".join(notes)
    notes.append(r"The worst infinitesimal move is the largest column $\ell_1$ norm of the Jacobian of "
                 r"$X \mapsto \mathbf A(X)$; its supremum over $X$ is $\kappa(\mathbf A)$ restricted to $N$-point "
                 "measures.")
    t23 = con.thm23
    if t23:
        tex = number_tex
        notes.append(rf"Thm. 23 on the box $E$ around every input: $\operatorname{{diam}}(E) = {tex(t23.diam)}$, "
                     rf"$\epsilon(G) = {tex(t23.eps)}$, $\lVert G\rVert_\infty = {tex(t23.sup)}$, "
                     rf"$\lVert G\rVert_{{Lip,\infty}} = {tex(t23.lip_first)}$, "
                     rf"$\lVert G\rVert_{{\infty,Lip}} = {tex(t23.lip_second)}$, $K_\ell = {tex(t23.k_l)}$. "
                     "As printed, "
                     r"Thm. 23 misses the $\lVert G\rVert_\infty / \epsilon(G)$ term (Prop. 19's proof pulls "
                     r"$\lVert f\rVert_\infty$ out of an integral against the signed measure $\mu - \nu$); without it "
                     "a translated cloud, whose output is just translated (ratio 1), can beat the bound.")
    if con.cor30 is None:
        notes.append(r"Cor. 30 is drawn for the Gaussian potential with $W_Q = W_K = I$ only (any $\tau$: the "
                     "ratio does not change when every point is scaled).")
    return " ".join(notes)


def contraction_view(f: pv.Flow) -> ui.View:
    def draw_view():
        st.subheader("Contraction: does one layer bring two inputs closer?")
        ui.equation(r"\begin{aligned}\kappa(\mathbf A) &= \sup_{\mu\ne\nu}\frac{W_1(\mu\mathbf A_\mu,\ "
                    r"\nu\mathbf A_\nu)}{W_1(\mu,\nu)}\ \text{(Def. 22)}\\ W_1(\mu,\nu) &= "
                    r"\min_{\pi\in\mathcal C(\mu,\nu)}\iint \lVert x-y\rVert_1\,\pi(dx,dy)\end{aligned}")
        ui.equation(r"\begin{aligned}&\text{Thm. 23 (corrected): } \kappa(\mathbf A) \le d\, K_\ell\,"
                    r"\frac{N_G}{\epsilon(G)},\\ &N_G = 2(\lVert G\rVert_{Lip,\infty} + \lVert "
                    r"G\rVert_{\infty,Lip})\operatorname{diam}(E) + \lVert G\rVert_\infty\end{aligned}")
        ui.equation(r"\begin{aligned}&\text{Cor. 30: } \frac{W_1(\mu\mathbf A_\mu, \nu\mathbf A_\nu)}"
                    r"{W_1(\mu,\nu)} \le 2 d K_\ell\,B_N,\\ &B_N = \sqrt d\sqrt{\ln N + \tfrac1{2e}}\,"
                    r"\lVert G\rVert_{Lip} + \lVert G\rVert_\infty + \sqrt d + 2\end{aligned}")
        c1, c2, c3 = st.columns(3)
        perturbation = c1.radio("Perturbation", list(pv.PERTURBATIONS), key=pv.Keys.PERTURBATION,
                                bind="query-params", horizontal=True,
                                help="noise: nu = m(X + sigma Z); drop: nu = m(X without one token); swap (Prop. 25's "
                                     "neighbourhoods): the k nearest neighbours of a token against the token and k - 1 "
                                     "random others.")
        sigma = c2.select_slider("sigma (noise)", [0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0], 0.1, key=pv.Keys.SIGMA,
                                 bind="query-params", disabled=perturbation != "noise",
                                 help="Standard deviation of the noise added to every coordinate.")
        n_samples = c3.slider("samples", 4, 64, 16, key=pv.Keys.SAMPLES, bind="query-params",
                              help="Number of sampled pairs.")
        con = ui.guarded("particles/contraction", lambda: pv.contraction(f, perturbation, n_samples, sigma))
        if con is None:
            return
        ui.show_figure(contraction_figure(con), key="contraction")
        m1, m2, m3 = st.columns(3)
        m1.metric("largest ratio", number_text(con.largest_ratio, 3, chars=8),
                  help=r"The largest sampled $W_1(\mu\mathbf A_\mu, \nu\mathbf A_\nu) / W_1(\mu, \nu)$: a lower "
                       r"bound of $\kappa(\mathbf A)$.")
        m2.metric("Thm. 23 bound", number_text(con.thm23.bound, 3, chars=8) if con.thm23 else "n/a",
                  help=r"Thm. 23's upper bound on $\kappa(\mathbf A)$, with the missing $\lVert G\rVert_\infty / "
                       r"\epsilon(G)$ term restored ($\ell_1$ "
                       "ground metric only).")
        m3.metric("Cor. 30 bound", number_text(con.cor30, 3, chars=8) if con.cor30 else "n/a",
                  help="Cor. 30's bound on the ratio, as printed (Gaussian potential with W_Q = W_K = I only).")
        st.caption(contraction_notes(con, f.inputs))

    return ui.View(draw_view, ("contraction",), lambda: [contraction_figure(pv.contraction(f, "noise", 16, 0.1))])


def fixed_point_figure(fix: pv.FixedPointCheck):
    return figs.fixed_point_history(fix.result.steps, fix.result.to_last, fix.envelope)


def fixed_point_caption(fix: pv.FixedPointCheck) -> str:
    fp, c = fix.result, fix.banach
    status = (f"converged after {fp.n_iter} iterations" if fp.converged else
              f"not converged after {fp.n_iter} iterations")
    if fix.envelope is not None:
        proof = (f"Thm. 23 (corrected) gives kappa(T) <= {number_text(c.bound, 3)} < 1 on E = [-r, r]^2, which T "
                 "maps into itself: Prop. 26 applies, the fixed point is unique and the same for every input in E.")
    elif c is not None:
        proof = (f"Thm. 23 (corrected) gives only kappa(T) <= {number_text(c.bound, 3)}, so Prop. 26 does not "
                 "apply; shrink the values (value scale) to make the map provably contract.")
        if fix.lone_points_fixed:
            proof += (" Here every single point is a fixed point (a lone particle attends only to itself), "
                      "so the limit depends on the input.")
    else:
        proof = ("Prop. 26 is not checked here: residual connections, normalisation, the l2 metric or a W_V "
                 "that leaves E take the map outside Thm. 23's setting.")
    return f"The first layer's map T iterated from X^0: {status}. {proof}"


def fixed_point_view(f: pv.Flow) -> ui.View:
    def draw_view():
        st.subheader("Infinite depth: the fixed point of the shared layer")
        ui.equation(r"\begin{aligned}&X^{\ell+1} = T(X^\ell)\ \text{(Sec. 6.2)},\\ &\kappa(T) < 1 \Rightarrow "
                    r"W_1(\mu^\ell, \mu^*) \le \frac{\kappa(T)^\ell}{1-\kappa(T)}\, W_1(\mu^1, \mu^0)\ "
                    r"\text{(Prop. 26)}\end{aligned}")
        fix = ui.guarded("particles/fixed_point", lambda: pv.fixed_point(f))
        if fix is not None:
            ui.show_figure(fixed_point_figure(fix), key="fixed_point")
            st.caption(fixed_point_caption(fix))

    return ui.View(draw_view, ("fixed_point",), lambda: [fixed_point_figure(pv.fixed_point(f))])


def max_entropy_figure(chk):
    return figs.max_entropy(chk.t, chk.entropies, chk.entropy)


def max_entropy_view(f: pv.Flow) -> ui.View:
    def draw_view():
        st.subheader("Why softmax: maximum entropy (Thm. 14)")
        ui.equation(r"\begin{aligned}\Psi_{G(x,\cdot)}(\nu) &= \arg\max\big\{H_\nu(\mu) = "
                    r"-\mathrm{KL}(\mu\,\Vert\,\nu)\ :\\ &\qquad \mu \ll \nu,\ \mu(k(x,\cdot)) = f(x)\big\},"
                    r"\\ G(x,y) &= e^{\langle\lambda(x),\, k(x,y)\rangle}\end{aligned}")
        query = st.number_input("query token i", 1, max(f.inputs.n, 1), 1, key=pv.Keys.QUERY, bind="query-params",
                                help=r"$x = x_i^0$ queries $\nu = m(X^0)$ (particles counted from 1).")
        chk = ui.guarded("particles/maxent", lambda: pv.max_entropy(f, query))
        if chk is not None:
            ui.show_figure(max_entropy_figure(chk), key="maxent")
            # what is drawn, and why only the tokens that carry weight (pv.max_entropy): the peak is seen
            st.caption("Each curve moves away from the Boltzmann-Gibbs measure (the star) along a random direction "
                       r"that keeps the total mass and the encoded moment $k = y W_K$ (and $\lVert y W_K\rVert^2$ "
                       "for the Gaussian potential), as far as the weights stay non-negative, moving mass only "
                       f"between the {pv.carriers(chk)} heaviest tokens (those with at least {pv.CARRIES:g} of the "
                       "largest weight, or the fewest a direction needs): through a token of weight $10^{-18}$ no "
                       "step could be longer than that. By the "
                       r"proof of Thm. 14 each curve falls by $\mathrm{KL}(\mu\,\Vert\,\Psi_{G(x,\cdot)}(\nu))$: "
                       "it peaks at $t = 0$, at the attention weights.")

    return ui.View(draw_view, ("maxent",), lambda: [max_entropy_figure(pv.max_entropy(f, 1))])


def side_figure(i: pv.Inputs, tau: float):
    f = pv.flow(i, tau)
    return figs.particles_at(f.trajectory, i.layers, f"tau = {tau:g}: layer {i.layers}", height=440)


def side_view(f: pv.Flow) -> ui.View:
    return ui.side_by_side(
        "tau", pv.Keys.SIDE_TAU, 1e-2, 1e2, pv.SIDE_TAUS, lambda side, tau: side_figure(f.inputs, tau),
        help="The temperature of the {side} flow.",
        caption=r"The same particles through the same layers at two temperatures: a small $\tau$ merges only near "
                r"neighbours (many small clusters), a large $\tau$ lets every particle reach every other (one "
                "cluster).")


ui.live("particles/flow", ui.style.beside_figure(tau_slot), tau_slider,
        lambda tau: None if inputs is None else pv.flow(inputs, tau), draw)

with st.expander("Where Cor. 30 fails (N up to 10^12, d = 1)"):
    failure = cor30_failure()
    ui.show_figure(figs.cor30_failure(failure.n, failure.ratio, failure.bound), key="cor30_failure")
    st.caption(r"A token at 0 between two clusters of $(N - 1) / 2$ tokens at $-R$ and $R$, with $R$ chosen so that "
               r"the clusters hold 85 % of its Boltzmann-Gibbs weight ($q = 0.85$); moving that token alone gives the "
               r"ratio $(1 - q) + 2 q R^2$, which grows like $2 q \ln N$, while Cor. 30's bound grows like "
               r"$\sqrt{\ln N}$. The curves cross near $N = 3 \cdot 10^4$ (a run with 40 001 distinct tokens confirms "
               r"it). Prop. 28's proof rescales $m(X)$ to the mass-$N$ measure $\sum_i \delta_{x_i}$ and then uses "
               "the Kantorovich-Rubinstein bound, which holds for probability measures only.")
