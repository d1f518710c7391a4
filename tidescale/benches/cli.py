"""`tidescale bench …`: every benchmark against its peers, JSON on stdout, results in docs/benchmarks/.

Heavy imports stay inside the commands, so listing the group stays cheap."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from tidescale.contracts.slo import SLO_LATENCY_THRESHOLD_S

if TYPE_CHECKING:
    from tidescale.benches.autoscale.tuning_pairs import TuningPair

app = typer.Typer(help="Benchmarks against the peers, JSON on stdout (results in docs/benchmarks/).",
                  no_args_is_help=True)


# A latency SLO (P99 seconds) that a benchmark judges at: `bench autoscale`, `bench sizing`, `bench tuning`.
SLO_OPTION: Any = typer.Option(SLO_LATENCY_THRESHOLD_S, "--slo-latency-threshold", "--slo-p99",
                               help="Latency SLO, P99 seconds.")

# The replicas a benchmark's capacity load test runs through round robin on: the same three benches.
PROFILE_REPLICAS_OPTION: Any = typer.Option(
    1, "--profile-replicas", help="Load-test the capacity at the SLO through round robin on this many replicas (1: "
    "one replica, as perf_analyzer against one pod); recorded as <page>-profile-N-replicas.md.")


def _emit(result: dict[str, Any], as_json: bool, summary: str) -> None:
    """JSON on stdout with --json, else a one-screen summary (the full JSON is in the docs page)."""
    if as_json:
        typer.echo(json.dumps(result, indent=2, sort_keys=True))
    else:
        typer.echo(summary)


def _register_sim_benches(bench: typer.Typer) -> None:
    @bench.command("sim")
    def sim_command(
        as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
        quick: bool = typer.Option(False, "--quick", help="5 simulated minutes instead of 1 hour."),
        record: bool = typer.Option(True, "--record/--no-record", help="Write docs/benchmarks/sim.md."),
    ) -> None:
        """Simulate 1 h at 2,000 req/s over 50 replicas; compare with a naive event loop."""
        from rich.console import Console
        from rich.progress import Progress

        from tidescale.benches import sim

        duration = 300.0 if quick else 3600.0
        with Progress(console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task("simulating", total=duration)
            result = sim.run_bench(quick, progress=lambda t: progress.update(task, completed=t))
        if record:
            sim.record(result)
        _emit(result, as_json, sim.render(result))

    @bench.command("fidelity")
    def fidelity_command(
        as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
        quick: bool = typer.Option(False, "--quick", help="~10 s per load point instead of ~25 s."),
        seconds: float | None = typer.Option(None, "--seconds", min=2.0, max=600.0,
                                             help="Seconds of traffic per load point (overrides --quick)."),
        real: bool = typer.Option(True, "--real/--no-real",
                                  help="Run a real Triton replica (--no-real: simulator-only parts)."),
        workdir: Path | None = typer.Option(None, help="Keep Triton's model repository, logs and traces here."),
        record: bool = typer.Option(True, "--record/--no-record",
                                    help="Write docs/benchmarks/fidelity.md and fidelity.png."),
        queue_timeout: float | None = typer.Option(
            None, "--queue-timeout", help="Every side runs Triton's queue policy, REJECT after this many seconds "
            "in the queue; compares the share rejected too (recorded as fidelity-queue-timeout.md)."),
    ) -> None:
        """Real Triton vs the simulator at 50/80/95/120 % load, and the published queue-growth case."""
        from rich.console import Console

        from tidescale.benches import fidelity

        console = Console(stderr=True)
        result = fidelity.run_bench(quick=quick, real=real, workdir=workdir, log=console.log, seconds=seconds,
                                    queue_timeout_s=queue_timeout)
        if record:
            fidelity.record(result)
        _emit(result, as_json, fidelity.render(result))

    @bench.command("closed-loop")
    def closed_loop_command(
        demo_out: Path = typer.Option(Path("demo-out"), "--demo-out",
                                      help="A `tidescale demo` run: summary.json, timeline.json, values.yaml."),
        draws: int = typer.Option(10, "--draws", help="Simulated draws of the story (draw 0: the run's own requests)."),
        service: str = typer.Option("connections", "--service",
                                    help="connections: kube-proxy and clients that keep theirs, as the cluster ran; "
                                         "round-robin: a Service that spreads every request."),
        scheduler: str = typer.Option("stepped", "--scheduler",
                                      help="The simulator's batcher: stepped (what bench autoscale runs) or "
                                           "triton-2.51 (Triton's batcher thread, event by event)."),
        as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
        record: bool = typer.Option(True, "--record/--no-record",
                                    help="Write docs/benchmarks/fidelity-closed-loop.md and its PNG."),
    ) -> None:
        """The demo's story as the local cluster played it vs the same story in the simulator."""
        from tidescale.benches import loop_fidelity

        doc, run, results = loop_fidelity.run_bench(demo_out, draws, service, scheduler)
        if record:
            loop_fidelity.record(doc, run, results)
        _emit(doc, as_json, loop_fidelity.render(doc))


