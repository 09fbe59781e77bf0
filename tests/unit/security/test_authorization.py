"""Access rules as data: every RPC has exactly one rule, the documented matrix is the rules,
and the failure count works per host within its window. Against a real coordinator:
tests/integration/security/test_authorization.py."""

from __future__ import annotations

from pathlib import Path

from coordinator.app.server import SERVICE_NAMES
from coordinator.security import authz
from coordinator.security.ratelimit import FailureLimiter, host_of
from tests.integration.security.test_authorization import ROLES, _ruled_matrix


def _all_methods() -> set[str]:
    from google.protobuf import descriptor_pool

    pool = descriptor_pool.Default()
    return {
        f"/{name}/{method.name}"
        for name in SERVICE_NAMES
        for method in pool.FindServiceByName(name).methods
    }


def test_every_rpc_has_exactly_one_rule_and_every_rule_an_rpc() -> None:
    methods = _all_methods()
    assert methods - set(authz.RULES) == set(), "RPCs without an access rule"
    assert set(authz.RULES) - methods == set(), "rules for RPCs that do not exist"


SECURITY_DOC = Path(__file__).resolve().parents[3] / "docs" / "SECURITY.md"


def _documented_matrix() -> dict[str, dict[str, bool]]:
    """docs/SECURITY.md's table: `Service.Method` -> role -> allowed."""
    text = SECURITY_DOC.read_text()
    table = text.split("<!-- matrix:start -->")[1].split("<!-- matrix:end -->")[0]
    matrix = {}
    for line in table.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        matrix[cells[0].strip("`")] = {
            r: c == "yes" for r, c in zip(ROLES, cells[1:5], strict=True)
        }
    return matrix


def test_the_documented_matrix_is_the_rules() -> None:
    assert _documented_matrix() == _ruled_matrix()


def test_the_failure_limiter_counts_per_host_within_its_window() -> None:
    now = [0.0]
    limiter = FailureLimiter(3, window=60.0, clock=lambda: now[0])
    assert [limiter.failed("ipv4:10.0.0.1") for _ in range(3)] == [None, None, None]
    assert limiter.spent("ipv4:10.0.0.1") == 60.0  # the allowance is used up, not yet over it
    assert limiter.failed("ipv4:10.0.0.1") == 60.0  # the fourth is over the allowance
    assert limiter.spent("ipv4:10.0.0.2") is None  # another host is not held back
    now[0] = 30.0
    assert limiter.failed("ipv4:10.0.0.1") == 30.0
    now[0] = 60.5
    assert limiter.spent("ipv4:10.0.0.1") is None  # the first failures aged out
    now[0] = 1000.0
    assert limiter.failed("ipv4:10.0.0.1") is None
    assert FailureLimiter(0).failed("x") is None and FailureLimiter(0).spent("x") is None
    assert host_of("ipv4:10.0.0.1:51234") == "ipv4:10.0.0.1"
    assert host_of("ipv6:[::1]:5") == "ipv6:[::1]"
