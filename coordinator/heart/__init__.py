"""The heart of the coordinator: the action ledger's rules and the dispatcher that applies them.

- `context`, `run_kinds`: values only (states, what a transaction knows, what a kind of run
  adds to the rules); the orders it decides are in `coordinator/model/orders.py`.
- `ledger`, `outcomes`, `slots`: the rules, each applied inside one store transaction.
- `dispatch`: the async side, batching worker messages into transactions and sending orders.
- `faults`: test-only fault points, armed by the environment.

Run kinds (research, desktop, goal) are passed in at wiring (`app/server.py`), so the heart
imports none of them (`tests/unit/project/test_imports.py` holds it to that).
"""
