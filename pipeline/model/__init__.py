"""Pure data and functions shared by every stage: events, keys, tracer config, sanitizing, hashes."""
