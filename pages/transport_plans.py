"""Page "Transport plans": watch an entropic, exact or quadratic transport plan form between two measures."""
import pandas as pd
import streamlit as st
import torch

from wviz import io, ot, samples, ui
from wviz.views import transport_plans as tv
from wviz.figures import transport_plans as figs
from wviz.figures.common import to_numpy

device = ui.page_setup(
    "Transport plans",
    "Move mass $a$ on the source points to mass $b$ on the target points, paying $C_{ij}$ per unit sent from "
    "$i$ to $j$. The exact plan is sparse and jumps when the data move; the entropic plan of eq. (23) of the "
    "002 paper, $\\min_{P \\in U(a, b)} \\langle C, P \\rangle - \\gamma H(P)$, is smooth, dense and computed by "
    "Sinkhorn's alternating scaling (Cuturi 2013); as $\\gamma \\to 0$ its cost tends to the exact one. A "
    "squared-L2 regulariser (Blondel et al. 2018) gives plans that are smooth *and* sparse.",
)

# ---- the problem ----------------------------------------------------------------------------------------------
sb = st.sidebar
kind = sb.radio("Problem", ["point clouds", "cost matrix"], key="problem", bind="query-params",
                help="Two 2-D point clouds with a ground cost, or a cost matrix typed or uploaded.")


def read_clouds():
    """x (n, 2), a (n,), y (m, 2), b (m,) from a preset (editable in a table) or an uploaded CSV."""
    upload = sb.file_uploader("Upload points (CSV)", type=["csv"], key="points_csv",
                              help="Columns cloud,x,y[,mass] with cloud = source or target; at most "
                                   f"{io.MAX_POINTS} points per cloud, {io.MAX_UPLOAD_BYTES // 2**20} MB.")
    if upload is not None:
        return io.read_points_csv(upload.getvalue())
    preset = sb.selectbox("Preset", samples.PRESETS, key="preset", bind="query-params",
                          help="Where the two clouds come from.")
    n = sb.slider("n (source points)", 2, 512, 40, key="n", bind="query-params", help="Size of the source cloud.")
    m = sb.slider("m (target points)", 2, 512, 30, key="m", bind="query-params", help="Size of the target cloud.")
    seed = sb.number_input("seed", 0, 2**31 - 1, 0, key="seed", bind="query-params", help="Seed of the preset.")
    x, y = samples.point_clouds(preset, n, m, seed)
    table = pd.DataFrame({"cloud": ["source"] * n + ["target"] * m,
                          "x": torch.cat([x[:, 0], y[:, 0]]).numpy(), "y": torch.cat([x[:, 1], y[:, 1]]).numpy(),
                          "mass": [1.0] * (n + m)})
    with st.expander("Edit the points and their masses"):
        st.caption("Masses are normalised per cloud; a zero mass removes a point from the problem.")
        table = ui.table_editor(table, f"points_{preset}_{n}_{m}_{seed}", disabled=["cloud"], hide_index=True)
    return io.read_points_csv(table.to_csv(index=False).encode())


def read_marginal(text: str, size: int, name: str) -> torch.Tensor:
    values = torch.tensor(ui.parse_numbers(text, f"mass of {name}"), dtype=torch.float64)
    if values.numel() != size:
        raise ValueError(f"{name} needs {size} masses (one per {'row' if name == 'a' else 'column'}), "
                         f"got {values.numel()}")
    return values


def read_cost():
    """C (n, m), a, b from a typed or uploaded matrix; marginals uniform or typed."""
    upload = sb.file_uploader("Upload cost matrix (CSV, no header)", type=["csv"], key="cost_csv",
                              help=f"n rows of m numbers; at most {io.MAX_POINTS} per side.")
    if upload is not None:
        C = io.read_matrix_csv(upload.getvalue())
    else:
        C = io.parse_matrix(sb.text_area("Cost matrix C", "0 2 4\n2 0 2\n4 2 0\n1 1 3", key="cost_text",
                                         bind="query-params",
                                         help="One row per line (source i), entries C_ij separated by spaces."))
    n, m = C.shape
    if sb.radio("Marginals", ["uniform", "edited"], key="marginals", bind="query-params",
                help="Uniform masses, or type a and b.") == "uniform":
        return C, torch.full((n,), 1.0 / n, dtype=torch.float64), torch.full((m,), 1.0 / m, dtype=torch.float64)
    a = read_marginal(sb.text_input("a (source masses)", ", ".join(["1"] * n), key=f"a_{n}", bind="query-params",
                                    help="n non-negative masses; must total the same as b."), n, "a")
    b = read_marginal(sb.text_input("b (target masses)", ", ".join([f"{n / m:.6g}"] * m), key=f"b_{m}",
                                    bind="query-params",
                                    help="m non-negative masses; must total the same as a."), m, "b")
    return C, a, b


