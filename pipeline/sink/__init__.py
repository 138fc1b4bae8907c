"""The sink stage."""
