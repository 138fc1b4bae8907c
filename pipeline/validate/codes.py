"""Rule codes, and the codes kubetape used before it took SimKube's.

A rule that is SimKube's (``skctl validate``) has SimKube's code: W0000, E0001-E0005, so ``--ignore E0004``
means the same to both tools. kubetape's own rules have K codes (``KE0008``, ``KW0006``: K, the severity,
a number), outside SimKube's range, so a rule SimKube adds later cannot take their code.

kubetape once numbered its own rules on from SimKube's E0003, so E0004 meant a missing PVC where SimKube
means a missing Secret volume. :data:`FORMER_CODES` maps those codes to the rules' codes now; they are
still accepted, with a note (:func:`former_code_note`) naming the current code.
"""

from __future__ import annotations

FORMER_CODES: dict[str, str] = {
    "E0004": "KE0004",  # pvc_missing; E0004 is SimKube's volume_secret_missing now
    "E0005": "KE0005",  # cluster_scoped_object; E0005 is SimKube's volume_configmap_missing now
    "W0006": "KW0006",
    "W0007": "KW0007",
    "E0008": "KE0008",
    "E0009": "KE0009",
    "E0010": "KE0010",
    "E0011": "KE0011",
    "E0012": "KE0012",
    "E0013": "KE0013",
    "W0014": "KW0014",
}
"""kubetape's former code of each of its own rules -> the rule's code now."""


def former_code_note(code: str, rule_name: str, current: str | None) -> str:
    """What to tell a user who gave the former code ``code`` of rule ``rule_name``: ``current`` is the
    rule ``code`` names now (SimKube's), or None when ``code`` is no rule's code any more."""
    new = FORMER_CODES[code]
    if current is not None:
        return (
            f"{code} is SimKube's {current} (as in skctl validate); kubetape's {rule_name}, "
            f"which was {code} before, is {new}"
        )
    return f"{code} is deprecated: {rule_name} is {new} now (kubetape's own rules have K codes); use {new}"
