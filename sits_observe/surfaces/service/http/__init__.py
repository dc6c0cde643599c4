"""The service's HTTP plumbing: sockets bound first, servers and limits, authentication, the
staged start, and one JSON error shape for every answer."""
