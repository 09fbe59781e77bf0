"""The console rewords RPC names in the coordinator's refusals for people, but never what a
person typed: a value the message quotes back ("no user 'GetRun'", a run filter by an owner
named like an RPC) was reworded into "no user '“open a run”'", which nobody typed."""

from __future__ import annotations

import pytest

from coordinator.console.wording import for_people
from shared.errors import DeskfleetError, FailedPreconditionError, NotFoundError


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (NotFoundError("no user 'GetRun'"), "no user 'GetRun'"),
        (NotFoundError("no user " + repr("Get'Run")), 'no user "Get\'Run"'),
        (
            NotFoundError("no worker with id or name 'ListAudit' (see `deskfleet workers list`)"),
            "no worker with id or name 'ListAudit' (see `deskfleet workers list`)",
        ),
        # Outside quotes an RPC name is still said as what it does, possessives and all.
        (
            FailedPreconditionError("an owner's run: GetRun refused for 'x'"),
            "an owner's run: “open a run” refused for 'x'",
        ),
    ],
)
def test_a_quoted_value_is_echoed_as_typed(error: DeskfleetError, said: str) -> None:
    assert for_people(error) == said