def _register_latency_benches(bench: typer.Typer) -> None:
    @bench.command("percentiles")
    def percentiles_command(
        json_only: bool = typer.Option(False, "--json", help="Only the JSON result on stdout."),
        quick: bool = typer.Option(False, "--quick", help="Fewer requests (still >= 1 M) for CI."),
        seed: int = typer.Option(7, min=0, help="Random seed of the latency shapes."),
    ) -> None:
        """Quantile error of our gauges and buckets vs default buckets and averaged summaries."""
        from tidescale.benches.percentiles import run_command

        run_command(json_only=json_only, quick=quick, seed=seed)

    @bench.command("ingest")
    def ingest_command(
        json_only: bool = typer.Option(False, "--json", help="Only the JSON result on stdout."),
        quick: bool = typer.Option(False, "--quick", help="Fewer bodies."),
    ) -> None:
        """OTLP spans per second per core into the running exporter vs bare protobuf decoding."""
        from tidescale.benches.ingest import run_command

        run_command(json_only=json_only, quick=quick)

    @bench.command("scale-out")
    def scale_out_command(
        json_only: bool = typer.Option(False, "--json", help="Only the JSON result on stdout."),
        quick: bool = typer.Option(False, "--quick", help="A 100-pod fleet only (not 2,000 and 10,000)."),
    ) -> None:
        """One exporter against one per node: poll and ingest at 2,000 and 10,000 Triton pods."""
        from tidescale.benches.scaleout import run_command

        run_command(json_only=json_only, quick=quick)

    @bench.command("scrape")
    def scrape_command(
        json_only: bool = typer.Option(False, "--json", help="Only the JSON result on stdout."),
        quick: bool = typer.Option(False, "--quick", help="Only 2,000 series (not 10,000)."),
    ) -> None:
        """/metrics render time at 2,000 and 10,000 series, and /healthz latency during a scrape."""
        from tidescale.benches.scrape import run_command

        run_command(json_only=json_only, quick=quick)

    @bench.command("cardinality")
    def cardinality_command(
        json_only: bool = typer.Option(False, "--json", help="Only the JSON result on stdout."),
        quick: bool = typer.Option(False, "--quick", help="A 100-pod fleet only (not 1,000 too)."),
    ) -> None:
        """Series tidescale adds per pod, model version and GPU, and a real Prometheus' RSS and rule time."""
        from tidescale.benches.cardinality import run_command

        run_command(json_only=json_only, quick=quick)


