"""Page "Attention as transport": softmax, sparsemax, entmax and prior-softmax as argmins of -<s, p> + tau Omega(p),
and semi-relaxed OT, the road from softmax to Sinkhorn's doubly-stochastic attention."""
import streamlit as st

from wviz import ui
from wviz.figures import attention_transport as figs
from wviz.figures.common import number_tex, table_text, vector_tex
from wviz.views import attention_transport as av

OMEGA_TEX = {
    "softmax": r"\sum_j p_j \log p_j",
    "sparsemax": r"\tfrac12 \lVert p \rVert^2",
    "entmax": r"\frac{\sum_j p_j^{\alpha} - 1}{\alpha(\alpha - 1)}",
    "prior-softmax": r"\mathrm{KL}(p \,\Vert\, \pi)",
}
# semi-relaxed OT is not a map of one query's scores: its problem couples the queries through the keys' column sums
SEMI_TEX = (r"\text{semi-relaxed OT}: P^\star &= \arg\min_{P \ge 0,\ P 1 = a} \langle C, P \rangle",
            r"&\quad + \tau\, \mathrm{KL}(P \,\Vert\, a b^\top) + \rho\, \mathrm{KL}(P^\top 1 \,\Vert\, b)",
            r"C_{ij} &= -\langle x_i, k_j \rangle,\quad p^\star = n P^\star_{1\cdot}")
SIZES = [16, 64, 256, 1024, 2048, 4096]
MANY_SEED = 0   # of the Many queries view's random queries and keys

device = ui.page_setup(
    "Attention as regularised transport",
    "A query spreads one unit of attention over m keys. Paying the cost $C_j = -\\langle q, k_j \\rangle$ per "
    "unit sent to key $j$, the cheapest plan puts everything on the best key (argmax). Adding a regulariser "
    "$\\tau\\,\\Omega(p)$ spreads the mass: with the negative entropy the optimum is exactly softmax "
    f"(one-sided entropic optimal transport, eqs. (4)-(5) of {ui.cite('001')}); other regularisers give "
    f"sparsemax ({ui.cite('martins2016')}), entmax ({ui.cite('peters2019')}) and prior-softmax (eq. (13) and its "
    f"table; sparsemax and entmax as regularised argmax: {ui.cite('blondel2018')}). **Semi-relaxed OT** "
    f"({ui.cite('chizat2018')}) is the road from softmax to Sinkhorn's doubly-stochastic attention "
    f"({ui.cite('sander2022')}): several queries share the keys, each query still spreads exactly its mass, and "
    "$\\rho$ sets how firmly every key is held to receive its share $b_j$ from all of them together.",
    try_this=av.TRY_THIS, keys=av.Keys,
)
ui.equation(r"\begin{aligned} p^\star &= \arg\min_{p \in \Delta^{m-1}} \; -\langle s, p \rangle + \tau\, \Omega(p)"
            r" \\ s_j &= \langle q, k_j \rangle \end{aligned}")

# ---- controls ---------------------------------------------------------------------------------------------
sb = st.sidebar
source = sb.radio("Query and keys", ["2-D points", "random", "typed scores"], key=av.Keys.SOURCE,
                  bind="query-params",
                  help="2-D points: edit a query and keys in tables. Random: Gaussian q and k_j in R^d. "
                       "Typed scores: enter s_j directly.")
tau_slot = sb.container()  # tau is drawn here by ui.live below (above its figure in presentation mode)
mechanisms = sb.multiselect("Mechanisms", list(av.CHOICES), default=list(av.DEFAULT_MECHANISMS),
                            key=av.Keys.MECHANISMS, bind="query-params",
                            help="Each is the argmin of the same objective with a different regulariser Omega; "
                                 "semi-relaxed OT solves one transport problem for several queries at once (the "
                                 "'rho sweep' view says which) and shows this query's row.")
alpha = sb.slider("alpha (entmax index)", 1.0, 2.0, av.DEFAULT_ALPHA, 0.05, key=av.Keys.ALPHA, bind="query-params",
                  disabled="entmax" not in mechanisms,
                  help="Tsallis entropy index of entmax: alpha = 1 is softmax, alpha = 2 is sparsemax.")