cost_kind = sb.selectbox("Ground cost", ["sqeuclidean", "euclidean", "l1", "cosine", "dot"], key="cost_kind",
                         bind="query-params", disabled=kind != "point clouds",
                         help="C_ij between x_i and y_j (point clouds only).")
gamma_slot = sb.container()  # gamma is drawn here by the fragment below, which a gamma move reruns alone
solver = sb.radio("Solver", tv.SOLVERS, key="solver", bind="query-params", horizontal=True,
                  help="sinkhorn: entropic OT (eq. (23)); exact: linear programme (POT's emd); quadratic: "
                       "squared-L2 regularised OT (sparse).")


def read_problem():
    """x, y (None for a cost matrix), a, b and C from the controls above; raises ValueError on bad input."""
    if kind == "point clouds":
        x, a, y, b = read_clouds()
        return dict(x=x, y=y, a=a, b=b, C=ot.cost_matrix(x, y, cost_kind))
    C, a, b = read_cost()
    return dict(x=None, y=None, a=a, b=b, C=C)


def _on_device(*arrays):
    return [torch.as_tensor(v, device=device) for v in arrays]


@st.cache_data(max_entries=32, show_spinner=False)
def solve_cached(solver, a, b, C, gamma):
    return tv.solve(solver, *_on_device(a, b, C), gamma)


# Snapshots hold ~40 plans each: keep few of them.
@st.cache_data(max_entries=4, show_spinner=False)
def snapshots_cached(a, b, C, gamma, n_iter):
    return tv.sinkhorn_snapshots(*_on_device(a, b, C), gamma, n_iter)


@st.cache_data(max_entries=16, show_spinner=False)
def sweep_cached(a, b, C, gammas):
    a, b, C = _on_device(a, b, C)
    return tv.gamma_sweep(a, b, C, torch.as_tensor(gammas)), float(ot.emd(a, b, C).cost)


problem = ui.guarded("transport/problem", read_problem)


@ui.fragment
def results():
    """gamma and everything it drives: moving gamma reruns this alone, not the page."""
    gamma_rel = ui.log_slider("gamma / max C", 1e-4, 1e1, 0.01, key="gamma", where=gamma_slot,
                              help="Entropic (or quadratic) regularisation, relative to the largest cost. Small: "
                                   "close to exact OT, more Sinkhorn iterations. Large: a blurred, dense plan.")
    if problem is None:
        return

    def solve():
        scale = float(problem["C"].abs().max())
        gamma = gamma_rel * (scale if scale > 0 else 1.0)
        return dict(problem, gamma=gamma, result=solve_cached(solver, *map(to_numpy, (problem["a"], problem["b"],
                                                                                          problem["C"])), gamma))

    with st.spinner("Solving..."):
        state = ui.guarded("transport/solve", solve)
    if state is None:
        return
    res, C, a, b, gamma = state["result"], state["C"], state["a"], state["b"], state["gamma"]

    # The numbers and the equation sit above the plan but are sent after it: the browser draws the plan first.
    numbers = st.container()
    P = res.plan.cpu()
    ui.show_figure(figs.plan_with_marginals(P, a, b, f"{solver} plan P"), key="plan")
    arrays = to_numpy(a), to_numpy(b), to_numpy(C)

    def lines_figure():
        return figs.plan_lines(state["x"], state["y"], P, a, b, "Mass moved from x_i to y_j")

    def sweep_figure():
        gammas = torch.logspace(-3, 1, 13, dtype=torch.float64) * float(C.abs().max() or 1.0)
        costs, exact = sweep_cached(*arrays, to_numpy(gammas))
        return figs.cost_against_gamma(gammas, costs, exact, gamma,
                                       "Entropic cost converges to the exact cost as gamma -> 0")

    views = {"Mass moved": state["x"] is not None, "Watch Sinkhorn converge": solver == "sinkhorn",
             "Cost against gamma": True}
    view = ui.view_selector("View", [v for v, shown in views.items() if shown], key="view",
                            help="The plan drawn between the two clouds, plain Sinkhorn's iterations one by one, "
                                 "or the entropic cost as gamma shrinks. The lecture bundle holds them all.")
    if view == "Mass moved":
        ui.show_figure(lines_figure(), key="lines")
    elif views["Mass moved"]:
        ui.bundle_figure("lines", lines_figure)
    if view == "Watch Sinkhorn converge":
        scrubber(res, arrays, gamma)
    elif views["Watch Sinkhorn converge"]:  # the bundle gets the last iteration shown
        for i, key in enumerate(("scrub_plan", "errors")):
            ui.bundle_figure(key, lambda i=i: scrub_figures(snapshots_cached(*arrays, gamma, int(res.n_iter)),
                                                            int(res.n_iter))[i])
    if view == "Cost against gamma":
        fig = ui.guarded("transport/sweep", sweep_figure)
        if fig is not None:
            ui.show_figure(fig, key="sweep")
    else:
        ui.bundle_figure("sweep", sweep_figure)

    with numbers:
        H = tv.entropy(P)
        cols = st.columns(5)
        cols[0].metric("transport cost <C, P>", f"{float(res.cost):.5g}")
        cols[1].metric("iterations", f"{int(res.n_iter)}")
        cols[2].metric("marginal error (L1)", f"{float(res.marginal_error):.1e}")
        cols[3].metric("converged", "yes" if bool(res.converged) else "NO")
        cols[4].metric("zero entries", f"{100 * tv.sparsity(P):.1f} %")
        if not bool(res.converged):
            st.warning("The solver stopped before the marginals met the tolerance: the plan shown is approximate. "
                       "Raise gamma or accept a looser tolerance.")
        if solver == "sinkhorn":
            ui.equation(rf"\min_{{P \in U(a,b)}} \langle C, P\rangle - \gamma H(P):\quad "
                        rf"{float(res.cost):.4g} - {gamma:.3g} \times {H:.4g} = {float(res.reg_cost):.4g}")
        elif solver == "quadratic":
            ui.equation(rf"\min_{{P \in U(a,b)}} \langle C, P\rangle + \tfrac{{\gamma}}{{2}}\lVert P\rVert^2:\quad "
                        rf"{float(res.cost):.4g} + \tfrac{{{gamma:.3g}}}{{2}} \times {float((P ** 2).sum()):.4g}"
                        rf" = {float(res.reg_cost):.4g}")
        else:
            ui.equation(rf"\min_{{P \in U(a,b)}} \langle C, P\rangle = {float(res.cost):.4g}")


