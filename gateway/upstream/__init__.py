"""Upstream adapters: one module per protocol behind a small base class."""
