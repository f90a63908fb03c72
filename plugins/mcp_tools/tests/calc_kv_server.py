"""The MCP server of the tests: a calculator and a key-value store.

``python calc_kv_server.py`` serves over stdio (one process per episode: the store starts
empty); ``python calc_kv_server.py --http PORT`` serves streamable HTTP on 127.0.0.1:PORT/mcp
(one store per MCP session, so episodes do not see each other's keys).
"""

from __future__ import annotations

import ast
import operator
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("calc-kv")
_stores: dict[str, dict[str, str]] = {}
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}


def _eval(node: ast.AST) -> int:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.left), _eval(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand)
    raise ToolError(f"unsupported expression element {type(node).__name__}")


@server.tool()
def calculator(expression: str) -> str:
    """Evaluate an integer arithmetic expression (+ - * // %)."""
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"not an expression: {exc.msg}") from None
    return str(_eval(tree))


def _store(ctx: Context) -> dict[str, str]:
    # over HTTP the MCP session header names the episode; over stdio the process is one
    headers = ctx.headers or {}
    return _stores.setdefault(str(headers.get("mcp-session-id", "stdio")), {})


@server.tool()
def kv_set(key: str, value: str, ctx: Context) -> str:
    """Store value under key."""
    _store(ctx)[key] = value
    return "ok"


@server.tool()
def kv_get(key: str, ctx: Context) -> str:
    """The value stored under key."""
    store = _store(ctx)
    if key not in store:
        raise ToolError(f"no value stored under {key!r}")
    return store[key]


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
