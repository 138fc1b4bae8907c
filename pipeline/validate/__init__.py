"""Trace validation and declarative repair: find what would break a replay, and fix it."""
