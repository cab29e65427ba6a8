"""The k6 load tests' report: latency and throughput tables (Markdown) and the latency plot, made
from k6's summaries and raw points as run.py collects them."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any, Optional

from benchmarks.common.environment import describe_machine
from benchmarks.common.report import fmt, fmt_load, markdown_table

SCENARIO_ORDER = ("short_assisted", "short_not_assisted", "long_assisted", "long_not_assisted")
RAMP_METRIC = "ramp_latency"
LOG_SCALE_SPREAD = 10  # plot latencies on a log axis when scenario medians differ more than this
# k6's documented exit codes that a run here can meet.
K6_EXIT_CODES = {
    99: "thresholds failed",
    100: "setup() timed out (raise SETUP_TIMEOUT)",
    104: "invalid configuration",
    105: "a script error aborted the test",
    107: "a script exception",
    108: "the run was interrupted",
}


def trend_row(summary: dict[str, Any], metric: str) -> Optional[dict[str, float]]:
    """avg/min/med/max/p90/p95 in seconds and the count of one Trend, or None if it has no data."""
    values = summary.get("metrics", {}).get(metric, {}).get("values")
    if not values or not values.get("count"):
        return None
    row = {
        key: values[stat] / 1000
        for key, stat in (
            ("avg", "avg"),
            ("min", "min"),
            ("med", "med"),
            ("max", "max"),
            ("p90", "p(90)"),
            ("p95", "p(95)"),
        )
    }
    row["count"] = values["count"]
    return row


def _rate(summary: dict[str, Any], metric: str) -> Optional[float]:
    return summary.get("metrics", {}).get(metric, {}).get("values", {}).get("rate")


def _count(summary: dict[str, Any], metric: str) -> int:
    return int(summary.get("metrics", {}).get(metric, {}).get("values", {}).get("count", 0))


def completed_per_second(points: list[list[float]]) -> Optional[float]:
    """Requests completed per second between the first request's start and the last one's end
    (points are stamped when a request ends, with its latency in ms)."""
    if not points:
        return None
    first_start = min(end_s - value / 1000 for end_s, value in points)
    span_s = max(end_s for end_s, _ in points) - first_start
    return len(points) / span_s if span_s > 0 else None


def threshold_lines(run: dict[str, Any]) -> list[str]:
    lines = []
    for name, metric in run.get("summary", {}).get("metrics", {}).items():
        for expression, outcome in (metric.get("thresholds") or {}).items():
            lines.append(f"{name} `{expression}`: {'passed' if outcome.get('ok') else '**failed**'}")
    return lines


def render_markdown(result: dict[str, Any]) -> str:
    settings, payloads = result["settings"], result["payloads"]
    target = (
        settings["base_url"]
        if settings["remote"]
        else (
            f"local server (`python -m whosaid serve`), ASR_MODEL={settings['model']}, "
            f"ASSISTANT_MODEL={settings['assistant'] or '–'}, DIARIZATION_MODEL={settings['diarization'] or '–'}"
        )
    )
    where = (
        f"k6 client: {describe_machine(result['machine'])}"
        if settings["remote"]
        else f"on {describe_machine(result['machine'])}; server OMP_WAIT_POLICY {settings['omp_wait_policy']}"
    )
    lines = [
        "# Load test (k6)",
        "",
        f"Measured {result['finished']} against {target}, with {result['k6_version']}, {where}.",
        "",
        "Latency in seconds per request (base64 WAV in JSON, response parsed), after one untimed "
        "warm-up request. RTF = median latency / audio duration. Load average (1/5/15 min) as the "
        "run started; this machine is shared.",
    ]
    transcribe = result["runs"].get("transcribe")
    if transcribe:
        summary = transcribe.get("summary", {})
        scenarios = summary.get("whosaid", {}).get("scenarios", {})
        rows = []
        for name in SCENARIO_ORDER:
            info = scenarios.get(name)
            if info is None:
                continue
            audio_s = payloads[info["clip"]]["duration_s"]
            params = ", ".join(f"{key}={json.dumps(value)}" for key, value in info["parameters"].items())
            stats = trend_row(summary, name)
            if info["status"] != "ran" or stats is None:
                reason = info.get("reason") or "no successful request"
                rows.append([name, f"{audio_s:.0f}", params, 0, *([None] * 6), f"skipped: {reason}"])
                continue
            rows.append(
                [
                    name,
                    f"{audio_s:.0f}",
                    params,
                    stats["count"],
                    *(fmt(stats[key]) for key in ("avg", "min", "med", "max", "p90", "p95")),
                    fmt(stats["med"] / audio_s, 3),
                ]
            )
        lines += [
            "",
            f"## Scenarios: {transcribe['env'].get('VUS', '1')} user(s), {transcribe['env'].get('ITERATIONS')} "
            f"iteration(s) each, load avg {fmt_load(transcribe['load_average_before'])}",
            "",
            markdown_table(
                [
                    "scenario",
                    "audio s",
                    "parameters",
                    "requests",
                    "avg",
                    "min",
                    "med",
                    "max",
                    "p90",
                    "p95",
                    "RTF (med)",
                ],
                rows,
            ),
            "",
            "Thresholds: " + "; ".join(threshold_lines(transcribe) or ["none reported"]) + ".",
        ]
    ramp = result["runs"].get("ramp")
    if ramp:
        summary = ramp.get("summary", {})
        stats = trend_row(summary, RAMP_METRIC)
        failed = _rate(summary, "http_req_failed")
        stages = ", ".join(
            f"{stage['target']} user(s) for {stage['duration']}"
            for stage in summary.get("whosaid", {}).get("stages", [])
        )
        throughput = completed_per_second(ramp.get("points", {}).get(RAMP_METRIC, []))
        lines += [
            "",
            f"## Concurrency ramp: {stages}; load avg {fmt_load(ramp['load_average_before'])}",
            "",
            "Short clip, not assisted. Latency includes the wait for the server's job slot "
            "(one job at a time by default), so it grows with the number of users while "
            "throughput stays flat on a saturated CPU.",
            "",
            markdown_table(
                ["ok requests", "failed", "busy (429)", "ok req/s", "avg", "min", "med", "max", "p90", "p95"],
                [
                    [
                        stats["count"] if stats else 0,
                        fmt(100 * failed, 1) + " %" if failed is not None else None,
                        _count(summary, "busy_refusals"),
                        fmt(throughput, 3),
                        *(
                            (fmt(stats[key]) for key in ("avg", "min", "med", "max", "p90", "p95"))
                            if stats
                            else [None] * 6
                        ),
                    ]
                ],
            ),
            "",
            "Thresholds: " + "; ".join(threshold_lines(ramp) or ["none reported"]) + ".",
        ]
    for name, run in result["runs"].items():
        if run.get("exit_code") not in (0, None):
            meaning = K6_EXIT_CODES.get(run["exit_code"], "see k6's exit codes")
            lines += ["", f"**k6 {name} exited with {run['exit_code']}**: {meaning}."]
        if "error" in run:
            lines += ["", f"**{name} failed**: {run['error']}", "", "```", run.get("output_tail", ""), "```"]
    if result.get("plot"):
        lines += ["", f"![latency per request]({Path(result['plot']).name})"]
    return "\n".join(lines)


def plot_latency(result: dict[str, Any], path: Path) -> Optional[Path]:
    """Left: every request's latency per scenario (dots) with its median (bar). Right: the ramp's
    latencies over time, against the number of active users."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    transcribe = result["runs"].get("transcribe", {})
    ramp = result["runs"].get("ramp", {})
    scenario_points = {
        name: [value / 1000 for _, value in transcribe.get("points", {}).get(name, [])]
        for name in SCENARIO_ORDER
        if transcribe.get("points", {}).get(name)
    }
    ramp_points = ramp.get("points", {}).get(RAMP_METRIC, [])
    panels = [panel for panel in (scenario_points, ramp_points) if panel]
    if not panels:
        return None
    figure, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.6), squeeze=False)
    axes = list(axes[0])
    if scenario_points:
        ax = axes.pop(0)
        payloads = result["payloads"]
        for index, values in enumerate(scenario_points.values()):
            spread = [index + 0.12 * ((k % 5) - 2) / 2 for k in range(len(values))]
            ax.scatter(spread, values, s=28, alpha=0.75, zorder=3)
            median = statistics.median(values)
            ax.hlines(median, index - 0.3, index + 0.3, colors="black", linewidth=2, zorder=4)
            ax.annotate(f"{median:.1f} s", (index + 0.32, median), va="center", fontsize=9)
        clip_of = {name: ("short" if name.startswith("short") else "long") for name in scenario_points}
        ax.set_xticks(range(len(scenario_points)))
        ax.set_xticklabels(
            [
                f"{name.replace('_', ' ')}\n({payloads[clip_of[name]]['duration_s']:.0f} s audio)"
                for name in scenario_points
            ],
            fontsize=9,
        )
        ax.set_xlim(-0.6, len(scenario_points) - 0.2)
        medians = [statistics.median(values) for values in scenario_points.values()]
        if max(medians) > LOG_SCALE_SPREAD * min(medians):
            ax.set_yscale("log")  # short and long clips differ by an order of magnitude or more
        else:
            ax.set_ylim(bottom=0)
        ax.set_ylabel("latency per request (s)")
        ax.set_title("Scenarios, one user (bar: median)")
        ax.grid(axis="y", alpha=0.3)
    if ramp_points:
        ax = axes.pop(0)
        starts = [(t - value / 1000) for t, value in ramp_points]  # points are stamped at the end
        ax.scatter(
            starts,
            [value / 1000 for _, value in ramp_points],
            s=28,
            color="tab:red",
            alpha=0.75,
            zorder=3,
            label="request (at its start)",
        )
        ax.set_xlabel("time since k6 started (s; the first seconds are the warm-up request)")
        ax.set_ylabel("latency (s)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.set_title("Concurrency ramp, short clip")
        vus = ramp.get("points", {}).get("vus", [])
        if vus:
            users = ax.twinx()
            users.step(
                [t for t, _ in vus],
                [v for _, v in vus],
                where="post",
                color="tab:gray",
                alpha=0.8,
                label="active users",
            )
            users.set_ylabel("active users (VUs)")
            users.set_ylim(0, max(v for _, v in vus) + 1)
            users.yaxis.get_major_locator().set_params(integer=True)
            handles = ax.get_legend_handles_labels()[0] + users.get_legend_handles_labels()[0]
            ax.legend(handles, [h.get_label() for h in handles], loc="upper left", fontsize=8)
    figure.suptitle(f"whosaid latency, {result['settings']['target_label']}", fontsize=11)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