def scrubber(res, arrays, gamma):
    """Plain Sinkhorn's iterations at this gamma, one plan at a time, and its marginal error."""
    snap = snapshots_cached(*arrays, gamma, int(res.n_iter))
    every, _ = tv.scrub_schedule(int(res.n_iter))
    iters = [it for it, _ in snap.plans]
    solver_says = (f"reached the tolerance in {int(res.n_iter)} iterations" if bool(res.converged) else
                   f"did not converge either: it stopped at its limit of {int(res.n_iter)} iterations")
    truncated = "" if bool(snap.converged) else (
        f" **Truncated:** plain Sinkhorn has not reached the tolerance 1e-6 after {snap.n_iter} iterations "
        f"(marginal error {float(snap.marginal_error):.1e}); only these first iterations are shown, so the last "
        f"plan here is not yet the solution.")
    st.caption(f"Both panels show **plain Sinkhorn** (no epsilon scaling, no over-relaxation) at this gamma from "
               f"the uniform start, not the solver above: each iteration rescales the rows to match a and the "
               f"columns to match b. The marginal error is read every {every} iterations, the plans every "
               f"{min((j - i for i, j in zip(iters, iters[1:])), default=every)}. The solver above, with epsilon "
               f"scaling and over-relaxation, {solver_says}.{truncated}")
    step = st.select_slider("Iteration", iters, value=iters[-1], key="scrub", bind="query-params",
                            help="Scrub through plain Sinkhorn's iterations: the plan after each row/column "
                                 "scaling.")
    plan_fig, errors_fig = scrub_figures(snap, int(res.n_iter), step)
    c1, c2 = st.columns(2)
    with c1:
        ui.show_figure(plan_fig, key="scrub_plan")
    with c2:
        ui.show_figure(errors_fig, key="errors")


def scrub_figures(snap, n_iter, step=None):
    """Plain Sinkhorn's plan after iteration ``step`` (default: the last recorded) and its marginal error curve."""
    every, _ = tv.scrub_schedule(n_iter)
    step = snap.plans[-1][0] if step is None else step
    plan_k = dict(snap.plans)[step].cpu()
    hist = snap.history.cpu()
    return (figs.plan_with_marginals(plan_k, plan_k.sum(1), plan_k.sum(0),
                                     f"plan after iteration {step} (bars: its marginals)"),
            figs.marginal_error_curve(hist[:, 0], hist[:, 1], 1e-6,
                                      f"Plain Sinkhorn: marginal error every {every} iterations", current=step))


results()