def _register_overhead_bench(bench: typer.Typer) -> None:
    @bench.command("overhead")
    def overhead_command(
        json_only: bool = typer.Option(False, "--json", help="Only the JSON result on stdout."),
        quick: bool = typer.Option(False, "--quick", help="3,000 requests per mode instead of 50,000."),
        mode: list[str] = typer.Option([], "--mode", help="none, summaries, otlp-N or tracefile-N (repeatable, "
                                       "or comma-separated); default none, summaries, otlp-1/10/100, "
                                       "tracefile-1/10."),
        requests: int | None = typer.Option(None, "--requests", help="Requests per mode (overrides --quick)."),
        client: str = typer.Option("auto", "--client", help="auto (perf_analyzer, else the load generator), "
                                   "perf_analyzer or loadgen."),
        concurrency: int = typer.Option(8, "--concurrency", help="perf_analyzer's concurrency."),
        rounds: int = typer.Option(2, "--rounds", help="Rounds per mode, in ABBA order, splitting the requests "
                                   "(their spread is the machine's noise)."),
    ) -> None:
        """Triton's and the exporter's CPU per request by tracing mode, and the P99 error vs the client's."""
        from tidescale.benches.overhead import DEFAULT_MODES
        from tidescale.benches.overhead_page import run_command

        run_command(json_only=json_only, quick=quick, modes=tuple(mode) or DEFAULT_MODES, requests=requests,
                    client=client, concurrency=concurrency, rounds=rounds)

    @bench.command("overhead-paired")
    def overhead_paired_command(
        json_only: bool = typer.Option(False, "--json", help="Only the JSON result on stdout."),
        quick: bool = typer.Option(False, "--quick", help="3,000 requests per replica and round instead of 25,000."),
        mode: list[str] = typer.Option([], "--mode", help="Traced modes, otlp-N or tracefile-N, each run beside "
                                       "none (repeatable, or comma-separated); default otlp-10."),
        requests: int | None = typer.Option(None, "--requests", help="Requests per replica and round (overrides "
                                            "--quick)."),
        client: str = typer.Option("auto", "--client", help="auto (perf_analyzer, else the load generator), "
                                   "perf_analyzer or loadgen."),
        concurrency: int = typer.Option(8, "--concurrency", help="perf_analyzer's concurrency, per replica."),
        rounds: int = typer.Option(6, "--rounds", help="Rounds on fresh replica pairs (>= 2: their spread gives "
                                   "the interval)."),
    ) -> None:
        """Triton's added CPU per request from tracing: a traced and an untraced replica under load at once."""
        from tidescale.benches.overhead_paired import run_command

        run_command(json_only=json_only, quick=quick, modes=tuple(mode) or ("otlp-10",), requests=requests,
                    client=client, concurrency=concurrency, rounds=rounds)

    @bench.command("trace-rate")
    def trace_rate_command(
        json_only: bool = typer.Option(False, "--json", help="Only the JSON result on stdout."),
        quick: bool = typer.Option(False, "--quick", help="Fewer latencies, samples and traced counts."),
        target: float = typer.Option(0.02, "--target", help="P99 relative error to advise for (0..1)."),
    ) -> None:
        """P99 error against traced requests per window, and the largest Triton rate=N per request rate."""
        from tidescale.benches.trace_rate import run_command

        run_command(json_only=json_only, quick=quick, target=target)


# --- profiles and the stats poller -----------------------------------------------------------------


def _register_profile_poll_benches(bench: typer.Typer) -> None:
    @bench.command("profiles")
    def profiles_command(
        json_only: bool = typer.Option(False, "--json", help="Only the JSON result on stdout."),
        quick: bool = typer.Option(False, "--quick", help="A smaller trace (still >= 200 MB)."),
        size_mb: int = typer.Option(220, help="Size of the generated Chrome trace in MB."),
    ) -> None:
        """Streaming op-share parse vs json.load of a >= 200 MB Chrome trace: MB/s and peak RSS."""
        from tidescale.benches.profiles import run_command

        run_command(json_only=json_only, quick=quick, size_mb=size_mb)

    @bench.command("poll")
    def poll_command(
        json_only: bool = typer.Option(False, "--json", help="Only the JSON result on stdout."),
        quick: bool = typer.Option(False, "--quick", help="Fewer cycles."),
        targets: int = typer.Option(500, help="Triton targets polled per cycle."),
    ) -> None:
        """Wall and CPU seconds per poll cycle over >= 500 targets x 10 models."""
        from tidescale.benches.poll import run_command

        run_command(json_only=json_only, quick=quick, targets=targets)


