"""What a replay reports: the report and its progress (:mod:`.report`), the fidelity verdict against the
recording (:mod:`.fidelity`), and the tally of the replay's pods it is judged on (:mod:`.pod_tally`)."""
