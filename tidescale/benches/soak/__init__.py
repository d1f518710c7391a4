"""`tidescale bench soak`: every service for minutes under normal and hostile traffic at once.

`run.py` drives a run (one service at a time), `services.py` starts each service and says what its
normal clients send, `attacks.py` holds the hostile clients (and the hostile request lists the tests
share), `fakes.py` the Prometheus and Triton pods the recommender reads, `monitor.py` the process that
probes `/healthz` and reads /proc, `stats.py` the arithmetic and the goals, `report.py` the page and plot.
"""
