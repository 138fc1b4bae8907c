"""Provisioning and supervision of the local real stack: a Kafka broker and KWOK clusters, no Docker."""
