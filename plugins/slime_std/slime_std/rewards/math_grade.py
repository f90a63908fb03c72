"""Rule-based answer equivalence (Hendrycks MATH normalisation + a sympy check).

What slime's ``deepscaler`` reward (from DeepScaleR's grader) decides, re-implemented:

* :func:`mathd_equal`: both strings normalised as the MATH benchmark does (``\\dfrac`` and
  ``\\tfrac`` to ``\\frac``, ``\\frac12`` to ``\\frac{1}{2}``, ``a/b`` of integers to
  ``\\frac{a}{b}``, ``0.5`` to ``\\frac{1}{2}``, no ``\\left``/``\\right``, degrees, ``\\$``,
  ``\\%``, units after ``\\text{ ``, spaces, a short ``x =`` prefix) and compared as strings.
* :func:`sympy_equal`: a second normalisation (units, ``$``, ``%``, thousands separators,
  ``\\text{}``, integral floats to integers, lower case), then tuples and intervals element by
  element (the brackets must agree), and each element: two integer fractions must be written
  the same (``2/4`` is not ``1/2``: an unreduced answer is wrong); an integer answer must be an
  integer (``\\sqrt{4}`` is not ``2``); otherwise the difference must simplify to 0 under
  sympy. Expressions that could make sympy hang (nested or long exponents, more than two
  unknown letters, longer than 200 characters) are not evaluated, so they are not equal.

:func:`grade` is ``mathd_equal or sympy_equal``; it never raises.
"""

from __future__ import annotations

import re
from typing import Any

_MAX_EVAL_CHARS = 200
_BAD_SUBSTRINGS = ("^{", "^(")
_BAD_REGEXES = (re.compile(r"\^[0-9]+\^"), re.compile(r"\^[0-9][0-9]+"))
_TUPLE_CHARS = "()[]"


# -- MATH normalisation -----------------------------------------------------------------------
def _fix_fracs(s: str) -> str:
    parts = s.split("\\frac")
    out = parts[0]
    for part in parts[1:]:
        out += "\\frac"
        if part.startswith("{") or len(part) < 2:
            out += part
            continue
        a, b, rest = part[0], part[1], part[2:]
        out += "{" + a + "}" + (b + rest if b == "{" else "{" + b + "}" + rest)
    return out


def _fix_slash(s: str) -> str:
    m = re.fullmatch(r"(-?\d+)/(\d+)", s)
    return f"\\frac{{{m.group(1)}}}{{{m.group(2)}}}" if m else s


def _fix_sqrt(s: str) -> str:
    return re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", s)


