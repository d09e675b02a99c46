"""Docs that run: the public functions of the math modules, and the entry points of wviz.vit and wviz.models,
show a small example (>>>) in their docstrings, and every example in those modules gives what it prints."""
import doctest
import importlib
import inspect

import pytest

# module -> the functions that must show an example (None: every function in the module's __all__)
EXAMPLES = {
    "wviz.attention": None,
    "wviz.ot": None,
    "wviz.ot.semirelaxed": None,
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
    "wviz.models.minilm": ("load", "forward", "make_normaliser", "attention_maps", "compare"),
    "wviz.models.figure4": ("fenchel_deviation",),
    "wviz.models.normalisers": None,
    "wviz.models.swap": None,
    "wviz.models.families": None,
    "wviz.models.safety": None,
    "wviz.models.hub": None,
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


def doc_modules() -> list[str]:
    """Every module whose examples run: those above and the submodules their functions live in (wviz.ot's)."""
    found = set(EXAMPLES)
    for name, names in EXAMPLES.items():
        found |= {f.__module__ for f in public_functions(importlib.import_module(name), names).values()}
    return sorted(found)


@pytest.mark.parametrize("name", doc_modules())
def test_the_examples_give_what_they_print(name):
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for test in doctest.DocTestFinder(exclude_empty=True).find(module, name, globs={}):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {name} failed (output above)"
