"""Adapters that let agent frameworks drive a fleet desktop through `deskfleet`.

- `deskfleet.integrations.anthropic.FleetComputer`: the Anthropic SDK's computer toolset
  (`computer_toolset_20260801`), for `AsyncAnthropic().beta.messages.tool_runner`.
- `deskfleet.integrations.openai_agents.FleetComputer`: the OpenAI Agents SDK's
  `AsyncComputer`, for `ComputerTool` (`pip install 'deskfleet[openai-agents]'`).

Neither is imported here: each needs its own SDK, and only the one in use must be installed.
"""
