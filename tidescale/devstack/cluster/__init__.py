"""The local Kubernetes cluster: upstream control plane, our node agent, the add-ons."""
