"""Core package shared by every stage: wire contract, stage runtime, store, model, CLI."""

__version__ = "0.1.0"
