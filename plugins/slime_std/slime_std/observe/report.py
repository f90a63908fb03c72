"""``core report RUN_DIR``: PNG plots from ``metrics.jsonl`` and a one-page ``report.html``.

Panels (a panel whose metrics are all absent is skipped): reward and accuracy (training
rollouts as lines, evaluations as points), one per eval dataset (``eval/<name>/accuracy``,
``pass@k``, truncation rate), KL, clip fraction, entropy, loss, response length,
tokens/s, time per phase (stacked per step). The HTML embeds the PNGs (one self-contained
file), a summary table, the phase breakdown of ``trace.json`` when present (with the
engine's phases under ``profile.rollout``), the resolved ``config.toml`` and the plugin set of
``plugins.json``. Plots use matplotlib's Agg canvas (no display, no pyplot global state).
"""

from __future__ import annotations

import base64
import html
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slime_core.api import require


@dataclass
class Panel:
    """One PNG: ``lines`` are drawn over training steps, ``points`` marked (evaluations)."""

    name: str
    title: str
    ylabel: str
    lines: list[str] = field(default_factory=list)
    points: list[str] = field(default_factory=list)
    band: tuple[str, str] | None = None  # (mean key, std key) shaded mean +- std
    stacked: list[str] = field(default_factory=list)  # stacked bars instead of lines
    match: str = ""  # also draw every train/* key containing this text


PANELS = (
    Panel("reward", "Reward", "reward", lines=["rollout/reward_mean"], points=["eval/reward_mean"],
          band=("rollout/reward_mean", "rollout/reward_std")),
    Panel("accuracy", "Accuracy", "fraction correct", lines=["rollout/accuracy"],
          points=["eval/accuracy"]),
    Panel("kl", "KL", "KL", lines=["train/kl_loss", "train/ppo_kl", "train/kl"], match="kl"),
    Panel("clip_fraction", "Clip fraction", "fraction of tokens",
          lines=["train/pg_clipfrac", "train/pg_clipfrac_high", "train/pg_clipfrac_low"],
          match="clipfrac"),
    Panel("entropy", "Entropy", "nats / token", lines=["train/entropy"]),
    Panel("loss", "Loss", "loss", lines=["train/loss", "train/pg_loss", "train/value_loss"]),
    Panel("response_length", "Response length", "tokens",
          lines=["rollout/response_length_mean", "rollout/response_length_max"],
          points=["eval/response_length_mean"]),
    Panel("throughput", "Throughput", "tokens / s",
          lines=["perf/rollout_tokens_per_s", "perf/train_tokens_per_s"]),
    Panel("phase_time", "Time per phase", "seconds",
          stacked=["perf/rollout_time", "perf/train_time", "perf/weight_sync_time",
                   "perf/rollout_drain_time", "perf/save_time", "perf/eval_time"]),
)


def eval_dataset_panels(keys: set[str]) -> list[Panel]:
    """One panel per eval dataset (``eval/<name>/accuracy``): accuracy, every pass@k and the
    truncation rate; its response length goes to the response-length panel."""
    names = sorted({k.split("/")[1] for k in keys
                    if k.startswith("eval/") and k.count("/") == 2 and k.endswith("/accuracy")})
    panels = []
    for name in names:
        pre = f"eval/{name}/"
        pass_keys = sorted((k for k in keys if k.startswith(pre + "pass@")),
                           key=lambda k: int(k.rsplit("@", 1)[1]) if k.rsplit("@", 1)[1].isdigit() else 0)
        panels.append(Panel(f"eval_{name}", f"Eval: {name}", "fraction",
                            points=[pre + "accuracy", *pass_keys, pre + "truncated_ratio"]))
    return panels


def _with_dataset_lengths(panel: Panel, keys: set[str]) -> Panel:
    if panel.name != "response_length":
        return panel
    extra = sorted(k for k in keys if k.startswith("eval/") and k.count("/") == 2
                   and k.endswith("/response_length_mean"))
    return Panel(panel.name, panel.title, panel.ylabel, lines=list(panel.lines),
                 points=list(panel.points) + extra)


class ReportError(ValueError):
    """The run directory lacks what a report needs."""


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise ReportError(f"{run_dir} has no metrics.jsonl (is 'jsonl' in run.loggers? is this a "
                          "run directory?)")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ReportError(f"{path}:{n}: not JSON ({exc})") from exc
    return rows


