"""Desktop runs: a person's scoped approval, then one Computer Use action at a time under it;
the scope rules, approvals and admission of an action, and peeks at a requested screen."""
