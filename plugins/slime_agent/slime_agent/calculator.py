"""Safe arithmetic: the ``calculator`` tool's evaluator.

The expression is parsed with :mod:`ast` and only these nodes are evaluated: numbers,
``+ - * / // % **``, unary ``+``/``-``, parentheses, the constants ``pi`` and ``e`` and the
functions ``abs round min max sqrt floor ceil``. Nothing is ever passed to ``eval``; names,
attributes, subscripts, strings and every other node are refused with a message naming it.
Limits keep one call cheap: at most 500 characters, exponents up to 10,000 in magnitude,
integer results up to 4,000 digits.
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any, Callable

MAX_EXPRESSION_CHARS = 500
MAX_EXPONENT = 10_000
MAX_INT_DIGITS = 4_000


class CalculatorError(ValueError):
    """The expression is not allowed or cannot be evaluated."""


_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs, "round": round, "min": min, "max": max, "sqrt": math.sqrt,
    "floor": math.floor, "ceil": math.ceil,
}
_CONSTANTS = {"pi": math.pi, "e": math.e}


def evaluate(expression: str) -> int | float:
    """The value of ``expression`` (see the module docstring); :class:`CalculatorError` if refused."""
    if not isinstance(expression, str) or not expression.strip():
        raise CalculatorError("the expression is empty")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"invalid expression: {exc.msg}") from None
    try:
        return _eval(tree.body)
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except OverflowError:
        raise CalculatorError("the result is too large") from None


def format_number(value: int | float) -> str:
    """Integers as digits; floats with 12 significant digits, integral ones without ``.0``."""
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.12g}"
    return str(value)


def _number(value: Any) -> int | float:
    if isinstance(value, int) and len(str(abs(value))) > MAX_INT_DIGITS:
        raise CalculatorError(f"the result has more than {MAX_INT_DIGITS} digits")
    return value


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise CalculatorError(f"only numbers are allowed, got {node.value!r}")
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        v = _eval(node.operand)
        return v if isinstance(node.op, ast.UAdd) else -v
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.BitXor):
            raise CalculatorError("'^' is not a power here; write ** for powers")
        fn = _BINOPS.get(type(node.op))
        if fn is None:
            raise CalculatorError(f"operator {type(node.op).__name__} is not allowed")
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalculatorError(f"exponents are limited to {MAX_EXPONENT} in magnitude")
        if (isinstance(node.op, ast.Pow) and isinstance(left, int) and isinstance(right, int)
                and right > 0 and abs(left) > 1
                and right * math.log10(abs(left)) > MAX_INT_DIGITS):
            raise CalculatorError(f"the result has more than {MAX_INT_DIGITS} digits")
        result = fn(left, right)
        if isinstance(result, complex):
            raise CalculatorError("the result is not a real number")
        return _number(result)
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
            shown = node.func.id if isinstance(node.func, ast.Name) else type(node.func).__name__
            raise CalculatorError(
                f"function {shown!r} is not allowed; use one of {', '.join(sorted(_FUNCTIONS))}"
            )
        if node.keywords:
            raise CalculatorError("keyword arguments are not allowed")
        args = [_eval(a) for a in node.args]
        try:
            return _number(_FUNCTIONS[node.func.id](*args))
        except (TypeError, ValueError) as exc:
            raise CalculatorError(f"{node.func.id}(): {exc}") from None
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise CalculatorError(f"unknown name {node.id!r}; only pi and e are defined")
    raise CalculatorError(f"{type(node).__name__} is not allowed in an arithmetic expression")
