"""A Prometheus-compatible store as a source: a small client of the HTTP query API and the reads
the analytics, the controller and the extender make through it."""
