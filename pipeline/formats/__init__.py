"""File and wire formats: kubetape segments, SimKube v2 traces, export assembly."""