def _register_autoscale_bench(bench: typer.Typer) -> None:

    @bench.command("autoscale")
    def bench_autoscale(
        json_only: bool = typer.Option(False, "--json", help="Only the JSON result on stdout."),
        quick: bool = typer.Option(False, "--quick", help="20-minute scenarios instead of an hour."),
        scenario: list[str] = typer.Option([], "--scenario", help="Scenario name (repeatable); default all."),
        policy: list[str] = typer.Option([], "--policy", help="Policy name (repeatable); default all."),
        trace: Path | None = typer.Option(None, "--trace", help=TRACE_HELP + "."),
        target_rps: float | None = typer.Option(None, "--target-rps", help="Mean rate the trace is rescaled to."),
        trace_unit: str | None = typer.Option(None, "--trace-unit", help=TRACE_UNIT_HELP),
        slo_latency_threshold: float = SLO_OPTION,
        seed: int = typer.Option(0, "--seed", min=0),
        queue_policy: str = typer.Option(
            "recommended", "--queue-policy", help="Triton's queue policy on every replica: recommended (the SLO "
            "minus the largest batch, REJECT: what tidescale recommends) or none (recorded as "
            "autoscale-no-queue-policy.md)."),
        queue_timeout: float | None = typer.Option(
            None, "--queue-timeout", help="Instead: seconds a request may wait in a replica's queue before Triton "
            "rejects it, for every policy; recorded as autoscale-queue-timeout.md."),
        headroom: float = typer.Option(1.0, "--headroom", help="tidescale's standing headroom (x the load)."),
        headroom_sweep: list[float] = typer.Option(
            [], "--headroom-sweep", help="Also run tidescale at this headroom on surge scenarios (repeatable)."),
        sweep: bool = typer.Option(
            True, "--sweep/--no-sweep", help="Sweep each peer's main knob (--no-sweep: its fixed setting alone)."),
        peer_setting: list[str] = typer.Option(
            [], "--peer-setting", help="PEER=VALUE: run PEER at VALUE of its knob instead of its sweep (repeatable)."),
        capacity_error: list[float] = typer.Option(
            [], "--capacity-error", help="Also run tidescale configured with this factor x the measured capacity "
            "per replica: its capacity profile off by that much (repeatable)."),
        extra_seed: list[int] = typer.Option(
            [], "--extra-seed", help="Rerun tidescale's delivery modes, the oracle and each peer at its chosen "
            "setting on this seed's arrivals too, and judge each draw against the goals (repeatable)."),
        client_retries: int = typer.Option(
            0, "--client-retries", help="Every policy's clients retry a refused request (503, no endpoint) this "
            "often, with Envoy's back-off (25 ms base, 250 ms cap); recorded as autoscale-retries-N.md."),
        oracle_search: int | None = typer.Option(
            None, "--oracle-search", help="Simulations the search for the oracle's (cheapest) schedule may run per "
            "scenario and draw (default 150); 1 keeps the starting schedule, each second sized at the capacity at "
            "the SLO."),
        jobs: int = typer.Option(
            1, "--jobs", help="Runs of a scenario (then extra draws) simulated at once, in forked workers; the "
            "results are the same, the wall time shorter."),
        sizing: str | None = typer.Option(
            None, "--sizing", help="tidescale's sizing instead of the shipped one: fixed, burst or queue "
            "(docs/autoscaler.md); recorded as autoscale-<sizing>-sizing.md."),
        scheduler: str = typer.Option(
            "stepped", "--scheduler", help="The simulator's model of Triton's batcher on every replica: stepped, or "
            "triton-2.51 (its batcher thread event by event, ~3.5x the cost; under a queue timeout it runs the stepped "
            "model's batches); recorded as autoscale-[no-queue-policy-]triton-2.51-scheduler.md."),
        profile_replicas: int = PROFILE_REPLICAS_OPTION,
        write: bool = typer.Option(True, "--write/--no-write", help="Record docs/benchmarks/autoscale.md + PNGs."),
    ) -> None:
        """Closed-loop autoscaling: tidescale vs HPA CPU/GPU, Triton queue time, KEDA, KPA, Ray Serve, oracle."""
        from rich.console import Console

        from tidescale.benches.autoscale import report as benchreport
        from tidescale.benches.autoscale.policies import ALL_POLICIES
        from tidescale.benches.progress import progress_lines

        opts = benchreport.BenchOptions(scenario or None, tuple(policy) or ALL_POLICIES, quick, seed,
                                        slo_latency_threshold,
                                        trace, target_rps, queue_policy=queue_policy, queue_timeout_s=queue_timeout,
                                        headroom=headroom,
                                        headroom_sweep=tuple(headroom_sweep), sweep=sweep,
                                        peer_settings=tuple(peer_setting), extra_seeds=tuple(extra_seed),
                                        capacity_errors=tuple(capacity_error), client_retries=client_retries,
                                        jobs=jobs, sizing=sizing, scheduler=scheduler,
                                        profile_replicas=profile_replicas, trace_unit=trace_unit,
                                        **({} if oracle_search is None else {"oracle_search": oracle_search}))
        err = Console(stderr=True)
        with progress_lines(err, "autoscale benchmark") as tell:
            doc, runs = benchreport.run(opts, progress=tell)
        if write:
            doc_path, png_path, frontier_png = opts.paths
            benchreport.write(doc, runs, doc_path, png_path, frontier_png)
            err.print(f"wrote {doc_path}, {png_path} and {frontier_png}")
        if json_only:
            sys.stdout.write(json.dumps(doc) + "\n")
        else:
            typer.echo(benchreport.markdown(doc))
        # a yardstick that a policy beats is no yardstick: fail, once the results are recorded
        beaten = benchreport.beaten_oracles(doc)
        for line in beaten:
            err.print(f"oracle beaten: {line}", markup=False, highlight=False)
        if beaten:
            raise typer.Exit(1)

    @bench.command("sizing")
    def bench_sizing(
        json_only: bool = typer.Option(False, "--json", help="Only the JSON result on stdout."),
        scenario: list[str] = typer.Option([], "--scenario", help=PAIR_SCENARIO_HELP),
        draws: int | None = typer.Option(None, "--draws", help=PAIR_DRAWS_HELP),
        jobs: int = typer.Option(1, "--jobs", help=PAIR_JOBS_HELP),
        write: bool = typer.Option(True, "--write/--no-write",
                                   help="Record docs/benchmarks/autoscale-sizing.md + PNG."),
        slo_latency_threshold: float = SLO_OPTION,
        profile_replicas: int = PROFILE_REPLICAS_OPTION,
    ) -> None:
        """tidescale's sizings (fixed, burst) side by side, paired by draw: requests within the SLO and cost."""
        from tidescale.benches.autoscale import tuning_pairs

        _run_pair(tuning_pairs.SIZING.at_slo(slo_latency_threshold).profiled_on(profile_replicas), scenario, draws,
                  jobs, write, json_only)

    @bench.command("tuning")
    def bench_tuning(
        setting: list[str] = typer.Option([], "--set", help="KEY=VALUE: a `recommender.tuning` knob the "
                                          "candidate changes (repeatable; the knobs: `tidescale autoscale "
                                          "recommend --print-config`)."),
        json_only: bool = typer.Option(False, "--json", help="Only the JSON result on stdout."),
        scenario: list[str] = typer.Option([], "--scenario", help=PAIR_SCENARIO_HELP),
        draws: int | None = typer.Option(None, "--draws", help=PAIR_DRAWS_HELP),
        jobs: int = typer.Option(1, "--jobs", help=PAIR_JOBS_HELP),
        write: bool = typer.Option(True, "--write/--no-write",
                                   help="Record docs/benchmarks/autoscale-tuning-<knobs>.md + PNG."),
        slo_latency_threshold: float = SLO_OPTION,
        profile_replicas: int = PROFILE_REPLICAS_OPTION,
    ) -> None:
        """tidescale as shipped against the same with knobs changed, paired by draw: is the change worth it?"""
        from tidescale.benches.autoscale import tuning_pairs

        pair = tuning_pairs.candidate_pair(setting).at_slo(slo_latency_threshold).profiled_on(profile_replicas)
        _run_pair(pair, scenario, draws, jobs, write, json_only)

    @bench.command("cost")
    def bench_cost(
        json_only: bool = typer.Option(False, "--json", help="Only the JSON result on stdout."),
        scenario: list[str] = typer.Option([], "--scenario", help=PAIR_SCENARIO_HELP),
        draws: int | None = typer.Option(None, "--draws", help="Draws per scenario: seeds 0 .. N-1 (2 to 100; "
                                         "default 13, the autoscale page's)."),
        jobs: int = typer.Option(1, "--jobs", help=PAIR_JOBS_HELP),
        trace: Path | None = typer.Option(None, "--trace", help=TRACE_HELP + ": replayed alone "
                                          "(an hour in 20 minutes), each draw shifted in time."),
        target_rps: float | None = typer.Option(None, "--target-rps", help="Mean rate the trace is rescaled to."),
        trace_unit: str | None = typer.Option(None, "--trace-unit", help=TRACE_UNIT_HELP),
        write: bool = typer.Option(True, "--write/--no-write",
                                   help="Record docs/benchmarks/autoscale-cost[-trace-<file>][-<scenarios>].md + PNG."),
    ) -> None:
        """Where tidescale's replica-hours above the optimum go, by the decision that set its count."""
        from rich.console import Console

        from tidescale.benches.autoscale import cost_split
        from tidescale.benches.progress import progress_lines

        err = Console(stderr=True)
        with progress_lines(err, "autoscale cost benchmark") as tell:
            doc = cost_split.run(scenario or None, cost_split.DEFAULT_DRAWS if draws is None else draws, jobs,
                                 progress=tell, trace=trace, target_rps=target_rps, trace_unit=trace_unit)
        if write:
            md, png = cost_split.write(doc)
            err.print(f"wrote {md} and {png}")
        sys.stdout.write(json.dumps(doc) + "\n" if json_only else "\n".join(cost_split.lines(doc)) + "\n")


