"""A model of kube-scheduler: its filter and score plugins, its configuration, and the loop
that calls the scheduler extender over HTTP as kube-scheduler does."""
