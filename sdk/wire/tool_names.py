"""The names of the tools Berth gives every agent: reserved, so no agent's own tool can take one."""

SPAWN_AGENT_TOOL = "spawn_agent"
ASK_HUMAN_TOOL = "ask_human"
