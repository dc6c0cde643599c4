"""A Kubernetes API on loopback (kmock's emulator behind the real REST paths): what the
simulated kubelets, the workload controllers and the controller read and write through the
official client."""