rho = sb.select_slider("rho (semi-relaxed OT)", av.RHOS, av.DEFAULT_RHO, format_func=av.rho_text, key=av.Keys.RHO,
                       bind="query-params",
                       help="How firmly the keys' masses b are held: the weight of KL(P^T 1 | b). rho -> 0 gives "
                            "softmax (the prior-softmax with prior b), rho = ∞ Sinkhorn's balanced plan, where every "
                            "key receives exactly b_j from all queries together. Drives the semi-relaxed OT bars and "
                            "the 'rho sweep' view.")


def read_scores():
    """The score vector s (m,) from the chosen source and every query's scores (n, m) for semi-relaxed OT (row 0:
    s; None with typed scores: one query); raises ValueError on bad input."""
    if source == "2-D points":
        c1, c2 = sb.columns(2)
        qx = c1.number_input("query x", value=av.DEFAULT_QUERY[0], step=0.1, key=av.Keys.QUERY_X, bind="query-params",
                             help="First coordinate of q.")
        qy = c2.number_input("query y", value=av.DEFAULT_QUERY[1], step=0.1, key=av.Keys.QUERY_Y, bind="query-params",
                             help="Second coordinate of q.")
        sb.caption("Keys k_j, one per row; add or delete rows to change m.")
        keys = ui.table_editor(av.DEFAULT_KEYS, av.Keys.KEYS_TABLE, where=sb, num_rows="dynamic")
        s = av.scores_from_points((qx, qy), keys)
        return s, av.queries_from_points(s, keys)
    if source == "random":
        m = sb.slider("m (keys)", 2, 64, 6, key=av.Keys.M, bind="query-params", help="Number of keys.")
        d = sb.slider("d (dimension)", 1, 64, 4, key=av.Keys.D, bind="query-params", help="Dimension of q and k_j.")
        seed = sb.number_input("seed", 0, 2**31 - 1, 0, key=av.Keys.SEED, bind="query-params",
                               help="Seed of the random query and keys.")
        s = av.scores_random(m, d, seed)
        return s, av.queries_random(s, m, d, seed)
    return av.scores_typed(sb.text_input("scores s_j", "2.0, 1.0, 0.5", key=av.Keys.SCORES, bind="query-params",
                                         help="Comma- or space-separated numbers; -inf masks a key.")), None


def read_prior(m: int):
    """The prior pi over the m keys from its editor (shown only when prior-softmax or semi-relaxed OT is chosen:
    it is semi-relaxed OT's target b)."""
    if "prior-softmax" not in mechanisms and av.SEMI not in mechanisms:
        return None
    sb.caption("Prior pi over the keys for prior-softmax, and the keys' target b of semi-relaxed OT: non-negative, "
               "summing to 1; a zero masks a key.")
    return av.prior_from_table(ui.table_editor(av.prior_table(m), av.Keys.PRIOR_TABLE.format(m), where=sb,
                                               disabled=["key"], hide_index=True))


def read_inputs():
    s, queries = read_scores()
    return av.Inputs(s, read_prior(len(s)), tuple(mechanisms), alpha, queries, rho)


inputs = ui.guarded("attention/inputs", read_inputs)


@st.cache_data(max_entries=16, show_spinner=False)
def many_queries(mechanism, n, m, d, tau, alpha, device_name, rho):
    return av.many_queries(mechanism, n, m, d, MANY_SEED, tau, alpha, device_name, rho)


@st.cache_data(max_entries=16, show_spinner=False)
def rho_sweep(cache_key, tau, _inputs):
    return av.rho_sweep(_inputs, tau)


# ---- what tau drives ------------------------------------------------------------------------------------------

def tau_slider(where):   # 24 steps per decade: fine enough to follow a drag
    return ui.log_slider("tau (temperature)", 1e-3, 1e2, 1.0, key=av.Keys.TAU, where=where, per_decade=24,
                         help="Weight of the regulariser. tau -> 0 gives argmax, tau -> infinity the uniform "
                              "distribution (or the prior). Transformers use tau = sqrt(d).")


def live_sliders(*names: str) -> dict:
    """The sidebar's sliders ``names`` (of tau, alpha and rho), as figures that follow them name them."""
    sliders = {"tau": ui.Slider(av.Keys.TAU, ui.log_grid(av.Keys.TAU)), "alpha": ui.Slider(av.Keys.ALPHA),
               "rho": ui.Slider(av.Keys.RHO, tuple(av.RHOS))}
    return {name: sliders[name] for name in names}


