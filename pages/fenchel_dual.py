"""Page "Attention solves a dual problem": attention as the Fenchel-dual solution of problem (4) (source: 002)."""
import streamlit as st

from wviz import ui
from wviz.figures import fenchel_dual as figs
from wviz.figures.common import number_text
from wviz.views import fenchel_dual as fv

ui.page_setup(
    "Attention solves a dual problem",
    f"The paper {ui.cite('002')} reads attention as an estimate: a preference $u$ over templates $t_i$ says which "
    "mixture $p$ of templates is plausible, an evidence $z$ says how the mean should move from "
    "$\\mu = \\sum_i u_i t_i$, and $\\alpha$ says how much to trust $z$. The best $p$ solves problem (4); its "
    "Fenchel dual (9) has a maximiser $\\lambda^*$, and replacing $\\lambda^*$ by $\\alpha z$ gives exactly "
    "attention (18). Move $\\alpha$ and $z$ and watch the exact answer and attention part ways as $\\alpha$ grows.",
    try_this=fv.TRY_THIS, keys=fv.Keys,
)
# (4) and (9) one per line, each short enough for a 800 px wide screen
ui.equation(r"\min_p \; \frac{\alpha}{2}\Big\lVert (\mu + z) - \sum_i p_i t_i \Big\rVert^2 + \mathrm{KL}(p \,\|\, u)"
            r"\qquad (4)")
ui.equation(r"\max_\lambda \; \langle \lambda, \mu + z\rangle - \frac{\lVert\lambda\rVert^2}{2\alpha}"
            r" - \log \sum_i u_i e^{\langle t_i, \lambda\rangle}\qquad (9)")

# ---- controls ---------------------------------------------------------------------------------------------
sb = st.sidebar
preset = sb.selectbox("Templates preset", list(fv.PRESETS), key=fv.Keys.PRESET, bind="query-params",
                      help="A starting set of 2-D templates t_i and preference weights u_i; edit them in the table.")
normalise = sb.toggle("Normalise u to sum to 1", value=True, key=fv.Keys.NORMALISE, bind="query-params",
                      help="Off: weights that do not sum to 1 are refused, as the library does (u must be a "
                           "distribution).")
alpha_slot = sb.container()  # alpha is drawn here by ui.live below
z = (sb.slider("z_1", -4.0, 4.0, fv.DEFAULT_Z[0], 0.05, key=fv.Keys.Z1, bind="query-params",
               help="First coordinate of the evidence z (the estimated shift of the mean, eq. (3))."),
     sb.slider("z_2", -4.0, 4.0, fv.DEFAULT_Z[1], 0.05, key=fv.Keys.Z2, bind="query-params",
               help="Second coordinate of the evidence z."))

st.subheader("Templates and preference")
st.caption("One template per row: its position $t_i = (x, y)$ and its preference weight $u_i \\ge 0$. The size of each "
           "dot below is its weight.")
table = ui.table_editor(fv.PRESETS[preset], fv.Keys.TEMPLATES.format(preset.split()[0].lower()), num_rows="dynamic",
                        hide_index=True)
templates = ui.guarded("fenchel/templates", lambda: fv.templates_from_table(table, normalise))


# ---- what alpha drives ----------------------------------------------------------------------------------------

def alpha_slider(where):
    return ui.log_slider("alpha (reliability of z)", 1e-2, 1e1, 1.0, key=fv.Keys.ALPHA, where=where,
                         help="The reliability of the evidence z: the weight of the fit term in problem (4). Small "
                              "alpha: trust u, h stays near mu, and attention (18) is nearly exact. Large alpha: "
                              "trust mu + z.")


def follow_estimates(s: fv.Solution):
    """The three estimates follow alpha while it moves (recomputed in the browser); with more templates than a
    frame's budget they change on release, and the caption says so."""
    alphas = ui.log_grid(fv.Keys.ALPHA)
    live = {**fv.live_inputs(s), "names": figs.ESTIMATES, "alphas": alphas,
            "titles": [figs.estimates_title(a) for a in alphas]}
    if not ui.follow("estimates", "estimates", {"alpha": ui.Slider(fv.Keys.ALPHA, alphas)}, {"alpha": s.alpha}, live,
                     entries=len(s.templates.names)):
        st.caption(f"The estimates change when alpha is released: {len(s.templates.names)} templates are more "
                   "than the browser re-solves within a frame.")


