"""A replay under an autoscaler: the providers (:mod:`.provider`; Karpenter today, the HPA next), their
time settings divided by the speed (:mod:`.settings`), the instance types offered (:mod:`.instance_types`),
a sweep's axes over pools (:mod:`.axes`), the recorded nodes as the reference (:mod:`.nodes`) and the
figures of a run (:mod:`.figures`)."""