def follow_bars(w: av.Weights):
    """The bars follow tau, alpha and rho while they move (recomputed in the browser); they change on release with
    more keys (or a larger semi-relaxed plan) than a frame's budget, and the caption says why."""
    sliders = live_sliders("tau", "alpha") if w.semi is None else live_sliders("tau", "alpha", "rho")
    if w.semi is not None:
        n, m = w.semi.plan.shape
        if n * m > ui.LIVE_MAX_ENTRIES["plan"]:
            st.caption(f"The bars change when a slider is released: semi-relaxed OT's {n} x {m} plan is more than "
                       "the browser re-solves within a frame.")
            return
    if not ui.follow("bars", "weights", sliders, {"tau": w.tau, "alpha": w.inputs.alpha, "rho": w.inputs.rho},
                     av.live_inputs(w), entries=len(w.inputs.scores) * len(w.p)):
        st.caption(f"The bars change when a slider is released: {len(w.inputs.scores)} keys are more than the "
                   "browser redraws within a frame.")


def draw(w: av.Weights):
    st.subheader("Weights")
    ui.show_figure(figs.main_figure(w), key="bars")
    follow_bars(w)
    numbers = st.container()  # the numbers sit under the bars but are sent after the views: the bars come first
    # Side by side first: it has its own temperatures, so a tau move does not send it again (ui.View.live)
    ui.views({av.Labels.SIDE_BY_SIDE: side_view(w), av.Labels.LANDSCAPE: landscape_view(w),
              av.Labels.TAU_SWEEP: sweep_view(w), av.Labels.RHO_SWEEP: rho_view(w),
              av.Labels.MANY_QUERIES: many_view(w)},
             help="The weights at two temperatures next to each other, the objective over the simplex (three keys), "
                  "each weight as tau goes from 1e-3 to 1e3 (and as an animation), semi-relaxed OT from softmax "
                  "(rho = 0) to Sinkhorn (rho = ∞), or many random queries at once. The lecture bundle holds them "
                  "all.", key=av.Keys.VIEW)
    with numbers:
        # short headers: with each key's weight the table fits a column at 800 px with the sidebar open
        st.dataframe(table_text(av.summary(w)), hide_index=True, column_config={
            "support size": st.column_config.Column("support", help="The support size: the keys with p_j > 0."),
            "entropy (nats)": st.column_config.Column("H (nats)", help="The entropy H(p*) = -sum_j p_j log p_j.")})
        # two equations, not one per mechanism: every display equation is one more element to redraw per move
        ui.equation(aligned([line for name in w.p for line in
                             (SEMI_TEX if name == av.SEMI else
                              [rf"\text{{{name}}}:\ \Omega(p) &= {OMEGA_TEX[name]}"])]))
        ui.equation(aligned([rf"s &= {vector_tex(w.inputs.scores)},\quad \tau = {number_tex(w.tau)}"]
                            + [rf"p^\star_{{\text{{{name}}}}} &= {vector_tex(p, keep=3)}"
                               for name, p in w.p.items()]))


def aligned(lines: list[str]) -> str:
    return r"\begin{aligned} " + r" \\ ".join(lines) + r" \end{aligned}"


def landscape_figure(w: av.Weights, which: str):
    i = w.inputs
    land = av.landscape(which, i.scores, w.tau, i.alpha, i.prior)
    return land, figs.simplex_landscape(land, i.labels, f"{which}: -<s, p> + tau Omega(p)")


def one_query(w: av.Weights) -> list[str]:
    """The chosen mechanisms that are maps of one query's scores (not semi-relaxed OT); softmax when none is."""
    return [name for name in w.inputs.mechanisms if name != av.SEMI] or ["softmax"]