def draw(s: fv.Solution):
    ui.show_figure(figs.main_figure(s), key="estimates")
    follow_estimates(s)
    st.caption("The filled orange-red square is the exact estimate (12) from the dual maximiser; the open pink "
               "square is attention (18); the open green diamond uses the second-order $\\lambda$ of (15). Shrink "
               "$\\alpha$: all three move towards $\\mu$ and merge. Grow $\\alpha$: the exact h follows "
               "$\\mu + z$, while attention can only reach the hull of the templates with weights tilted by "
               "$e^{\\alpha \\langle t_i, z\\rangle}$.")
    metrics(s)
    gaussian_section(s)
    # The page opens on Figure 3, which alpha does not change: a move then redraws one chart, not two (each chart
    # the browser redraws delays the first; BENCHMARKS.md "Slider latency").
    ui.views({fv.Labels.FIGURE3: grid_view(s), fv.Labels.WEIGHTS: weights_view(s),
              fv.Labels.DUAL: dual_view(s), fv.Labels.T5: t5_view(s), fv.Labels.OT: ot_view(s)},
             help="The paper's Figure 3 grid (alpha from 0.1 to 5, so the slider leaves it standing), the weights "
                  "of (11) and (18) side by side, the dual problem (9) and how the approximations degrade with "
                  "alpha, T5's masks and position biases as a preference, or OT-based attention. The lecture "
                  "bundle holds them all.", key=fv.Keys.VIEW)


def metrics(s: fv.Solution):
    """How far attention is from the exact answer, in three short numbers (the full meaning in each help)."""
    lam, az = s.lam, s.alpha_z
    c = st.columns(3)
    c[0].metric("deviation", number_text(s.deviation, 3, chars=8),
                help=f"Relative deviation ‖λ* − αz‖ / ‖λ*‖ of Sec. 8 (the quantity of Figure 4): "
                     f"λ* = ({lam[0]:.4f}, "
                     f"{lam[1]:.4f}), αz = ({az[0]:.4f}, {az[1]:.4f}).")
    c[1].metric("error of (18)", number_text(s.error_18, 3, chars=8),
                help="‖h(12) − h(18)‖: the distance from the exact estimate (orange-red) to attention (pink).")
    c[2].metric("error of (15)", number_text(s.error_15, 3, chars=8),
                help="‖h(12) − h(12 at 15)‖: the distance from the exact estimate (orange-red) to the second-order one "
                     "(green).")


def gaussian_section(s: fv.Solution):
    with st.expander("Sec. 5: a Gaussian preference u = N(mu, I), where (14) is exact"):
        g = fv.gaussian_check(s.est.mu, s.z, s.alpha)   # inputs already validated by fv.solve
        ui.equation(r"\hat h = \frac{1}{1+\alpha}\mu + \frac{\alpha}{1+\alpha} b,\qquad b = \mu + z")
        st.markdown(f"With the mu above, the Newton solver of (9) with the Gaussian log-MGF, started from lambda = "
                    f"0, takes {g.n_iter} step{'s' if g.n_iter != 1 else ''} (gradient norm {g.grad_norm:.1e}) and "
                    f"gives h = ({g.h[0]:.6f}, {g.h[1]:.6f}); the closed form gives ({g.closed[0]:.6f}, "
                    f"{g.closed[1]:.6f}). For a Gaussian the cumulant expansion (13) stops at the quadratic term, so "
                    f"the dual is a quadratic, one Newton step solves it, and (15) is lambda* itself.")


def weights_view(s: fv.Solution) -> ui.View:
    return ui.figure_view(
        "weights", lambda: figs.attention_weights(fv.weights(s), s.templates.names),
        caption="The exact weights solve (4); attention (18) is "
                "$\\mathrm{softmax}_i(\\log u_i + \\alpha \\langle t_i, z\\rangle)$. With uniform u and "
                "$\\alpha = 1$ it is dot-product attention.")


def dual_figures(s: fv.Solution):
    return [figs.dual_contour(fv.dual_map(s), s), figs.alpha_sweep(fv.sweep(s), s.alpha)]


