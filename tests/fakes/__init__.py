"""In-memory stand-ins for the systems kubetape talks to, shared by the unit tests."""