PAIR_SCENARIO_HELP = "Scenario name (repeatable); default every 20-minute one, the named groups' included."
TRACE_HELP = ("CSV (or JSON Lines) with a timestamp per request (ISO, or a number in the unit its header's last "
              "word names), in the first column or the one its header names as the time")
TRACE_UNIT_HELP = ("The unit of the trace's numeric timestamps, s, ms, us or ns, whatever its header or their size "
                   "say (relative milliseconds read as seconds otherwise).")
PAIR_DRAWS_HELP = "Draws per scenario: seeds 0 .. N-1 (2 to 100; default 20)."
PAIR_JOBS_HELP = "Draws simulated at once, in forked workers; the results are the same, the wall time shorter."


def _run_pair(pair: TuningPair, scenario: list[str], draws: int | None, jobs: int, write: bool,
              json_only: bool) -> None:
    """One `tuning_pairs` comparison: progress on stderr, the page written, the JSON or page on stdout."""
    from rich.console import Console

    from tidescale.benches.autoscale import tuning_pairs
    from tidescale.benches.progress import progress_lines

    err = Console(stderr=True)
    with progress_lines(err, f"{pair.page} benchmark") as tell:
        doc = tuning_pairs.run(pair, scenario or None, tuning_pairs.DEFAULT_DRAWS if draws is None else draws,
                               jobs, progress=tell)
    if write:
        md, png = tuning_pairs.write(doc)
        err.print(f"wrote {md} and {png}")
    sys.stdout.write(json.dumps(doc) + "\n" if json_only else "\n".join(tuning_pairs.lines(doc)) + "\n")