def dual_view(s: fv.Solution) -> ui.View:
    def draw_view():   # one above the other: side by side, each would be too narrow on a 800 px screen
        dual, sweep = dual_figures(s)
        ui.show_figure(dual, key="dual")
        st.caption("The dual is strongly concave (Hessian $-(I/\\alpha + \\mathrm{Cov}_p(t))$); Newton with that "
                   "exact Hessian finds $\\lambda^*$ to a gradient norm below 1e-10. $\\alpha z$ is where the "
                   "quadratic penalty alone would put it.")
        ui.show_figure(sweep, key="sweep")
        st.caption("Both errors fall as $\\alpha$ shrinks: (18) like $\\alpha^2$, the second order (15) faster. "
                   "The relative deviation is the quantity the paper measures in BERT and T5 (Figure 4).")

    return ui.View(draw_view, ("dual", "sweep"), lambda: dual_figures(s))


def grid_view(s: fv.Solution) -> ui.View:
    return ui.figure_view(
        "grid", lambda: figs.estimates_grid(s, fv.figure3(s)), live=False,
        caption="The paper's Figure 3 grid, alpha in {0.1, 0.5, 1, 2, 5}, for the templates and z above: the "
                "approximation is close for alpha up to about 1 while h is still far from mu (so z matters).")


def panel(title: str, caption: str):
    """A view's heading and caption over two columns: its controls (narrow) and its figure (wide)."""
    st.subheader(title)
    st.caption(caption)
    return st.columns([1, 2])


def t5_figure(s: fv.Solution, j: int, masked, bias_table):
    names = s.templates.names
    return figs.t5_weights(fv.t5(s.templates, s.z, j, masked, bias_table), names, names[j])


def t5_view(s: fv.Solution) -> ui.View:
    names = s.templates.names

    def draw_view():
        t5l, t5r = panel("T5: masks and relative positions are a preference (19)-(20)",
                         "Read the templates above as a sequence in table order. Word j is the blank being inferred; "
                         "masked words get preference 0, the others $e^{b_{j-i}}$ from the relative-position bias "
                         "table (offsets beyond ±3 use the end values, like T5's buckets).")
        with t5l:
            j = st.selectbox("Target position j", range(len(names)), format_func=lambda i: f"{i + 1}: {names[i]}",
                             key=fv.Keys.T5_TARGET, bind="query-params", help="The word being inferred (the blank).")
            masked = st.multiselect("Masked words", names, default=[names[j]], key=fv.Keys.T5_MASKED,
                                    bind="query-params", help="Masked words get u = 0 in (19) and -inf in (20).")
            bias_table = ui.table_editor(fv.T5_BIAS, fv.Keys.T5_BIAS, disabled=["offset j - i"], hide_index=True)
        fig = ui.guarded("fenchel/t5", lambda: t5_figure(s, j, masked, bias_table))
        if fig is not None:
            with t5r:
                ui.show_figure(fig, key="t5")
                st.caption("The second and third bars are the same numbers: T5's mask and position bias are the log "
                           "of a preference u, so T5 attention is the generalised attention (18).")
        # full width under the panel: the controls' column is too narrow for them
        ui.equation(r"u(t_i) = \begin{cases} 0 & i \text{ masked}\\ e^{b_{j-i}}/Z & \text{else}\end{cases}"
                    r"\qquad (19)")
        ui.equation(r"\begin{aligned} \hat h &= \sum_i t_i\,\mathrm{softmax}_i\big(\langle t_i, z\rangle + b_{j-i}"
                    r" + \mathbf 1_{\mathrm{masked}}(i)\big) \qquad (20) \\ \mathbf 1_{\mathrm{masked}}(i) &= -\infty"
                    r" \text{ if } i \text{ masked, else } 0 \end{aligned}")

    return ui.View(draw_view, ("t5",), lambda: [t5_figure(s, 0, [names[0]], fv.T5_BIAS)], live=False)


def ot_figures(s: fv.Solution, ot: fv.OTAttention):
    return [figs.ot_map(ot, s.z), figs.ot_weights(ot), figs.gamma_sweep(ot.sweep, ot.gamma)]


def ot_default(s: fv.Solution):
    world = fv.universe(s.templates, fv.EXTRAS)
    return ot_figures(s, fv.ot_attention(s, world, 1.0, fv.cost(world, "squared Euclidean")))


