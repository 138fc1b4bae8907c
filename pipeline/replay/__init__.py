"""The replay stage."""
