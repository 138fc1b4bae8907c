"""The only layer that touches Kafka, the Kubernetes API, HTTP and the segment store."""
