"""Page "Transport plans": watch an entropic, exact or quadratic transport plan form between two measures."""
import streamlit as st

from wviz import ui
from wviz.figures import transport_plans as figs
from wviz.figures.common import number_tex, number_text
from wviz.views import transport_plans as tv

device = ui.page_setup(
    "Transport plans",
    "Move mass $a$ on the source points to mass $b$ on the target points, paying $C_{ij}$ per unit sent from "
    "$i$ to $j$. The exact plan is sparse and jumps when the data move; the entropic plan of eq. (23) of "
    f"{ui.cite('002')}, $\\min_{{P \\in U(a, b)}} \\langle C, P \\rangle - \\gamma H(P)$, is smooth, dense "
    f"and computed by Sinkhorn's alternating scaling ({ui.cite('cuturi2013')}); as $\\gamma \\to 0$ its cost "
    f"tends to the exact one. A squared-L2 regulariser ({ui.cite('blondel2018')}) gives plans that are smooth "
    "*and* sparse. With $\\rho < \\infty$ Sinkhorn solves the **semi-relaxed** problem "
    f"({ui.cite('chizat2018')}; its solver translates the dual potentials, {ui.cite('sejourne2022')}): every source "
    "still sends exactly its mass $a_i$, and $\\rho$ says how firmly the targets' masses $b$ are held.",
    try_this=tv.TRY_THIS, keys=tv.Keys,
)
ui.renamed_params(tv.RENAMED)   # before the widgets read the URL

# ---- the problem ----------------------------------------------------------------------------------------------
sb = st.sidebar
kind = sb.radio("Problem", ["point clouds", "cost matrix"], key=tv.Keys.PROBLEM, bind="query-params",
                help="Two 2-D point clouds with a ground cost, or a cost matrix typed or uploaded.")


def read_clouds(cost_kind: str) -> tv.Problem:
    """Two weighted clouds from a preset (editable in a table) or an uploaded CSV."""
    upload = sb.file_uploader("Upload points (CSV)", type=["csv"], key=tv.Keys.POINTS_CSV,
                              help="Columns cloud,x,y[,mass] with cloud = source or target; at most "
                                   f"{tv.MAX_POINTS} points per cloud, {tv.MAX_UPLOAD_MB} MB.")
    with sb:
        ui.example_file("Example points CSV", tv.example_points_csv(), "transport_points_example.csv",
                        help="Four sources on a line and three targets above them, one twice as heavy: a file the "
                             "uploader above accepts, to start from.")
    if upload is not None:
        return tv.clouds_from_csv(upload.getvalue(), cost_kind)
    preset = sb.selectbox("Preset", tv.PRESETS, key=tv.Keys.PRESET, bind="query-params",
                          help="Where the two clouds come from. line and two clusters list their points in order "
                               "(left to right; cluster by cluster), so the plan shows a band or two blocks; the "
                               "others list them at random.")
    n = sb.slider("n (source points)", 2, 512, tv.DEFAULT_SIZES[0], key=tv.Keys.N, bind="query-params",
                   help="Size of the source cloud.")
    m = sb.slider("m (target points)", 2, 512, tv.DEFAULT_SIZES[1], key=tv.Keys.M, bind="query-params",
                   help="Size of the target cloud.")
    seed = sb.number_input("seed", 0, 2**31 - 1, 0, key=tv.Keys.SEED, bind="query-params", help="Seed of the preset.")
    default, key = tv.points_table(preset, n, m, seed), tv.Keys.POINTS.format(preset.replace(" ", "_"), n, m, seed)
    # drawn only while open (opening reruns the page): closed, Streamlit's table editor still cost a first visit
    # the browser's main thread (BENCHMARKS.md, "First load: fewer charts on a first visit")
    box = st.expander("Edit the points and their masses", key=tv.Keys.EDIT_POINTS, on_change="rerun",
                      bind="query-params")
    if not box.open:
        return tv.clouds_from_table(ui.table_from_url(default, key), cost_kind)
    with box:
        st.caption("Masses are normalised per cloud; a zero mass removes a point from the problem.")
        return tv.clouds_from_table(ui.table_editor(default, key, disabled=["cloud"], hide_index=True), cost_kind)


