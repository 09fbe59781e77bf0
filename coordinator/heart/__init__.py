"""The heart of the coordinator: the action ledger's rules and the dispatcher that applies them.

- `context`, `orders`, `run_kinds`: values only (states, what a transaction knows, the orders
  it decides, what a kind of run adds to the rules); leaves of the package.
- `ledger`, `outcomes`, `slots`: the rules, each applied inside one store transaction.
- `dispatch`: the async side, batching worker messages into transactions and sending orders.

Run kinds (research, desktop, goal) are passed in at wiring (`server.py`), so the heart imports
none of them (`tests/test_imports.py` holds it to that).
"""
