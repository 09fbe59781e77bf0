"""Research, a plan and a desktop through the deskfleet client library.

    DESKFLEET_COORDINATOR=127.0.0.1:50051 DESKFLEET_TOKEN_FILE=~/.config/deskfleet/me.token \\
        python docs/examples/client_quickstart.py "what changed?" https://example.org/changes.html

The README's client section shows this file; `make lint` type-checks it (mypy strict) and
tests/e2e/client/test_client.py runs it against a real coordinator.
"""

from __future__ import annotations

import asyncio
import sys

import deskfleet


async def main(question: str, url: str, worker: str | None = None) -> int:
    async with await deskfleet.AsyncClient.connect() as fleet:
        status = await fleet.status()
        print(f"{status.headless_online} browser(s), {status.computer_use_online} desktop(s)")

        report = await fleet.research(question, urls=[url])
        for passage in report.passages[:3]:
            print(f"{passage.score or 0:.2f} {passage.url}: {passage.text[:80]}")

        plan = {"actions": [{"kind": "diag.echo", "args": {"value": "hi"}, "idempotent": True}]}
        handle = await fleet.submit_plan(plan)
        async for event in handle.watch():
            print(event.seq, event.kind)
        run = await handle.result(timeout=60)
        print(run.status, run.stop_reason)

        if worker is not None:
            desk = await fleet.request_desktop(worker, actions=["screenshot"], ttl=300)
            async with desk:
                await desk.wait_approved(timeout=600)  # a person answers `deskfleet approvals`
                png = await desk.screenshot()
                print(f"screenshot: {len(png)} bytes")
        return 0 if run.succeeded else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2], *sys.argv[3:4])))