def read_cost() -> tv.Problem:
    """A typed or uploaded cost matrix C (n, m); marginals uniform or typed."""
    upload = sb.file_uploader("Upload cost matrix (CSV, no header)", type=["csv"], key=tv.Keys.COST_CSV,
                              help=f"n rows of m numbers; at most {tv.MAX_POINTS} per side.")
    with sb:
        ui.example_file("Example cost matrix CSV", tv.example_cost_csv(), "transport_cost_example.csv",
                        help="3 sources and 4 targets with C_ij = |i - j|: a file the uploader above accepts.")
    if upload is not None:
        C = tv.cost_from_csv(upload.getvalue())
    else:
        C = tv.cost_from_text(sb.text_area("Cost matrix C", tv.DEFAULT_COST, key=tv.Keys.COST_TEXT,
                                           bind="query-params",
                                           help="One row per line (source i), entries C_ij separated by spaces."))
    n, m = C.shape
    if sb.radio("Marginals", ["uniform", "edited"], key=tv.Keys.MARGINALS, bind="query-params",
                help="Uniform masses, or type a and b.") == "uniform":
        return tv.cost_problem(C)
    a_text, b_text = tv.default_masses(n, m)
    a_text = sb.text_input("a (source masses)", a_text, key=tv.Keys.A.format(n), bind="query-params",
                           help="n non-negative masses; must total the same as b.")
    b_text = sb.text_input("b (target masses)", b_text, key=tv.Keys.B.format(m), bind="query-params",
                           help="m non-negative masses; must total the same as a.")
    return tv.cost_problem(C, a_text, b_text)


cost_kind = sb.selectbox("Ground cost", tv.COST_KINDS, key=tv.Keys.COST_KIND, bind="query-params",
                         disabled=kind != "point clouds", help="C_ij between x_i and y_j (point clouds only).")
gamma_slot = sb.container()  # gamma is drawn here by ui.live below, which a gamma move reruns alone
solver = sb.radio("Solver", tv.SOLVERS, key=tv.Keys.SOLVER, bind="query-params", horizontal=True,
                  help="sinkhorn: entropic OT (eq. (23)); exact: linear programme (POT's emd); quadratic: "
                       "squared-L2 regularised OT (sparse).")
rho_rel = sb.select_slider("rho / max C (Sinkhorn)", tv.RHOS, tv.RHOS[-1], format_func=tv.rho_text, key=tv.Keys.RHO_REL,
                           bind="query-params", disabled=solver != "sinkhorn",
                           help="How firmly the targets' masses b are held: the weight of KL(P^T 1 | b), relative to "
                                "the largest cost. ∞ holds them exactly (eq. (23)); a small rho lets every source "
                                "send its mass to its nearest targets whatever b says (semi-relaxed OT). The sources' "
                                "masses a are always held exactly.")
problem = ui.guarded("transport/problem", read_cost if kind == "cost matrix" else lambda: read_clouds(cost_kind))


@st.cache_data(max_entries=32, show_spinner=False)
def transport(problem, solver, gamma_rel, device_name, rho_rel):
    return tv.transport(problem, solver, gamma_rel, device_name, rho_rel)


# Snapshots hold ~40 plans each: keep few of them.
@st.cache_data(max_entries=4, show_spinner=False)
def scrub(problem, gamma, n_iter, device_name, rho):
    return tv.scrub(problem, gamma, n_iter, device_name, rho)


@st.cache_data(max_entries=16, show_spinner=False)
def sweep(problem, device_name):
    return tv.sweep(problem, device_name)


@st.cache_data(max_entries=16, show_spinner=False)
def rho_sweep(problem, gamma_rel, device_name):
    return tv.rho_sweep(problem, gamma_rel, device_name)


# ---- what gamma drives ----------------------------------------------------------------------------------------

def gamma_slider(where):
    return ui.log_slider("gamma / max C", 1e-4, 1e1, 0.01, key=tv.Keys.GAMMA_REL, where=where,
                         help="Entropic (or quadratic) regularisation, relative to the largest cost. Small: "
                              "close to exact OT, more Sinkhorn iterations. Large: a blurred, dense plan.")


