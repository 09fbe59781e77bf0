"""Research runs: search, fetch in parallel, fan in; the routing policy, its desktop fallback
and the evidence report."""