def ot_view(s: fv.Solution) -> ui.View:
    def draw_view():
        o1, o2 = panel("OT-based attention: weight spreads to similar templates (Sec. 9, Appendix D)",
                       "The universe A holds the templates T above plus extra ones (say, synonyms placed near some "
                       "templates), with u = 0 on the extras. Replacing KL by the entropic OT cost "
                       f"$W_\\gamma(p, u; M)$ of (23) ({ui.cite('cuturi2013')}) lets p put weight on them.")
        with o1:
            extras = ui.table_editor(fv.EXTRAS, fv.Keys.EXTRAS, num_rows="dynamic", hide_index=True)
            gamma = ui.log_slider("gamma (entropic regularisation)", 1e-2, 1e1, 1.0, key=fv.Keys.GAMMA, where=st,
                                  help="The entropy weight in (23). Small gamma: the true preference (40) is u itself "
                                       "and weight stays on T; large gamma: it spreads over A.")
            cost_kind = st.radio("Cost M", [*fv.COSTS, "edited"], key=fv.Keys.COST_KIND, horizontal=True,
                                 bind="query-params", help="M(t, t') between the templates of A; 'edited' starts from "
                                                           "the squared Euclidean cost and lets you type your own "
                                                           "(non-negative, symmetric).")

        def compute():
            world = fv.universe(s.templates, extras)
            edited = None
            if cost_kind == "edited":
                with o1:
                    edited = ui.table_editor(fv.cost_table(world), fv.Keys.COST_TABLE.format(len(world.names)),
                                             hide_index=True)
            return ot_figures(s, fv.ot_attention(s, world, gamma, fv.cost(world, cost_kind, edited)))

        drawn = ui.guarded("fenchel/ot", compute)
        if drawn is not None:
            ot_map, ot_bars, ot_sweep = drawn
            with o2:
                ui.show_figure(ot_map, key="ot_map")
            ui.equation(r"\tilde u(t) = \sum_{t'} u(t')\frac{e^{-M(t,t')/\gamma}}{\sum_{t''} e^{-M(t',t'')/\gamma}}"
                        r"\qquad (40)")
            ui.equation(r"p^*(t) = \sum_i u_i \frac{e^{(\alpha t^\top z - M(t, t_i))/\gamma}}{Z_i}\qquad (25)")
            ui.show_figure(ot_bars, key="ot_bars")
            st.caption("Templates outside T get weight from their neighbours in T. (25) replaces $\\lambda^*$ of (39) "
                       "by $\\alpha z$; it is close to the exact (38) when $\\alpha$ and $\\alpha/\\gamma$ are "
                       "small. (Appendix D prints (25) again as (47) with t' in the numerator, which would not sum to "
                       "1; (25) and (38) agree.)")
            ui.show_figure(ot_sweep, key="ot_sweep")
            st.caption("As $\\gamma \\to 0$ the true preference (40) returns to u (Prop. 1). The gap between (38) and "
                       "(25) is governed by $\\alpha/\\gamma$: it opens up at small $\\gamma$ unless $\\alpha$ is "
                       "smaller still.")

    return ui.View(draw_view, ("ot_map", "ot_bars", "ot_sweep"), lambda: ot_default(s))


# The estimates' equations above their figure, outside ui.live: alpha does not change them, so its moves do not
# send them again.
st.subheader("Exact h and its attention approximations (Figure 3)")
ui.equation(r"\begin{aligned} \tilde p_i &= \frac{u_i e^{\langle t_i, \lambda^*\rangle}}"
            r"{\sum_j u_j e^{\langle t_j, \lambda^*\rangle}} && (11) \\ \hat h &= \sum_i t_i\,\tilde p_i"
            r" && (12) \end{aligned}")
ui.equation(r"\lambda^* \approx \alpha (I + \alpha\Sigma)^{-1} z\;\;(15)\;\approx\; \alpha z\;\;(16)")
ui.equation(r"\hat h \approx \sum_i t_i\,\frac{u_i e^{\alpha\langle t_i, z\rangle}}"
            r"{\sum_j u_j e^{\alpha\langle t_j, z\rangle}}\qquad (18)")
ui.live("fenchel/main", ui.style.beside_figure(alpha_slot), alpha_slider,
        lambda alpha: None if templates is None else fv.solve(templates, z, alpha), draw)