def landscape_view(w: av.Weights) -> ui.View:
    def draw_view():
        m = len(w.inputs.scores)
        if m != 3:
            st.info(f"The landscape is drawn for exactly 3 keys (the 2-simplex); there are {m} now. Use the "
                    "2-D points table with three rows or type three scores.")
            return
        which = st.selectbox("Mechanism", one_query(w), key=av.Keys.LANDSCAPE_MECHANISM, bind="query-params",
                             help="Whose objective -<s, p> + tau Omega(p) to draw (semi-relaxed OT has none of one "
                                  "query's p alone).")
        drawn = ui.guarded("attention/land", lambda: landscape_figure(w, which))
        if drawn is not None:
            land, fig = drawn
            ui.show_figure(fig, key="land")
            i = w.inputs
            ui.follow("land", "landscape", live_sliders("tau", "alpha"), {"tau": w.tau, "alpha": i.alpha},
                      {**av.landscape_live_inputs(which, i.scores, i.prior), "names": figs.ARGMINS},
                      entries=land.values.numel())
            st.markdown(
                f"Closed form objective **{land.closed_value:.6f}**, generic solver (interior-point Newton, no "
                f"closed form) **{land.numerical_value:.6f}**; the two points differ by {land.gap:.1e}.")

    return ui.View(draw_view, ("land",), lambda: [landscape_figure(w, one_query(w)[0])[1]])


def sweep_figure(w: av.Weights, which: str):
    i = w.inputs
    sweep = av.tau_sweep(which, i.scores, av.TAUS, i.alpha, i.prior)
    return figs.tau_sweep_lines(av.TAUS, sweep, i.labels, w.tau, f"{which}: weights against tau")


def sweep_frames(w: av.Weights):
    """The animation's frames: the weights bars of every chosen mechanism at 24 temperatures from 1e-3 to 1e2."""
    return figs.weights_frames(av.sweep_frames(w.inputs), w.inputs.labels)


def sweep_view(w: av.Weights) -> ui.View:
    def draw_view():
        which = st.selectbox("Mechanism", one_query(w), key=av.Keys.SWEEP_MECHANISM, bind="query-params",
                             help="Whose weights to follow from tau = 1e-3 to 1e3 (semi-relaxed OT: the 'rho "
                                  "sweep' view).")
        fig = ui.guarded("attention/sweep", lambda: sweep_figure(w, which))
        if fig is not None:
            ui.show_figure(fig, key="sweep")
            st.caption("Small tau: all mass on the largest score (argmax, the unregularised transport plan). "
                       "Large tau: the regulariser wins and the weights go to uniform (or to the prior).")
        ui.animation("sweep_animation", av.ANIMATION_TITLE, lambda: sweep_frames(w),
                     fps=4)

    return ui.View(draw_view, ("sweep",), lambda: [sweep_figure(w, one_query(w)[0])])


def side_view(w: av.Weights) -> ui.View:
    return ui.side_by_side(
        "tau", av.Keys.SIDE_TAU, 1e-3, 1e2, av.SIDE_TAUS,
        lambda side, tau: figs.side_by_side(av.weights(w.inputs, tau), w.inputs.labels, side.capitalize()),
        help="The temperature of the {side} figure.",
        caption="The same scores at two temperatures, every chosen mechanism at each: a small tau is close to "
                "argmax (sparsemax drops keys), a large one close to uniform (or to the prior).")


def tau_title(mechanism: str, tau: float) -> str:
    return f"{mechanism}, tau = {tau:.3g}"


def rho_title(rho: float) -> str:
    return f", rho = {av.rho_text(rho)}"


def many_titles(mechanism: str) -> dict:
    """The Many queries heatmap's title in two parts, for each value of the tau slider and, for semi-relaxed OT,
    each of the rho slider's."""
    return {"tau": [tau_title(mechanism, tau) for tau in ui.log_grid(av.Keys.TAU)],
            "rho": [rho_title(rho) for rho in av.RHOS] if mechanism == av.SEMI else None}


def many_figure(w: av.Weights, mechanism: str, n: int, m: int, d: int):
    res = many_queries(mechanism, n, m, d, w.tau, w.inputs.alpha, str(device), w.inputs.rho)
    title = tau_title(mechanism, w.tau) + (rho_title(w.inputs.rho) if mechanism == av.SEMI else "")
    return res, figs.attention_heatmap(res.pooled, title, res.block)


def follow_many(w: av.Weights, res: av.ManyQueries, mechanism: str, n: int, m: int, d: int):
    """The heatmap follows tau, alpha and rho while they move, up to 64 x 64 weights; larger, on release."""
    if n * m > ui.LIVE_MAX_ENTRIES["many"]:
        st.caption(f"The heatmap changes when a slider is released: {n} x {m} weights are more than the browser "
                   "recomputes within a frame.")
        return
    inputs = {**av.many_live_inputs(res, mechanism, n, m, d, MANY_SEED), "taus": ui.log_grid(av.Keys.TAU),
              "rhos": av.RHOS, "titles": many_titles(mechanism)}
    ui.follow("many", "many", live_sliders("tau", "alpha", "rho"),
              {"tau": w.tau, "alpha": w.inputs.alpha, "rho": w.inputs.rho}, inputs, entries=n * m)