def mathd_normalize(answer: str) -> str:
    """The MATH benchmark's string normalisation of an answer."""
    s = answer.strip()
    m = re.fullmatch(r"\\text\{(.+?)\}", s)
    if m:
        s = m.group(1).strip()
    s = s.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "")
    s = s.replace("\\$", "")
    if "\\text{ " in s:  # "5 \text{ cm}": a unit on the right
        s = s.split("\\text{ ")[0]
    s = s.replace("\\%", "").replace("%", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if s.startswith("."):
        s = "0" + s
    lhs, eq, rhs = s.partition("=")
    if eq and "=" not in rhs and len(lhs.strip()) <= 2:  # "x = 5", "k=3"
        s = rhs
    s = _fix_sqrt(s).replace(" ", "")
    s = _fix_fracs(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _fix_slash(s)


def mathd_equal(given: str, truth: str) -> bool:
    return mathd_normalize(given) == mathd_normalize(truth)


# -- sympy equivalence ------------------------------------------------------------------------
_UNITS = ("degree", "cm", "centimeter", "meter", "mile", "second", "minute", "hour", "day",
          "week", "month", "year", "foot", "feet", "inch", "yard")


def _strip_thousands(s: str) -> str:
    prev = None
    while prev != s:
        prev, s = s, re.sub(r"(\d),(\d\d\d)($|\D)", r"\1\2\3", s)
    return s


def _is_int_str(s: str) -> bool:
    try:
        x = float(_strip_thousands(s))
    except ValueError:
        return False
    return abs(x - round(x)) <= 1e-7


def _is_frac_str(s: str) -> bool:
    return bool(re.fullmatch(r"-?[0-9]+.?/0*[1-9][0-9]*.?", s))


def sympy_normalize(expr: str) -> str:
    s = expr
    m = re.fullmatch(r"\\text\{(.+?)\}", s)
    if m:
        s = m.group(1)
    s = s.replace("\\%", "").replace("\\$", "").replace("$", "").replace("%", "")
    s = s.replace(" or ", " , ").replace(" and ", " , ")
    for word, power in (("million", 6), ("billion", 9), ("trillion", 12)):
        s = s.replace(word, f"*10^{power}")
    for unit in _UNITS:
        s = re.sub(rf"{unit}(es)?(s)? *(\^[0-9]+)?", "", s)
    s = re.sub(r"\^ *\\circ", "", s)
    if len(s) > 1 and s[0] == "{" and s[-1] == "}":
        s = s[1:-1]
    s = re.sub(r",\\! *", "", s)
    try:
        f = float(s)
        if abs(f - round(f)) <= 1e-7:
            s = str(int(round(f)))
    except ValueError:
        pass
    s = re.sub(r"- *", "-", s)
    s = re.sub(r"([0-9]) +([0-9])", r"\1+\2", s)  # "7 3/4" is a mixed number
    s = s.replace(" ", "").lower()
    if _is_int_str(s):
        s = str(int(float(_strip_thousands(s))))
    return s


def _allow_eval(expr: str) -> bool:
    if len(expr) > _MAX_EVAL_CHARS:
        return False
    if "\\" in expr:  # LaTeX: braces are syntax; refuse two-digit and stacked exponents
        return not re.search(r"\^\{?\s*-?[0-9]{2}|\^[^^]*\^", expr)
    letters = set(c for c in expr.replace("sqrt", "").replace("frac", "") if c.isalpha())
    if len(letters) > 2:
        return False
    if any(b in expr for b in _BAD_SUBSTRINGS):
        return False
    return not any(r.search(expr) for r in _BAD_REGEXES)


def _parse(expr: str) -> Any:
    import sympy
    from sympy.parsing import sympy_parser

    if "\\" in expr:
        from latex2sympy2_extended import latex2sympy

        return latex2sympy(_fix_fracs(expr))
    names = {k: v for k, v in vars(sympy).items() if not k.startswith("_")}
    return sympy_parser.parse_expr(
        expr.replace("^", "**").replace("{", "(").replace("}", ")"),
        local_dict={}, global_dict={"__builtins__": {}, **names},
        transformations=sympy_parser.standard_transformations
        + (sympy_parser.implicit_multiplication_application,),
    )


def _sympy_same(a: str, b: str) -> bool:
    if not (_allow_eval(a) and _allow_eval(b)):
        return False
    try:
        import sympy

        return bool(sympy.simplify(_parse(a) - _parse(b)) == 0)
    except Exception:  # noqa: BLE001 - unparsable text is simply not equal
        return False


def _elements(s: str) -> list[str]:
    s = _strip_thousands(s)
    if len(s) > 2 and s[0] in _TUPLE_CHARS and s[-1] in _TUPLE_CHARS \
            and not any(c in s[1:-1] for c in _TUPLE_CHARS):
        return [e.strip() for e in s[1:-1].split(",")]
    return [s]


def sympy_equal(given: str, truth: str) -> bool:
    t, g = sympy_normalize(truth), sympy_normalize(given)
    if t == g:
        return True
    if not g:
        return False
    te, ge = _elements(t), _elements(g)
    if len(te) > 1 and (t[0] != g[0] or t[-1] != g[-1]):
        return False  # (1,2) is an open interval, [1,2] a closed one
    if len(te) != len(ge):
        return False
    for a, b in zip(te, ge, strict=True):
        if _is_frac_str(a) and _is_frac_str(b):
            ok = a == b
        elif _is_int_str(a) != _is_int_str(b):
            ok = False
        else:
            ok = _sympy_same(a, b)
        if not ok:
            return False
    return True


def grade(given: str | None, truth: str | None) -> bool:
    """Whether ``given`` is the same answer as ``truth`` (see the module docstring)."""
    if given is None or truth is None or not str(truth).strip():
        return False
    given, truth = str(given), str(truth)
    try:
        return mathd_equal(given, truth) or sympy_equal(given, truth)
    except Exception:  # noqa: BLE001 - a grader never fails on model text
        return False
