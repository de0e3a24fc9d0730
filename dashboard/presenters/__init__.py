"""Presentation logic the console's views share: small dataclass rows, no requests and no writes."""
