"""The event wire format (the value of every ``kubetape.events`` message), in one place.

* :mod:`.codec` encodes and decodes events, and holds the wire's envelope (version, type codes, field
  counts);
* :mod:`.rules` is the one written definition of which messages the sink admits
  (:func:`.rules.admitted_event`);
* :mod:`.probe` checks messages by those rules without building the object body (the sink's Python
  ingest path, and the fallback of the C scan);
* :mod:`.native` loads the C scan (``_wirescan.c``), which takes the common cases of the probe's work
  in bulk and leaves everything else to it.

The probe and the C scan are faster ways to the definition's answer: tests/unit/test_wire_validity.py
drives one table of valid and invalid messages through all three.
"""
