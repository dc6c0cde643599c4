"""Right-sizing: GPU memory per workload (the VPA recommender's method on framebuffer peaks), in
the form its GPU stack takes, backtested; replicas at the SLO; the elastic quota rule's inputs."""
