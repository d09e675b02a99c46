"""Docs that run: every docstring example (>>>) of every module of wviz gives what it prints (the modules are
found by walking the package, so a new module's examples run with no list to keep), and the public functions of
the math modules, and the entry points of wviz.vit and wviz.models, show one."""
import doctest
import importlib
import inspect
import os
import pkgutil

import pytest

import wviz

# module -> the functions that must show an example (None: every function in the module's __all__)
EXAMPLES = {
    "wviz.attention": None,
    "wviz.ot": None,
    "wviz.ot.semirelaxed": None,
    "wviz.ot.relaxation": ("relaxed_into",),
    "wviz.grids": None,
    "wviz.gaussian": None,
    "wviz.fenchel": None,
    "wviz.measure": None,
    "wviz.wsa": None,
    "wviz.vit.model": ("build_model", "mc_predict"),
    "wviz.vit.metrics": None,
    "wviz.vit.rollout": None,
    "wviz.vit.patches": None,
    "wviz.vit.inspection": None,
    "wviz.vit.demo": ("load_bundled", "load_upload", "model_set"),
    "wviz.vit.shapes": ("draw",),
    "wviz.vit.checkpoint": ("save_checkpoint", "load_checkpoint"),
    "wviz.vit.evaluate": ("evaluate",),
    "wviz.vit.calibration": None,
    "wviz.vit.intervals": None,
    "wviz.vit.occlusion": None,
    "wviz.vit.maps": ("rule_traces", "verdict"),
    "wviz.vit.data": ("carve_validation", "mixed_halves", "letters"),
    "wviz.vit.mnist": ("load", "letters"),
    "wviz.models.minilm": ("load", "forward", "make_normaliser", "attention_maps", "compare"),
    "wviz.models.figure4": ("fenchel_deviation",),
    "wviz.models.normalisers": None,
    "wviz.models.swap": None,
    "wviz.models.families": None,
    "wviz.models.safety": None,
    "wviz.models.hub": None,
    "wviz.models.catalogue": ("options", "from_url"),
    "wviz.models.lens": None,
    "wviz.models.tasks": None,
    "wviz.models.sinks": None,
    "wviz.models.tiny": None,
}
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def public_functions(module, names):
    names = names or [n for n in module.__all__ if inspect.isfunction(getattr(module, n))]
    return {n: getattr(module, n) for n in names}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_every_public_function_shows_an_example(name):
    module = importlib.import_module(name)
    missing = [n for n, f in public_functions(module, EXAMPLES[name]).items() if ">>>" not in (f.__doc__ or "")]
    assert not missing, f"{name}: no >>> example in {missing}"


def wviz_modules() -> list[str]:
    """wviz and every package and module under it, read from the files (pkgutil.iter_modules, package by package):
    unlike pkgutil.walk_packages this imports nothing, so collecting this file stays cheap (wviz.ui imports
    streamlit). No module is left out."""
    names, todo = ["wviz"], [(wviz.__path__, "wviz.")]
    while todo:
        path, prefix = todo.pop()
        for m in pkgutil.iter_modules(path, prefix):
            names.append(m.name)
            if m.ispkg:
                todo.append(([os.path.join(m.module_finder.path, m.name.rpartition(".")[2])], m.name + "."))
    return sorted(names)


@pytest.mark.parametrize("name", wviz_modules())
def test_the_examples_give_what_they_print(name):
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for test in doctest.DocTestFinder(exclude_empty=True).find(module, name, globs={}):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {name} failed (output above)"
