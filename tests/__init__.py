"""kubetape tests: unit (no services), integration (real Kafka + KWOK), e2e (record → replay)."""
