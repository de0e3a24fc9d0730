"""The API client now lives in the `checkpoint-console-client` distribution (`clients/python/`)."""

from checkpoint_console.client import CheckpointAPIError, CheckpointClient, HeadMoved

__all__ = ["CheckpointAPIError", "CheckpointClient", "HeadMoved"]
