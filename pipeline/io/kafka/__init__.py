"""kubetape's one home for Kafka (aiokafka), so a new way of reading a topic is a change in one file.

* :mod:`.settings`: how to reach the broker and the names of every topic;
* :mod:`.security`: TLS and SASL of every client, from a properties file and ``$KUBETAPE_KAFKA_*``;
* :mod:`.headers`: which cluster of a fleet wrote a record (the header and the filter on it);
* :mod:`.message`: the one consumed :class:`~.message.Message` and the sink's per-partition batch;
* :mod:`.clients`: producers, consumers and admin clients built in one place, with kubetape's delivery
  guarantees and the connection's security;
* :mod:`.publisher`: the watcher's ordered, bounded, loss-free publishing;
* :mod:`.admin`: creating topics and describing their partitions;
* :mod:`.reader`: the one reader, configured by where it starts, where it ends and an optional group;
* :mod:`.reads`: the bounded and tailing reads built on it (a time range, the live tail, compacted
  read-back, the clusters a topic's last records name);
* :mod:`.sink_member`: the sink's consumer-group member (rebalance callbacks, dead letters).
"""
