"""Clients for the Checkpoint Console API.

`CheckpointClient` needs only the standard library. `checkpoint_console.langgraph.ConsoleSaver` is a
LangGraph checkpoint saver (install the `langgraph` extra).
"""

from .client import CheckpointAPIError, CheckpointClient, HeadMoved

__all__ = ["CheckpointAPIError", "CheckpointClient", "HeadMoved"]