def solve(gamma_rel):
    if problem is None:
        return None
    with st.spinner("Solving..."):
        return transport(problem, solver, gamma_rel, str(device), rho_rel)


def follow_plan(t: tv.Transport):
    """Sinkhorn's plan follows gamma and rho while they move (re-solved in the browser); the others change on
    release, and the caption says why (the exact plan has no gamma)."""
    live = tv.live_inputs(t)
    n, m = t.plan.shape
    if live is None:
        if t.solver != "exact":
            st.caption(f"The plan changes when gamma is released: the {t.solver} solver runs in Python.")
        return
    live |= {"titles": [figs.plan_title(t.solver, r) for r in tv.RHOS], "sums": figs.COLUMN_SUMS}
    if not ui.follow("plan", "plan", {"gamma": ui.Slider(tv.Keys.GAMMA_REL, ui.log_grid(tv.Keys.GAMMA_REL)),
                                      "rho": ui.Slider(tv.Keys.RHO_REL, tuple(tv.RHOS))},
                     {"gamma": t.gamma_rel, "rho": rho_rel}, live, entries=n * m):
        st.caption(f"The plan changes when a slider is released: {n} x {m} entries are more than the browser "
                   "re-solves within a frame.")


def draw(t: tv.Transport):
    numbers = st.container()  # the numbers sit above the plan but are sent after it: the browser draws it first
    ui.show_figure(figs.main_figure(t), key="plan")
    follow_plan(t)
    # Side by side first: it has its own gammas, so a gamma move does not send it again (ui.View.live)
    choices = {tv.Labels.SIDE_BY_SIDE: side_view(t)}
    if t.problem.clouds:
        choices[tv.Labels.MASS_MOVED] = ui.figure_view("lines", lambda: lines_figure(t))
    if t.solver == "sinkhorn":
        choices[tv.Labels.CONVERGE] = scrub_view(t)
    choices[tv.Labels.COST_AGAINST_GAMMA] = sweep_view(t)
    if t.solver == "sinkhorn":
        choices[tv.Labels.COST_AGAINST_RHO] = rho_view(t)
    ui.views(choices, help="The plans at two gammas, the plan drawn between the two clouds, plain Sinkhorn's "
                           "iterations one by one (and their animation), the entropic cost as gamma shrinks, or the "
                           "cost and the columns' distance from b as rho holds the targets more firmly. The lecture "
                           "bundle holds them all.", key=tv.Keys.VIEW)
    with numbers:
        show_numbers(t)


def show_numbers(t: tv.Transport):
    # two rows of three places (five in one row wrapped their labels mid-word at 800 px); the second row's third
    # place stays empty, so that every value is drawn as large (a metric's value scales with its column's width)
    cols = st.columns(3) + st.columns(3)
    cols[0].metric("cost <C, P>", number_text(t.cost, chars=8),
                   help="The transport cost <C, P> = sum_ij C_ij P_ij of the plan.")
    cols[1].metric("iterations", f"{t.n_iter}", help="Iterations the solver ran (0 for the exact solver).")
    cols[2].metric("marginal error", number_text(t.marginal_error, 2),
                   help="L1 marginal error max(||P 1 - a||_1, ||P^T 1 - b||_1); the solvers stop at 1e-6. "
                        "Semi-relaxed (rho < ∞): the rows hold a to rounding and b is no constraint, so this is "
                        "the columns' error against the column sums that optimality asks of these rows.")
    cols[3].metric("converged", "yes" if t.converged else "NO",
                   help="Whether the marginal error met the tolerance (exact: an optimal basis was found).")
    # a non-breaking hyphen: a narrow column wraps the label between words, never inside "1e-8"
    cols[4].metric("P_ij < 1e\u20118 max P", f"{number_text(100 * t.sparsity, 3)} %",
                   help="Share of the plan's entries below 1e-8 times its largest entry, i.e. carrying no mass a "
                        "figure can show. Exact and quadratic plans have exact zeros. An entropic plan is positive "
                        "everywhere (P_ij = u_i exp(-C_ij / gamma) v_j), but the smaller gamma, the more of its "
                        "entries fall below this threshold, so at a small gamma it is sparse in effect.")
    if device.type == "cuda":
        st.caption(f"Solved on {ui.where_solved(t.solved_on, device)}.")
    if not t.converged:
        st.warning("The solver stopped before the marginals met the tolerance: the plan shown is approximate. "
                   "Raise gamma or accept a looser tolerance.")
    ui.equation(objective_tex(t))


