"""An OpenAI Agents SDK agent on a fleet desktop: `ComputerTool` with deskfleet's computer,
under the approval a person gives and the fleet's kill switch.

    DESKFLEET_COORDINATOR=127.0.0.1:50051 DESKFLEET_TOKEN_FILE=~/.config/deskfleet/me.token \\
    OPENAI_API_KEY=sk-... python docs/examples/openai_agent.py lab-desk "TASK"

The README's "Agents on a fleet desktop" shows this file; `make lint` type-checks it and
tests/e2e/client/test_integrations.py runs it on a real desktop (with a stand-in model).
"""

from __future__ import annotations

import asyncio
import sys

from agents import Agent, ComputerTool, Runner

import deskfleet
from deskfleet.integrations.openai_agents import FleetComputer

ACTIONS = ["screenshot", "left_click", "double_click", "scroll", "type", "key", "mouse_move"]


async def main(worker: str, task: str) -> str:
    async with await deskfleet.AsyncClient.connect() as fleet:
        desk = await fleet.request_desktop(worker, actions=ACTIONS, reason=task)
        async with desk:
            await desk.wait_approved(timeout=600)  # a person answers `deskfleet approvals`
            agent = Agent(
                name="desk",
                instructions="Work on the desktop you are given; stop when a note says to.",
                model="gpt-5.5",
                tools=[ComputerTool(computer=FleetComputer(desk))],
            )
            result = await Runner.run(agent, task, max_turns=30)
    return str(result.final_output)


if __name__ == "__main__":
    print(asyncio.run(main(sys.argv[1], sys.argv[2])))
