"""The local cluster's node agent: it runs each pod's containers as host processes in a sandbox of its own."""