def objective_tex(t: tv.Transport) -> str:
    """The solver's objective at the plan, term by term, its numbers by number_tex (no 1e-05 in LaTeX)."""
    cost, gamma, total = number_tex(t.cost, 4), number_tex(t.gamma, 3), number_tex(t.reg_cost, 4)
    if t.semi:
        return (rf"\begin{{aligned}}&\min_{{P \ge 0,\ P 1 = a}} \langle C, P\rangle + \gamma\, "
                rf"\mathrm{{KL}}(P \Vert a b^\top) \\ &\qquad + \rho\, \mathrm{{KL}}(P^\top 1 \Vert b)\\ "
                rf"&= {cost} + {gamma} \times {number_tex(t.plan_kl, 4)} \\ &\qquad + {number_tex(t.rho, 3)} "
                rf"\times {number_tex(t.column_kl, 3)} = {total}\end{{aligned}}")
    if t.solver == "sinkhorn":
        return (rf"\begin{{aligned}}&\min_{{P \in U(a,b)}} \langle C, P\rangle - \gamma H(P)\\ "
                rf"&= {cost} - {gamma} \times {number_tex(t.entropy, 4)} = {total}\end{{aligned}}")
    if t.solver == "quadratic":
        return (rf"\begin{{aligned}}&\min_{{P \in U(a,b)}} \langle C, P\rangle + \tfrac{{\gamma}}{{2}}"
                rf"\lVert P\rVert^2\\ &= {cost} + \tfrac{{{gamma}}}{{2}} \times {number_tex(t.sq_norm, 4)} "
                rf"= {total}\end{{aligned}}")
    return rf"\min_{{P \in U(a,b)}} \langle C, P\rangle = {cost}"


def lines_figure(t: tv.Transport):
    p = t.problem
    return figs.plan_lines(p.x, p.y, t.plan, p.a, p.b, "Mass moved from x_i to y_j")


def every(n: int) -> str:
    return "every iteration" if n == 1 else f"every {n} iterations"


def scrub_figures(s: tv.Scrub, step=None):
    """Plain Sinkhorn's plan after iteration ``step`` (default: the last recorded) and its marginal error curve."""
    f = s.frame(step)
    return (figs.plan_with_marginals(f.plan, f.rows, f.columns, f"plan after iteration {f.step} (bars: its marginals)"),
            figs.marginal_error_curve(s.checked, s.errors, s.tol,
                                      f"Plain Sinkhorn: marginal error {every(s.every)}", current=f.step))


def scrubber(t: tv.Transport):
    """Plain Sinkhorn's iterations at this gamma, one plan at a time, and its marginal error."""
    s = scrub(t.problem, t.gamma, t.n_iter, str(device), t.rho)
    solver_says = (f"reached the tolerance in {t.n_iter} iterations" if t.converged else
                   f"did not converge either: it stopped at its limit of {t.n_iter} iterations")
    truncated = "" if s.converged else (
        f" **Truncated:** plain Sinkhorn has not reached the tolerance 1e-6 after {s.n_iter} iterations "
        f"(marginal error {s.marginal_error:.1e}); only these first iterations are shown, so the last "
        f"plan here is not yet the solution.")
    columns = ("the columns to match b" if not t.semi else
               "the columns towards b (the balanced update raised to rho / (rho + gamma)), and the rows' error is "
               "the error shown")
    st.caption(f"Both panels show **plain Sinkhorn** (no epsilon scaling, no over-relaxation) at this gamma from "
               f"the uniform start, not the solver above: each iteration rescales the rows to match a and "
               f"{columns}. The marginal error is read {every(s.every)}, the plans {every(s.plan_every)}. "
               f"The solver above, with epsilon scaling and over-relaxation, {solver_says}.{truncated}")
    step = st.select_slider("Iteration", s.iterations, value=s.iterations[-1], key=tv.Keys.SCRUB, bind="query-params",
                            help="Scrub through plain Sinkhorn's iterations: the plan after each row/column "
                                 "scaling.")
    plan_fig, errors_fig = scrub_figures(s, step)
    # one above the other: side by side, at 800 px with the sidebar open, the plan was 110 px wide and both titles cut
    ui.show_figure(plan_fig, key="scrub_plan")
    ui.show_figure(errors_fig, key="errors")
    ui.animation("sinkhorn", "Plain Sinkhorn's iterations", lambda: animation_figures(t, s))


