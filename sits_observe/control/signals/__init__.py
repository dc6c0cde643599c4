"""Where the controller's signals come from: the seam, the store's and a PromQL store's
implementations, and the queues' usage (store and Kubernetes API)."""