def _register_soak_bench(bench: typer.Typer) -> None:
    @bench.command("soak")
    def soak_command(
        json_only: bool = typer.Option(False, "--json", help="Only the JSON result on stdout."),
        duration: float = typer.Option(600.0, "--duration", help="Seconds of traffic per service (at least 5)."),
        services: list[str] = typer.Option([], "--services", help="exporter, reviews, recommender (repeatable, or "
                                           "comma-separated); default all three, one after another."),
        normal_rps: float = typer.Option(5.0, "--normal-rps", help="Normal requests a second, between the "
                                         "service's clients."),
        slowloris: int = typer.Option(40, "--slowloris", help="Connections trickling a request head (0: none)."),
        trickled: int = typer.Option(10, "--trickled", help="Writes without a token trickling a body (0: none)."),
        flood_every: float = typer.Option(60.0, "--flood-every", help="Seconds between floods of idle "
                                          "connections (0: none)."),
        flood_past_cap: int = typer.Option(200, "--flood-past-cap", help="Connections a flood opens past the "
                                           "service's connection cap."),
        oversized_every: float = typer.Option(3.0, "--oversized-every", help="Seconds between bodies past the "
                                              "cap (0: none)."),
        bad_token_every: float = typer.Option(1.0, "--bad-token-every", help="Seconds between writes with a bad "
                                              "token (0: none)."),
        probe_every: float = typer.Option(0.5, "--probe-every", help="Seconds between /healthz probes."),
        sample_every: float = typer.Option(2.0, "--sample-every", help="Seconds between RSS and open-file "
                                           "readings."),
        warmup: float = typer.Option(0.2, "--warmup", help="Share of each run that is warm-up, not judged for "
                                     "flatness."),
        workdir: Path | None = typer.Option(None, "--workdir", help="Keep the services' logs and database here."),
        seed: int = typer.Option(0, "--seed", min=0, help="Seed of the normal clients' phases."),
        record: bool = typer.Option(True, "--record/--no-record", help="Write docs/benchmarks/soak.md and soak.png."),
    ) -> None:
        """Each service for --duration under normal and hostile traffic: RSS, open files, /healthz, share served."""
        from tidescale.benches.soak.run import Options, run_command

        names = tuple(n.strip() for item in services for n in item.split(",") if n.strip())
        opts = Options(duration_s=duration, services=names or Options().services, normal_rps=normal_rps,
                       slowloris=slowloris, trickled=trickled, flood_every_s=flood_every,
                       flood_past_cap=flood_past_cap, oversized_every_s=oversized_every,
                       bad_token_every_s=bad_token_every, probe_every_s=probe_every, sample_every_s=sample_every,
                       warmup_share=warmup, workdir=workdir, seed=seed)
        run_command(opts, json_only=json_only, record=record)


for _register in (_register_sim_benches, _register_latency_benches, _register_overhead_bench,
                  _register_profile_poll_benches, _register_autoscale_bench, _register_soak_bench):
    _register(app)