def animation_figures(t: tv.Transport, s: tv.Scrub):
    """The plan after iteration k for about 20 recorded k, on one colour scale, titled with k and the error."""
    a, b = t.problem.a, t.problem.b
    frames = []
    for f in tv.animation_frames(s):
        frames.append((f.plan, f.rows, f.columns, f"iteration {f.step}, marginal error {f.marginal_error(a, b):.1e}"))
    return figs.plan_frames(frames, "Plain Sinkhorn")


def scrub_view(t: tv.Transport) -> ui.View:
    return ui.View(lambda: scrubber(t), ("scrub_plan", "errors"),
                   lambda: scrub_figures(scrub(t.problem, t.gamma, t.n_iter, str(device), t.rho)))


def sweep_figure(t: tv.Transport):
    s = sweep(t.problem, str(device))
    return figs.cost_against_gamma(s.gammas_rel, s.costs, s.exact, t.gamma_rel,
                                   "Entropic cost converges to the exact cost as gamma -> 0")


def sweep_view(t: tv.Transport) -> ui.View:
    def draw_view():
        fig = ui.guarded("transport/sweep", lambda: sweep_figure(t))
        if fig is not None:
            ui.show_figure(fig, key="sweep")

    return ui.View(draw_view, ("sweep",), lambda: [sweep_figure(t)])


def rho_figure(t: tv.Transport):
    s = rho_sweep(t.problem, t.gamma_rel, str(device))
    return figs.cost_against_rho(s, t.rho_rel, f"Cost and columns against rho, gamma = {t.gamma_rel:.3g} max C")


def rho_view(t: tv.Transport) -> ui.View:
    def draw_view():
        fig = ui.guarded("transport/rho", lambda: rho_figure(t))
        if fig is not None:
            ui.show_figure(fig, key="rho_sweep")
            st.caption("Every source always sends exactly its mass a_i. As rho grows the targets' masses b are held "
                       "more firmly: the columns' KL divergence from b falls to 0 and the cost rises from that of the "
                       "prior-softmax plan (each source to its nearest targets, rho = 0) to the balanced plan's "
                       "(rho = ∞). The orange-red line is the sidebar's rho.")

    return ui.View(draw_view, ("rho_sweep",), lambda: [rho_figure(t)])


def side_figure(t: tv.Transport, gamma_rel: float):
    solver = tv.side_solver(t.solver)
    side = transport(t.problem, solver, gamma_rel, str(device), t.rho_rel)
    return figs.plan_with_marginals(side.plan, t.problem.a, t.problem.b, f"gamma = {gamma_rel:g} max C",
                                    height=480, compact=True)


def side_view(t: tv.Transport) -> ui.View:
    return ui.side_by_side(
        "gamma / max C", tv.Keys.SIDE_GAMMA_REL, 1e-4, 1e1, tv.SIDE_GAMMAS,
        lambda side, gamma_rel: side_figure(t, gamma_rel),
        help="The regularisation of the {side} plan.",
        caption=f"The {tv.side_solver(t.solver)} plans of the same problem at two regularisations"
                + (" (the exact solver has no gamma)" if t.solver == "exact" else "")
                + ": a small gamma keeps the plan close to an optimal one (the sparse exact plan where only one "
                  "plan is optimal; where several are, the most spread of them, which can be dense), a large gamma "
                  "blurs it towards the independent coupling $a b^\\top$.")


ui.live("transport/solve", ui.style.beside_figure(gamma_slot), gamma_slider, solve, draw)
