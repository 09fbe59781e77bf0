"""What `deskfleet mcp` reads off its stdin before the MCP SDK does: a request whose JSON gives
a key twice is refused, naming the key's path.

The SDK parses each line itself and keeps the last of two values for one key, so a plan given
to `submit_plan` with `"idempotent": false, "idempotent": true` would reach the tool as
idempotent with nothing left to show it was ever ambiguous. The line is looked at here, as it
arrives (`shared/receipts.given_twice`, the reading the coordinator and the CLI share), and
the request it carries is answered by a middleware before any handler runs: a tool call with
a tool error naming the argument's path (`plan.actions[0].idempotent: given twice`), any
other request with INVALID_PARAMS. A notification has no answer to carry the refusal and
goes on as the SDK reads it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from typing import Any, TextIO, cast

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, CallToolResult, TextContent

from shared.receipts import given_twice

# Where a tool call's arguments sit in its request: a path inside them is named from there.
ARGUMENTS = "params.arguments."
# Refusals read ahead of their handling, at most: a client sends a request and waits for it.
MAX_PENDING = 1024


class GivenTwice:
    """The requests read whose JSON gave a key twice, by request id, until each is handled."""

    def __init__(self) -> None:
        self._refused: dict[str | int, str] = {}

    def read(self, line: str) -> None:
        """Look at one line off the wire; a request in it that gives a key twice is kept to
        be refused when it is handled."""
        path = given_twice(line)
        if path is None:
            return
        try:
            message = json.loads(line)  # read as the SDK reads it: the last value counts
        except ValueError:
            return
        request_id = message.get("id") if isinstance(message, dict) else None
        if isinstance(request_id, bool) or not isinstance(request_id, str | int):
            return  # a notification or a response: nothing will answer it
        if message.get("method") == "tools/call" and path.startswith(ARGUMENTS):
            path = path.removeprefix(ARGUMENTS)
        if len(self._refused) < MAX_PENDING:
            self._refused[request_id] = f"{path}: given twice"

    async def lines(self, stdin: Any) -> AsyncIterator[str]:
        """The lines of `stdin` (an async iterable of text lines), each read as it passes."""
        async for line in stdin:
            self.read(line)
            yield line

    async def refuse(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """The middleware: a request kept by `read` is answered with its refusal."""
        why = None if ctx.request_id is None else self._refused.pop(ctx.request_id, None)
        if why is None:
            return await call_next(ctx)
        if ctx.method == "tools/call":
            return CallToolResult(content=[TextContent(type="text", text=why)], is_error=True)
        raise MCPError(INVALID_PARAMS, why)


async def serve_stdio(server: Server[Any]) -> None:
    """Serve `server` on stdin and stdout as the SDK's stdio transport does, its lines read by
    `GivenTwice` on the way in (the SDK's own reader sees the same lines after)."""
    given = GivenTwice()
    server.middleware.insert(0, given.refuse)
    # The transport only iterates its stdin (`async for line in stdin`), which this does.
    stdin = cast("anyio.AsyncFile[str]", given.lines(anyio.wrap_file(_stdin())))
    async with stdio_server(stdin=stdin) as (read, write):
        await server.run(read, write, server.create_initialization_options())


def _stdin() -> TextIO:
    """Standard input as UTF-8 text; closefd=False: fd 0 stays open whatever becomes of it."""
    return open(sys.stdin.fileno(), encoding="utf-8", errors="replace", closefd=False)
