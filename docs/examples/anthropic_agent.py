"""A Claude agent on a fleet desktop: the Anthropic SDK's tool runner with deskfleet's computer
toolset, under the approval a person gives and the fleet's kill switch.

    DESKFLEET_COORDINATOR=127.0.0.1:50051 DESKFLEET_TOKEN_FILE=~/.config/deskfleet/me.token \\
    ANTHROPIC_API_KEY=sk-ant-... python docs/examples/anthropic_agent.py lab-desk "TASK"

The README's "Agents on a fleet desktop" shows this file; `make lint` type-checks it and
tests/e2e/client/test_integrations.py runs it on a real desktop (with a stand-in model).
"""

from __future__ import annotations

import asyncio
import sys

from anthropic import AsyncAnthropic

import deskfleet
from deskfleet.integrations.anthropic import FleetComputer

ACTIONS = ["screenshot", "left_click", "double_click", "scroll", "type", "key", "cursor_position"]


async def main(worker: str, task: str) -> str:
    async with await deskfleet.AsyncClient.connect() as fleet:
        desk = await fleet.request_desktop(worker, actions=ACTIONS, reason=task)
        async with desk, AsyncAnthropic() as claude:
            await desk.wait_approved(timeout=600)  # a person answers `deskfleet approvals`
            runner = claude.beta.messages.tool_runner(
                model="claude-sonnet-5-5",
                max_tokens=4096,
                tools=[FleetComputer(desk)],  # only the approved actions are offered
                messages=[{"role": "user", "content": task}],
            )
            final = await runner.until_done()
    return "".join(block.text for block in final.content if block.type == "text")


if __name__ == "__main__":
    print(asyncio.run(main(sys.argv[1], sys.argv[2])))