def many_view(w: av.Weights) -> ui.View:
    def draw_view():
        st.markdown("n random queries against m random keys: each row of the heatmap is one query's weights.")
        c = st.columns(2) + st.columns(2)   # two rows of two: the controls stay readable on a narrow screen
        n = c[0].select_slider("n (queries)", SIZES, 256, key=av.Keys.MANY_N, bind="query-params",
                               help="Number of queries (rows).")
        m = c[1].select_slider("m (keys)", SIZES, 256, key=av.Keys.MANY_M, bind="query-params",
                               help="Number of keys (columns).")
        d = c[2].slider("d", 1, 128, 16, key=av.Keys.MANY_D, bind="query-params", help="Dimension of q and k.")
        mechanism = c[3].selectbox("Mechanism", list(av.CHOICES), key=av.Keys.MANY_MECHANISM, bind="query-params",
                                   help="prior-softmax uses a uniform prior here; semi-relaxed OT a uniform b, the "
                                        "sidebar's rho, and each query's mass 1 / n (its rows times n).")
        with st.spinner(f"Computing {n} x {m} weights on {device}..."):
            drawn = ui.guarded("attention/many", lambda: many_figure(w, mechanism, n, m, d))
        if drawn is not None:
            res, fig = drawn
            ui.show_figure(fig, key="many")
            follow_many(w, res, mechanism, n, m, d)
            st.caption(f"Computed in {res.seconds * 1e3:.1f} ms on {ui.where_solved(res.solved_on, device)}; mean "
                       f"support size {res.mean_support:.1f} of {m} keys.")

    return ui.View(draw_view, ("many",), lambda: [many_figure(w, "softmax", 256, 256, 16)[1]])


def rho_figures(w: av.Weights):
    """The semi-relaxed problem at the sidebar's rho (its column sums against b) and the sweep over rho."""
    i = w.inputs
    semi = w.semi or av.semi_relaxed(i, w.tau, i.rho)
    sweep = rho_sweep(i.cache_key, w.tau, i)
    return semi, figs.column_sums(semi, i.labels), figs.rho_sweep_lines(sweep, i.labels, i.rho)


def rho_frames(w: av.Weights):
    """The animation's frames: the column sums at 24 values of rho from 0 to infinity."""
    return figs.rho_frames(av.rho_frames(w.inputs, w.tau), w.inputs.labels)


def rho_view(w: av.Weights) -> ui.View:
    def draw_view():
        n = 1 if w.inputs.queries is None else len(w.inputs.queries)
        st.markdown(
            f"Semi-relaxed OT needs several queries to have columns: here the {n} queries are "
            + ("this page's query and each key as a query too (the tokens attend to each other, as in "
               "self-attention), each with mass 1/n. " if n > 1 else
               "only the typed one (choose 2-D points or random for several): with one query, semi-relaxed OT is "
               "the prior-softmax at temperature tau + rho, and its column sums are its weights. ")
            + "The column sums say how much each key receives from all queries together; rho holds them at b "
              "(the prior, uniform without one).")
        drawn = ui.guarded("attention/rho", lambda: rho_figures(w))
        if drawn is not None:
            semi, columns, sweep = drawn
            ui.show_figure(columns, key="columns")
            st.caption(f"KL(P^T 1 | b) = {semi.kl:.3g} at rho = {av.rho_text(semi.rho)} ({semi.n_iter} iterations). "
                       "As rho grows each key's column sum moves to b_j, and the query's weights move with it.")
            ui.show_figure(sweep, key="rho_sweep")
        ui.animation("rho_animation", "Semi-relaxed OT as rho grows from 0 to infinity", lambda: rho_frames(w),
                     fps=4)

    return ui.View(draw_view, ("columns", "rho_sweep"), lambda: list(rho_figures(w)[1:]))


ui.live("attention/weights", ui.style.beside_figure(tau_slot), tau_slider,
        lambda tau: None if inputs is None else av.weights(inputs, tau), draw)
