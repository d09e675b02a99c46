"""The rules of the house (docs/ARCHITECTURE.md), checked on the source: one stem per page in every layer, thin
pages whose widget keys and view labels are the constants of their views, a library that never imports streamlit,
short functions, wviz importable from anywhere, and no deprecation raised in wviz (pytest.ini)."""
import ast
import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from wviz.registry import PAGES as REGISTRY

ROOT = Path(__file__).resolve().parents[1]
PAGES = [page.stem for page in REGISTRY]
MAX_LINES = 80


def imports(path: Path) -> set[str]:
    """The top-level packages and the modules a file imports."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def code_lines(lines: list[str], node: ast.FunctionDef) -> int:
    """Lines of code of a function: not blank, not a comment, not its docstring."""
    doc = set()
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        doc = set(range(first.lineno, first.end_lineno + 1))
    return sum(1 for i in range(node.lineno, node.end_lineno + 1)
               if i not in doc and lines[i - 1].strip() and not lines[i - 1].strip().startswith("#"))


def defined(path: Path) -> set[str]:
    """The names of the functions a module defines at its top level."""
    return {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)}


def test_a_page_is_one_registry_entry_and_the_files_of_its_stem():
    assert PAGES and len(set(PAGES)) == len(PAGES) and len({p.title for p in REGISTRY}) == len(REGISTRY)
    assert sorted(p.stem for p in (ROOT / "pages").glob("*.py")) == sorted(PAGES), \
        "every pages/<stem>.py has its entry in wviz/registry.py, and every entry its page"
    for page in REGISTRY:
        stem = page.stem
        for layer in (f"wviz/views/{stem}.py", f"wviz/figures/{stem}.py", f"tests/views/test_{stem}.py",
                      f"tests/app/test_{stem}_page.py"):
            assert (ROOT / layer).is_file(), f"page {stem} has no {layer}"
        assert "at_defaults" in defined(ROOT / f"wviz/views/{stem}.py"), f"wviz/views/{stem}.py: no at_defaults()"
        assert "main_figure" in defined(ROOT / f"wviz/figures/{stem}.py"), f"wviz/figures/{stem}.py: no main_figure()"
        source = (ROOT / "pages" / f"{stem}.py").read_text()
        assert 'figs.main_figure(' in source and f'key="{page.figure}"' in source, \
            f"pages/{stem}.py does not draw figs.main_figure under key {page.figure!r}"
    assert {p.stem for p in (ROOT / "wviz/views").glob("*.py")} - {"__init__"} <= set(PAGES)
    assert {p.stem for p in (ROOT / "wviz/figures").glob("*.py")} - {"__init__", "common"} <= set(PAGES)
    assert {p.stem[5:-5] for p in (ROOT / "tests/app").glob("test_*_page.py")} <= set(PAGES)


@pytest.mark.parametrize("stem", PAGES)
def test_pages_hold_widgets_and_layout_only(stem):
    used = imports(ROOT / "pages" / f"{stem}.py")
    assert not {n for n in used if n.split(".")[0] in ("torch", "numpy", "pandas", "pages")}, used
    assert not {n for n in used if n.startswith("wviz.") and n.split(".")[1] not in ("ui", "views", "figures")}, \
        "a page calls the library through its views module"


# Where a page names a widget's key: the keyword key= of any call but those that draw a result (figures, charts,
# tables: their keys name what is drawn, not a setting), and these helpers' key argument, by position.
KEY_ARGUMENT = {"table_editor": 1, "table_from_url": 1, "side_by_side": 1, "Slider": 0, "log_grid": 0}
STATE = ("session_state", "query_params")   # st.session_state, st.query_params
DRAWN = {"show_figure", "show_chart", "shared_figure", "figure_view", "follow", "animation", "dataframe"}


def literal_keys(path: Path) -> list[str]:
    """The widget keys a page writes as string literals or f-strings, and the session's or the URL's values it reads
    by a literal name (wviz's own start with "_"), each with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        keys = []
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if name not in DRAWN:
                keys += [k.value for k in node.keywords if k.arg == "key"]
            if name in KEY_ARGUMENT and len(node.args) > KEY_ARGUMENT[name]:
                keys.append(node.args[KEY_ARGUMENT[name]])
            if name in ("get", "pop") and getattr(getattr(node.func, "value", None), "attr", "") in STATE:
                keys += node.args[:1]
        elif isinstance(node, ast.Subscript) and getattr(node.value, "attr", "") in STATE:
            keys.append(node.slice)
        found += [f"{path.name}:{k.lineno} {ast.unparse(k)}" for k in keys if isinstance(k, ast.JoinedStr)
                  or isinstance(k, ast.Constant) and isinstance(k.value, str) and not k.value.startswith("_")]
    return found


def uses(source: str, cls: str, name: str) -> bool:
    """Whether a page's source reads the constant ``name`` of its views' Keys or Labels: ``xv.Keys.NAME``, or
    ``K.NAME`` after ``K = xv.Keys`` (or ``K, L = xv.Keys, xv.Labels``)."""
    aliases = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            names, values = node.targets[0], node.value
            pairs = zip(names.elts, values.elts) if isinstance(names, ast.Tuple) and isinstance(values, ast.Tuple) \
                else [(names, values)]
            aliases += [a.id for a, v in pairs if isinstance(a, ast.Name) and getattr(v, "attr", "") == cls]
    owners = [rf"\.{cls}", *(rf"(?<![\w.]){alias}" for alias in aliases)]
    return any(re.search(rf"{owner}\.{name}\b", source) for owner in owners)


@pytest.mark.parametrize("stem", PAGES)
def test_pages_name_widget_keys_by_the_constants_of_their_views(stem):
    """Every widget key is a constant of wviz/views/<stem>.py's Keys (a "{}" template where the page fills in a
    part), which the page, its guided links (tests/test_lecture_hall.py) and the tests read: none is typed in the
    page. Every constant of Keys and Labels is used by the page, so they describe it; a Side by side view's key is
    Keys.SIDE_*, which the guided links' check reads as its two sliders' keys, key_left and key_right."""
    assert not literal_keys(ROOT / "pages" / f"{stem}.py")
    views = importlib.import_module(f"wviz.views.{stem}")
    source = (ROOT / "pages" / f"{stem}.py").read_text()
    sides = [ast.unparse(n.args[1]) for n in ast.walk(ast.parse(source))
             if isinstance(n, ast.Call) and ast.unparse(n.func) == "ui.side_by_side"]
    assert all(re.fullmatch(r"\w+\.Keys\.SIDE_\w+", key) for key in sides), sides
    for cls in ("Keys", "Labels"):
        names = [n for n in vars(getattr(views, cls)) if not n.startswith("_")]
        assert names or cls == "Labels", f"wviz/views/{stem}.py has no {cls}"
        unused = [n for n in names if not uses(source, cls, n)]
        assert not unused, f"pages/{stem}.py does not use {cls} {unused}"


@pytest.mark.parametrize("stem", PAGES)
def test_a_pages_settings_are_its_own(stem):
    """Pages share key names (view, tau, samples: the names of the URL, which shared links keep) and Streamlit keeps
    one session_state for all: each page hands its views' Keys to ui.page_setup, whose state.own_page drops the
    last page's settings on a switch and keeps the URL parameters the Keys name, every guided link's among them.
    No key is a session-wide setting (presentation mode), which travels from page to page."""
    from wviz.ui.state import SESSION_WIDE, own_params

    views = importlib.import_module(f"wviz.views.{stem}")
    tree = ast.parse((ROOT / "pages" / f"{stem}.py").read_text())
    alias = next(a.asname or a.name for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module == "wviz.views" for a in n.names if a.name == stem)
    handed = [ast.unparse(k.value) for n in ast.walk(tree) if isinstance(n, ast.Call)
              and ast.unparse(n.func) == "ui.page_setup" for k in n.keywords if k.arg == "keys"]
    assert handed == [f"{alias}.Keys"], f"pages/{stem}.py does not call ui.page_setup(..., keys={alias}.Keys)"
    assert not {v for n, v in vars(views.Keys).items() if not n.startswith("_")} & set(SESSION_WIDE)
    own = own_params(views.Keys)
    linked = {k for item in views.TRY_THIS for k in item.params}
    assert all(own.fullmatch(k) for k in linked), sorted(k for k in linked if not own.fullmatch(k))


@pytest.mark.parametrize("page", REGISTRY, ids=PAGES)
def test_the_registry_names_a_main_slider_of_the_page(page):
    keys = {v: n for n, v in vars(importlib.import_module(f"wviz.views.{page.stem}").Keys).items()
            if not n.startswith("_")}
    assert page.slider in keys, f"wviz/views/{page.stem}.py's Keys has no {page.slider!r}, the registry's main slider"
    assert uses((ROOT / "pages" / f"{page.stem}.py").read_text(), "Keys", keys[page.slider]), \
        f"pages/{page.stem}.py does not use Keys.{keys[page.slider]}"


def late_reads(path: Path) -> list[str]:
    """The module variables a page's function reads that are bound below the function (a settings or results
    variable the function sees only because the script has run further by the time it is called)."""
    tree = ast.parse(path.read_text())
    bound: dict[str, int] = {}
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
            for n in ast.walk(node):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    bound.setdefault(n.id, node.lineno)
    found = []
    for func in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        local = {a.arg for a in ast.walk(func) if isinstance(a, ast.arg)}
        local |= {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        found += [f"{func.name} reads {n.id} (line {bound[n.id]})" for n in ast.walk(func)
                  if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in local
                  and bound.get(n.id, 0) > func.lineno]
    return found


@pytest.mark.parametrize("stem", PAGES)
def test_pages_read_their_inputs_before_the_functions_that_use_them(stem):
    """A page's functions take what they draw from as arguments (the frozen results of its read functions) or read
    what the script bound above them, never a variable bound further down."""
    assert not late_reads(ROOT / "pages" / f"{stem}.py")


def test_the_late_read_check_sees_one(tmp_path):
    page = tmp_path / "page.py"
    page.write_text("x = 1\n\ndef draw(y):\n    return x + y + z\n\nz = 2\n")
    assert late_reads(page) == ["draw reads z (line 6)"]


@pytest.mark.parametrize("stem", PAGES)
def test_pages_rerun_through_ui_live_not_their_own_control_flow(stem):
    """A page's main slider and what it drives rerun in ui.live's fragment; a page that cannot draw something
    shows why (ui.guarded) and draws the rest, rather than stopping the script."""
    nodes = list(ast.walk(ast.parse((ROOT / "pages" / f"{stem}.py").read_text())))
    called = [n.func for n in nodes if isinstance(n, ast.Call)]
    called += [d for n in nodes if isinstance(n, ast.FunctionDef) for d in n.decorator_list]
    names = {getattr(f, "attr", getattr(f, "id", "")) for f in called}
    assert "stop" not in names and "fragment" not in names and "live" in names, names


def test_the_library_never_imports_streamlit_outside_ui():
    for path in (ROOT / "wviz").rglob("*.py"):
        if "ui" not in path.relative_to(ROOT / "wviz").parts:
            assert not any(n.split(".")[0] == "streamlit" for n in imports(path)), path


def test_figures_draw_and_views_compute():
    for path in (ROOT / "wviz/figures").glob("*.py"):
        assert not {n for n in imports(path) if n.startswith(("wviz.views", "torch.nn", "wviz.ot"))}, path
    for path in (ROOT / "wviz/views").glob("*.py"):
        assert not {n for n in imports(path) if n.startswith("wviz.figures")}, path


def test_no_function_of_the_library_is_longer_than_80_lines():
    long = []
    for path in (ROOT / "wviz").rglob("*.py"):
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and code_lines(lines, node) > MAX_LINES:
                long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({code_lines(lines, node)})")
    assert not long, long


def test_wviz_imports_from_another_folder(tmp_path):
    """`pip install -e .` (the Makefile's set-up) makes wviz importable outside the checkout, as in a notebook."""
    out = subprocess.run([sys.executable, "-c", "import wviz.ot, wviz.views; print(wviz.__file__)"],
                         cwd=tmp_path, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()) == ROOT / "wviz" / "__init__.py"


def test_a_deprecation_raised_in_wviz_is_an_error_and_only_named_ones_are_ignored(pytestconfig):
    """pytest.ini: a DeprecationWarning attributed to a module of wviz fails the test; one attributed to a
    third-party module that pytest.ini names (POT's ot.smooth) is ignored; any other one is shown."""
    if pytestconfig.getoption("pythonwarnings"):
        pytest.skip("-W on the command line takes precedence over pytest.ini's filters")

    def warn_from(module: str):   # warnings.warn attributes a warning to its caller's __name__
        exec("import warnings\nwarnings.warn('old ' + __name__, DeprecationWarning)", {"__name__": module})

    with pytest.raises(DeprecationWarning, match="old wviz.ot.entropic"):
        warn_from("wviz.ot.entropic")
    with warnings.catch_warnings(record=True) as shown:
        for module in ("ot.smooth", "wvizard", "numpy"):
            warn_from(module)
    assert sorted(str(w.message) for w in shown) == ["old numpy", "old wvizard"]


def test_wviz_type_checks():
    """mypy over wviz with pyproject.toml's settings ([tool.mypy]: every package of wviz, the libraries read
    as Any). A test rather than a step of make: it runs on a worker beside the others."""
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
