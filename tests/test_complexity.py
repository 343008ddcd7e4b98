"""Issue 22's acceptance, kept: no product function over cyclomatic complexity 15 (radon's
count) and none of 80 lines or more, in the packages that ship and the testbed they run on.

Each function is measured on its own: a nested function or a class inside a function is its
own entry, not part of its parent's count (radon's rule for closures). Lines run from the
``def`` to the last line of the body, docstring and blank lines included.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from radon.visitors import ComplexityVisitor

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("relay", "transceiver", "common", "rtcedge", "testbed")
MAX_COMPLEXITY = 15
MAX_LINES = 79  # "under 80 lines"

# Functions allowed over the limits for a while, named; a stale entry fails
# ``test_the_allow_list_holds_only_functions_still_over``.
ALLOWED: frozenset[str] = frozenset()  # empty: every product function is within the limits

Function = ast.FunctionDef | ast.AsyncFunctionDef


def functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, Function]]:
    """Every function of a module, nested ones included, by qualified name
    (``Class.method``, ``outer.inner``)."""
    found: list[tuple[str, Function]] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, Function):
            found.append((prefix + node.name, node))
            found += functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            found += functions(node, f"{prefix}{node.name}.")
        else:
            found += functions(node, prefix)
    return found


def complexity(node: Function) -> int:
    """radon's cyclomatic complexity of one function, its nested functions left out."""
    visitor = ComplexityVisitor.from_ast(ast.Module(body=[node], type_ignores=[]))
    return visitor.functions[0].complexity


def offenders(label: str, source: str) -> dict[str, str]:
    """``label::qualname`` -> what is over the limits, for each function of ``source`` that is."""
    over = {}
    for name, node in functions(ast.parse(source)):
        lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
        score = complexity(node)
        problems = []
        if score > MAX_COMPLEXITY:
            problems.append(f"complexity {score} > {MAX_COMPLEXITY}")
        if lines > MAX_LINES:
            problems.append(f"{lines} lines > {MAX_LINES}")
        if problems:
            over[f"{label}::{name}"] = f"{label}:{node.lineno} {name}: {', '.join(problems)}"
    return over


def product_offenders() -> dict[str, str]:
    over: dict[str, str] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            over |= offenders(path.relative_to(ROOT).as_posix(), path.read_text())
    return over


def test_no_product_function_is_over_the_limits() -> None:
    over = {key: why for key, why in product_offenders().items() if key not in ALLOWED}
    assert not over, "split these (cold branches into methods; hot paths stay inline):\n" + (
        "\n".join(over.values())
    )


def test_the_allow_list_holds_only_functions_still_over() -> None:
    stale = ALLOWED - product_offenders().keys()
    assert not stale, f"no longer over the limits (or gone): drop from ALLOWED: {sorted(stale)}"


def _branches(count: int) -> str:
    """A function of complexity ``count`` + 1 in ``count`` + 2 lines."""
    body = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(count))
    return f"def branchy(x):\n{body}    return -1\n"


def _long(lines: int) -> str:
    """A function of complexity 1 and ``lines`` lines."""
    body = "".join(f"    x += {i}\n" for i in range(lines - 2))
    return f"def long(x):\n{body}    return x\n"


def test_a_function_over_complexity_15_is_named() -> None:
    assert offenders("sample.py", _branches(14)) == {}  # complexity 15: the limit itself
    over = offenders("sample.py", "class Box:\n" + textwrap.indent(_branches(15), "    "))
    assert over == {"sample.py::Box.branchy": "sample.py:2 Box.branchy: complexity 16 > 15"}


def test_a_function_of_80_lines_is_named() -> None:
    assert offenders("sample.py", _long(79)) == {}
    over = offenders("sample.py", _long(80))
    assert over == {"sample.py::long": "sample.py:1 long: 80 lines > 79"}


def test_a_nested_function_counts_on_its_own() -> None:
    inner = textwrap.indent(_branches(15), "    ")
    over = offenders("sample.py", f"def outer():\n{inner}    return branchy\n")
    assert list(over) == ["sample.py::outer.branchy"]