def series(rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    xs: list[int] = []
    ys: list[float] = []
    for r in rows:
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            xs.append(int(r.get("step", len(xs))))
            ys.append(float(v))
    return xs, ys


def _panel_keys(panel: Panel, keys: set[str]) -> list[str]:
    wanted = list(panel.lines)
    if panel.match:
        wanted += sorted(k for k in keys if k.startswith("train/") and panel.match in k)
    return [k for k in dict.fromkeys(wanted) if k in keys]


def plot_panel(panel: Panel, rows: list[dict[str, Any]], path: Path) -> bool:
    """Draw ``panel`` into ``path``; False (nothing written) when its metrics are absent."""
    require("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    keys = {k for r in rows for k in r}
    lines = _panel_keys(panel, keys)
    points = [k for k in panel.points if k in keys]
    stacked = [k for k in panel.stacked if k in keys]
    if not (lines or points or stacked):
        return False
    fig = Figure(figsize=(6.4, 3.6), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    if stacked:
        steps = sorted({int(r["step"]) for r in rows if any(k in r for k in stacked)})
        bottom = [0.0] * len(steps)
        for k in stacked:
            by_step = dict(zip(*series(rows, k), strict=True))
            vals = [by_step.get(s, 0.0) for s in steps]
            ax.bar(steps, vals, bottom=bottom, label=k.split("/", 1)[1].removesuffix("_time"))
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    for k in lines:
        xs, ys = series(rows, k)
        if not xs:
            continue
        ax.plot(xs, ys, marker="." if len(xs) < 50 else None, label=k)
        if panel.band and k == panel.band[0]:
            sx, sd = series(rows, panel.band[1])
            std = dict(zip(sx, sd, strict=True))
            lo = [y - std.get(x, 0.0) for x, y in zip(xs, ys, strict=True)]
            hi = [y + std.get(x, 0.0) for x, y in zip(xs, ys, strict=True)]
            ax.fill_between(xs, lo, hi, alpha=0.2, label=f"± {panel.band[1].split('/')[-1]}")
    for k in points:
        xs, ys = series(rows, k)
        if xs:
            ax.plot(xs, ys, linestyle="--", marker="o", markersize=6, label=f"{k} (eval)")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.set_title(panel.title)
    ax.set_xlabel("step")
    ax.set_ylabel(panel.ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, format="png")
    return True


@dataclass
class Report:
    out_dir: Path
    pngs: list[Path]
    html: Path


def write_report(run_dir: str | Path, out_dir: str | Path | None = None) -> Report:
    """Write every panel with data as ``<out_dir>/<panel>.png`` and ``<out_dir>/report.html``
    (``out_dir`` defaults to ``RUN_DIR/report``)."""
    run = Path(run_dir)
    if not run.is_dir():
        raise ReportError(f"run directory {run} does not exist")
    rows = read_metrics(run)
    out = Path(out_dir) if out_dir else run / "report"
    out.mkdir(parents=True, exist_ok=True)
    pngs = []
    keys = {k for r in rows for k in r}
    for panel in [*(_with_dataset_lengths(p, keys) for p in PANELS), *eval_dataset_panels(keys)]:
        path = out / f"{panel.name}.png"
        if plot_panel(panel, rows, path):
            pngs.append(path)
    page = out / "report.html"
    page.write_text(render_html(run, rows, pngs), encoding="utf-8")
    return Report(out, pngs, page)


# -- the HTML page ---------------------------------------------------------------------------


def _last(rows: list[dict[str, Any]], key: str) -> float | None:
    _, ys = series(rows, key)
    return ys[-1] if ys else None


def _summary_rows(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    def fmt(v: float | None, pattern: str = "{:.4g}") -> str:
        return "–" if v is None else pattern.format(v)

    steps = [int(r["step"]) for r in rows if "train/loss" in r or "rollout/reward_mean" in r]
    _, acc = series(rows, "eval/accuracy")
    _, step_t = series(rows, "perf/total_step_time")
    _, r_tps = series(rows, "perf/rollout_tokens_per_s")
    _, t_tps = series(rows, "perf/train_tokens_per_s")
    return [
        ("training steps logged", str(len(steps))),
        ("last step", str(max(steps)) if steps else "–"),
        ("final rollout reward (mean)", fmt(_last(rows, "rollout/reward_mean"))),
        ("final rollout accuracy", fmt(_last(rows, "rollout/accuracy"))),
        ("eval accuracy: first → last (best)",
         f"{acc[0]:.4g} → {acc[-1]:.4g} ({max(acc):.4g})" if acc else "–"),
        *_dataset_summary(rows),
        ("mean step time", fmt(statistics.fmean(step_t) if step_t else None, "{:.3f} s")),
        ("mean rollout tokens/s", fmt(statistics.fmean(r_tps) if r_tps else None, "{:.1f}")),
        ("mean train tokens/s", fmt(statistics.fmean(t_tps) if t_tps else None, "{:.1f}")),
    ]


def _dataset_summary(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out = []
    for panel in eval_dataset_panels({k for r in rows for k in r}):
        for key in panel.points[:-1]:  # accuracy and pass@k, not the truncation rate
            _, ys = series(rows, key)
            if ys:
                out.append((f"{key}: first → last", f"{ys[0]:.4g} → {ys[-1]:.4g}"))
    return out


def _trace_table(run: Path) -> str:
    from slime_std.observe.trace_analysis import TraceFileError, load_trace, summarize

    try:
        summary = summarize(load_trace(run))
    except TraceFileError as exc:
        return f"<p class=muted>{html.escape(str(exc))}</p>"
    body = "".join(
        f"<tr><td style='padding-left:{0.4 + 1.2 * r.depth}em'>{html.escape(r.name)}</td>"
        f"<td>{r.total_s:.3f}</td><td>{100 * summary.share(r.total_s):.1f}%</td>"
        f"<td>{r.count}</td></tr>"
        for r in summary.phases
    )
    engine = ""
    if summary.engine is not None:  # profile.rollout: the engine's phases against their floors
        from slime_std.observe.engine_summary import format_engine

        engine = f"<pre>{html.escape(chr(10).join(format_engine(summary.engine)).strip())}</pre>"
    return (f"<p>wall time {summary.wall_s:.3f} s (from trace.json; <code>core trace "
            f"{html.escape(str(run))}</code> lists the slowest samples)</p>"
            "<table><tr><th>phase</th><th>total s</th><th>share</th><th>count</th></tr>"
            f"{body}</table>{engine}")


def _plugins_table(run: Path) -> str:
    path = run / "plugins.json"
    if not path.is_file():
        return "<p class=muted>no plugins.json</p>"
    try:
        plugins = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        return f"<p class=muted>plugins.json is not JSON: {html.escape(str(exc))}</p>"
    cols = ("name", "distribution", "version", "source")
    head = "".join(f"<th>{c}</th>" for c in cols)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(p.get(c, '')))}</td>" for c in cols) + "</tr>"
        for p in plugins if isinstance(p, dict)
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def render_html(run: Path, rows: list[dict[str, Any]], pngs: list[Path]) -> str:
    esc = html.escape
    summary = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in _summary_rows(rows))
    figures = "".join(
        f"<figure><img alt='{esc(p.stem)}' src='data:image/png;base64,"
        f"{base64.b64encode(p.read_bytes()).decode('ascii')}'><figcaption>{esc(p.name)}"
        "</figcaption></figure>"
        for p in pngs
    ) or "<p class=muted>no metrics to plot</p>"
    cfg = run / "config.toml"
    config_text = cfg.read_text(encoding="utf-8") if cfg.is_file() else "(no config.toml)"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>slime run {esc(run.name)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }}
h1 {{ font-size: 1.4em; }} h2 {{ font-size: 1.1em; margin-top: 1.4em; }}
table {{ border-collapse: collapse; font-size: 0.9em; }}
th, td {{ border: 1px solid #ddd; padding: 0.2em 0.6em; text-align: left; }}
.grid {{ display: grid; grid-template-columns: repeat(auto-fill, minmax(420px, 1fr)); gap: 0.8em; }}
figure {{ margin: 0; }} img {{ width: 100%; border: 1px solid #eee; }}
figcaption, .muted {{ color: #777; font-size: 0.8em; }}
pre {{ background: #f6f6f6; padding: 0.8em; font-size: 0.8em; max-height: 30em; overflow: auto; }}
.cols {{ display: flex; gap: 2em; flex-wrap: wrap; }}
</style></head><body>
<h1>slime run <code>{esc(str(run))}</code></h1>
<div class="cols"><div><h2>Summary</h2><table>{summary}</table></div>
<div><h2>Time per phase</h2>{_trace_table(run)}</div></div>
<h2>Metrics</h2><div class="grid">{figures}</div>
<div class="cols"><div><h2>Plugins</h2>{_plugins_table(run)}</div>
<div style="flex:1"><h2>Config</h2><pre>{esc(config_text)}</pre></div></div>
</body></html>
"""
