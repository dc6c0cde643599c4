"""The Kubernetes inventory: nodes and pods through the official client's ApiClient (one JSON
adapter), and the GPU facts read from pod manifests."""
