"""`launch report RUN_DIR | LOG...`: plots (loss, throughput, learning rate) and a short summary.

Works on a run directory made by `launch` (its logs/attempt-*.log, or metrics.jsonl when the logs are gone)
and on plain log files, e.g. a Slurm job's `slurm-<id>.out`; several files are read as consecutive attempts.
Plots are drawn with matplotlib's Agg canvas (no display, no global pyplot state).
"""

from __future__ import annotations

import importlib.util
import io
import json
import logging
import math
import sys
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher import install_command, nofollow, untrusted
from launcher.errors import Problem, UserError
from launcher.runs import cluster_job, entries, k8s_log, slurm_accounting, slurm_log, tail_log, triage, verdict
from launcher.runs import logparse as lp
from launcher.runs.atomic import write_text_atomic
from launcher.runs.monitor import METRICS_FILE, SUMMARY_FILE, attempt_number
from launcher.runs.rundir import open_run_dir
from launcher.runs.verdict import LineCounts, RunLog, RunSummary, Thinned

PLOTS_DIR = "plots"
SLURM_SCRIPT = cluster_job.SLURM_SCRIPT  # launcher.backends.slurm.SCRIPT_NAME (not imported: it pulls in jinja2)
MAX_LOG_BYTES = 1 << 30  # 1 GiB: months of log_interval=1 lines; anything larger is not a training log


@dataclass
class Series:
    """What the plots need, per logged iteration."""

    iterations: list[int]
    loss: list[float | None]
    lr: list[float | None]
    tokens_per_s: list[float | None]
    tflops: list[float | None]
    warmup: list[bool]
    validation: list[tuple[int, float]]
    attempts: list[int]  # which process start logged each line; a change marks a restart
    restarts: list[int]  # the first iteration of every attempt after the first (a resumed or requeued run)


@dataclass(frozen=True)
class PlotInfo:
    """What the plot titles and reference lines say about the run."""

    name: str  # the run directory's or the log's name
    preset: str | None = None
    gpu: str | None = None  # a catalogue GPU name (launch plan --gpu), for the peak TFLOP/s line

    @property
    def title(self) -> str:
        return f"{self.name} (preset {self.preset})" if self.preset and self.preset not in self.name else self.name


@dataclass
class Report:
    summary: RunSummary
    plots: list[Path]
    sources: list[Path]
    attempts: list[str] = field(default_factory=list)  # a Slurm job's attempts and how each ended
    job_states: str | None = None  # a Slurm job's: where the attempts' states come from (sacct, or the log only)
    failures: list[dict] = field(default_factory=list)  # each attempt's end classified (runs/triage.py), in order
    skipped: list[str] = field(default_factory=list)  # each log over the bound, read from its tail: what was skipped


# ---------------------------------------------------------------------------------------------- reading


class LogLines:
    """A log's lines as they are needed, from a regular file (a FIFO or a device is refused, never waited on), each
    at most 1 MiB; of a log over MAX_LOG_BYTES, its last MAX_LOG_BYTES (runs/tail_log.py, as the requeue policy
    reads it: a run's end is at the end of its log), with a note in `skipped` saying so. A Slurm job's log
    (`slurm_job`) has its tail opened by the attempt line the cut runs through."""

    def __init__(self, path: Path, skipped: list[str] | None = None, slurm_job: str | None = None) -> None:
        self.path, self.skipped, self.slurm_job = path, skipped, slurm_job
        self.empty, self.ended_with_newline = True, True

    def __iter__(self) -> Iterator[str]:
        with untrusted.open_binary(self.path, "log") as handle:
            lines = tail_log.TailLines(handle, MAX_LOG_BYTES, self.slurm_job)
            try:
                yield from lines
            finally:
                self.empty, self.ended_with_newline = lines.empty, lines.ended_with_newline
                if lines.skipped and self.skipped is not None:
                    self.skipped.append(f"{self.path}: its first {lines.skipped:,} bytes skipped (over the "
                                        f"{MAX_LOG_BYTES:,}-byte bound); read from its last {MAX_LOG_BYTES:,}")


def _split_lines(path: Path, skipped: list[str] | None = None, slurm_job: str | None = None) -> Iterator[str]:
    """A log's lines as str.splitlines() splits its text (a carriage return ends one too), read as LogLines
    reads them."""
    for line in LogLines(path, skipped, slurm_job):
        yield from line.splitlines() or [""]


def runlog_from_logs(paths: Sequence[Path], seq_length: int | None = None,
                     allow_partial: bool = False, skipped: list[str] | None = None) -> RunLog:
    runlog = RunLog(seq_length=seq_length)
    damage: list[Problem] = []
    for number, path in enumerate(paths, 1):
        # streamed from a regular file, at most its last MAX_LOG_BYTES: /dev/zero or a FIFO given as a log is refused
        lines = LogLines(path, skipped)
        runlog.counts = LineCounts()
        runlog.feed_attempt(lines)
        new = runlog.counts
        cut, first_cut = new.cut, new.first_cut
        truncated = not lines.empty and not lines.ended_with_newline
        if number < len(paths) and new.last is not None and cut == 1 and not new.last.complete:
            cut = 0  # an attempt killed mid-line and then resumed: expected, not damage
            truncated = False
        if truncated and new.last is not None:
            damage.append(Problem(
                f"log {path} is truncated: its last line stops mid-way, after iteration {new.last.iteration}",
                "the writer was killed (or is still writing); use --partial to report what is there"))
        elif cut:
            damage.append(Problem(
                f"log {path} has {cut} garbled iteration line(s), first at iteration {first_cut}",
                "use --partial to report the readable lines"))
    if not runlog.line_count:
        names = ", ".join(str(p) for p in paths)
        if (said := runlog.nothing_left()) is not None:  # Megatron loaded a checkpoint at the end and exited 0
            raise UserError(Problem(f"no Megatron iteration lines in {names}: {said}",
                                    "raise train_iters (or train_samples) past the checkpoint's iteration to train"))
        raise UserError(Problem(
            f"no Megatron iteration lines in {names}",
            "the file is not a Megatron training log, is garbled, or training never reached iteration 1; "
            "look at its last lines for the error"))
    if damage and not allow_partial:
        raise UserError(damage)
    return runlog


def _metric_records(path: Path) -> Iterator[dict]:
    """The iteration records of a metrics.jsonl, read as they are needed."""
    for number, line in enumerate(untrusted.Lines(path, "metrics file", MAX_LOG_BYTES), 1):
        if not line.strip():
            continue
        try:
            record = untrusted.loads_json(line, "metrics line")
        except UserError:
            raise UserError(Problem(f"{path} line {number} is not JSON (garbled or truncated)",
                                    "report from the logs instead: launch report LOG_FILE")) from None
        if isinstance(record, dict) and record.get("kind") == "iteration" and _is_count(record.get("iteration")):
            # A damaged file may hold text where numbers belong: what is not a number is not plotted.
            yield {**record, **{key: record[key] if _is_number(record.get(key)) else None
                                for key in ("loss", "lr", "tokens_per_s", "tflops_per_gpu")}}


def _no_metrics(path: Path) -> UserError:
    return UserError(Problem(f"{path} holds no iteration metrics",
                             "the run logged no iteration yet; look at its logs/ for the reason"))


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def series_from_runlog(runlog: RunLog) -> Series:
    """The plotted series: all lines of a log of up to verdict.PLOT_POINTS of them, an even sample (and the last
    line) of a longer one; every restart's first iteration (up to verdict.PLOT_RESTARTS of them)."""
    seq = runlog.seq_length
    points = runlog.points.items()
    return Series(
        iterations=[p.iteration for p in points],
        loss=[p.loss for p in points],
        lr=[p.lr for p in points],
        tokens_per_s=[verdict.tokens_per_s(p.global_batch_size, seq, p.ms_per_iter) for p in points],
        tflops=[p.tflops_per_gpu for p in points],
        warmup=[p.warmup for p in points],
        validation=runlog.validation_curve.items(),
        attempts=[p.attempt for p in points],
        restarts=runlog.restarts.items(),
    )


def series_from_metrics(path: Path) -> Series:
    """The plotted series of a metrics.jsonl (a run directory whose logs are gone), its records read as they come
    and thinned as the lines of a log are (verdict.Thinned): a metrics file of millions of records is not kept."""
    points: Thinned[tuple[int, float | None, float | None, float | None, float | None, bool, int]] = \
        Thinned(verdict.PLOT_POINTS)
    restarts: Thinned[int] = Thinned(verdict.PLOT_RESTARTS)
    previous: int | None = None
    failure: Exception | None = None  # a damaged attempt number: raised once the whole file is read
    for r in _metric_records(path):
        try:
            attempt = int(r.get("attempt") or 1)
        except (TypeError, ValueError, OverflowError) as error:
            failure, attempt = failure or error, 0
        if previous is not None and attempt != previous:
            restarts.add(r["iteration"])
        previous = attempt
        points.add((r["iteration"], r.get("loss"), r.get("lr"), r.get("tokens_per_s"), r.get("tflops_per_gpu"),
                    bool(r.get("warmup")), attempt))
    if not points.seen:
        raise _no_metrics(path)
    if failure is not None:
        raise failure
    kept = points.items()
    return Series(
        iterations=[p[0] for p in kept], loss=[p[1] for p in kept], lr=[p[2] for p in kept],
        tokens_per_s=[p[3] for p in kept], tflops=[p[4] for p in kept], warmup=[p[5] for p in kept],
        validation=[], attempts=[p[6] for p in kept], restarts=restarts.items(),
    )


# ---------------------------------------------------------------------------------------------- plots


def _figure(title: str, ylabel: str):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise UserError(Problem("launch report draws its plots with matplotlib, which is not installed "
                                "(it is an optional extra: the rest of the launcher does not need it)",
                                install_command("report"))) from None

    figure = Figure(figsize=(7, 4), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.set_title(title)
    axes.set_xlabel("iteration")
    axes.set_ylabel(ylabel)
    axes.grid(True, alpha=0.3)
    return figure, axes


def _points(xs: list[int], ys: list[float | None], keep: list[bool] | None = None) -> tuple[list, list]:
    pairs = [(x, y) for i, (x, y) in enumerate(zip(xs, ys, strict=True))
             if y is not None and not math.isnan(y) and (keep is None or keep[i])]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _plot_attempts(axes, series: Series, values: list[float | None], keep: list[bool] | None = None,
                   **style) -> list[float]:
    """One line per attempt (a resumed run repeats iterations since its checkpoint); the values drawn."""
    by_attempt: dict[int, tuple[list[int], list[float]]] = {}
    for i, (attempt, x, y) in enumerate(zip(series.attempts, series.iterations, values, strict=True)):
        kept_x, kept_y = by_attempt.setdefault(attempt, ([], []))
        if y is not None and not math.isnan(y) and (keep is None or keep[i]):
            kept_x.append(x)
            kept_y.append(y)
    drawn: list[float] = []
    label = style.pop("label", None)
    for xs, ys in by_attempt.values():
        if ys:
            axes.plot(xs, ys, marker=".", label=label if not drawn else None, **style)
            drawn += ys
    return drawn


def _mark_restarts(axes, restarts: list[int]) -> None:
    for number, iteration in enumerate(restarts):
        axes.axvline(iteration, color="tab:gray", linestyle=":", linewidth=1,
                     label="restart (resumed)" if number == 0 else None)


def plots_unavailable() -> str:
    """Why no plots can be drawn here ("" when they can): matplotlib is the optional [report] extra."""
    if importlib.util.find_spec("matplotlib") is not None:
        return ""
    return f"plots need matplotlib, the [report] extra: {install_command('report')}"


def write_plots(series: Series, out_dir: Path, info: PlotInfo | str) -> list[Path]:
    """The PNG plots; none without matplotlib (the summary does not need it). matplotlib's own warnings (an empty
    legend, a font cache being built) say nothing about the run and stay out of the report."""
    if plots_unavailable():
        return []
    info = PlotInfo(info) if isinstance(info, str) else info
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.getLogger("matplotlib").setLevel(logging.ERROR)
            return _draw_plots(series, out_dir, info)
    except OSError as error:
        raise UserError(Problem(f"cannot write the plots into {out_dir}: {error.strerror or error}",
                                "give --output-dir a directory you can write")) from None


def _draw_plots(series: Series, out_dir: Path, info: PlotInfo) -> list[Path]:
    title = info.title
    nofollow.real_dir(out_dir, "plot directory")  # a symlinked plots/ or --output-dir is refused
    written: list[Path] = []
    restarts = series.restarts

    figure, axes = _figure(f"{title}: loss", "lm loss")
    _plot_attempts(axes, series, series.loss, color="tab:blue", label="training")
    if series.validation:
        axes.plot([v[0] for v in series.validation], [v[1] for v in series.validation], "s", label="validation")
    _mark_restarts(axes, restarts)
    axes.legend()
    written.append(out_dir / "loss.png")
    _save(figure, written[-1])

    written.append(_throughput_plot(series, out_dir, info, restarts))

    figure, axes = _figure(f"{title}: learning rate", "learning rate")
    _plot_attempts(axes, series, series.lr, color="tab:blue")
    axes.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    _mark_restarts(axes, restarts)
    if restarts:
        axes.legend()
    written.append(out_dir / "lr.png")
    _save(figure, written[-1])
    return written


def _save(figure: Any, path: Path) -> None:
    """A PNG written whole, never through a symbolic link planted at its name (launcher.nofollow)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    nofollow.write_atomic(path, buffer.getvalue(), what="plot")


def _throughput_plot(series: Series, out_dir: Path, info: PlotInfo, restarts: list[int]) -> Path:
    """Tokens/s above, TFLOP/s per GPU below against the GPU's peak (and MFU), each on its own axis from zero:
    two quantities on proportional twin axes would draw one line on top of the other."""
    figure, axes = _figure(f"{info.title}: throughput (start-up lines left out)", "tokens/s")
    steady = [not w for w in series.warmup]
    if _points(series.iterations, series.tflops, steady)[1]:
        axes.remove()
        tokens_axes, flops_axes = figure.subplots(2, 1, sharex=True)
        tokens_axes.set_title(f"{info.title}: throughput (start-up lines left out)")
    else:
        tokens_axes, flops_axes = axes, None
    _plot_attempts(tokens_axes, series, series.tokens_per_s, steady, color="tab:blue", label="tokens/s")
    tokens_axes.set_ylabel("tokens/s")
    tokens_axes.set_ylim(bottom=0)  # from zero, so run-to-run noise does not look like a trend
    tokens_axes.grid(True, alpha=0.3)
    _mark_restarts(tokens_axes, restarts)
    tokens_axes.legend(loc="lower right")
    if flops_axes is not None:
        y2 = _plot_attempts(flops_axes, series, series.tflops, steady, color="tab:orange", label="TFLOP/s per GPU")
        flops_axes.set_ylabel("TFLOP/s per GPU")
        flops_axes.set_xlabel("iteration")
        flops_axes.grid(True, alpha=0.3)
        peak = _gpu_peak(info.gpu)
        if peak:
            mean = sum(y2) / len(y2)
            flops_axes.axhline(peak, color="tab:red", linestyle="--",
                               label=f"{info.gpu} dense bf16 peak {peak:g} (MFU {100 * mean / peak:.0f} %)")
        flops_axes.set_ylim(bottom=0)
        _mark_restarts(flops_axes, restarts)
        flops_axes.legend(loc="lower right")
    else:
        tokens_axes.set_xlabel("iteration")
    path = out_dir / "throughput.png"
    _save(figure, path)
    return path


def _gpu_peak(gpu: str | None) -> float | None:
    from launcher.gpus import GPUS

    return GPUS[gpu].peak_tflops if gpu in GPUS else None


# ---------------------------------------------------------------------------------------------- entry


def run_logs(run_dir: Path) -> list[Path]:
    """A run directory's logs of a run here, logs/attempt-N.log, in order (a Slurm job's: slurm_log); a JobSet's,
    one per attempt from its pods' logs (k8s_log)."""
    return (sorted(entries.listed(run_dir / "logs", "*.log", "attempt logs"), key=attempt_number)
            or k8s_log.attempt_logs(run_dir))


def _never_started(run_dir: Path) -> UserError:
    cluster = cluster_job.state_before_summary(run_dir)
    if cluster is not None and cluster_job.kind_of(run_dir) == "Slurm":  # a job writes slurm-<id>.out at start
        state = cluster[0]
        return UserError(Problem(
            f"{run_dir} holds a Slurm batch script ({state}) that has not run: no slurm-*.out and no {METRICS_FILE}",
            f"submit it with: sbatch {run_dir / SLURM_SCRIPT} (if it is queued already, squeue --me shows it)"
            if state == "written" else "it is queued: squeue --me shows it; its log appears when it starts"))
    if cluster is not None:  # written by `launch --k8s`; its pods write logs/k8s/ when they start
        return UserError(Problem(
            f"{run_dir} holds a Kubernetes JobSet ({cluster[0]}) whose pods have written no log yet (logs/k8s/)",
            f"apply it with: kubectl apply --server-side -f {run_dir / 'jobset.yaml'}; if it is applied, "
            "kubectl get jobsets -A -l app.kubernetes.io/managed-by=megatron-launch shows it"))
    return UserError(Problem(f"{run_dir} has neither logs nor {METRICS_FILE}: the run never started",
                             f"start it with: launch --resume {run_dir}"))


def summarize(targets: Sequence[Path] | Path, allow_partial: bool = True) -> RunSummary:
    """The end-of-run summary of a run directory or of log files, without drawing plots.

    Partial logs are accepted by default here: a backend (e.g. Slurm) summarising a job that was killed
    mid-line still wants the verdict.
    """
    targets = [Path(targets)] if isinstance(targets, (str, Path)) else [Path(t) for t in targets]
    if len(targets) == 1 and targets[0].is_dir():
        run = open_run_dir(targets[0])
        logs = run_logs(run.path)
        if not logs:
            raise _never_started(run.path)
        seq = (run.preset.get("megatron") or {}).get("seq_length")
        runlog = runlog_from_logs(logs, seq if isinstance(seq, int) else None, allow_partial)
        return runlog.summary(checkpoint_dir=Path(run.checkpoint_dir))
    runlog = runlog_from_logs(targets, allow_partial=allow_partial)
    save = lp.argument_value(runlog.arguments.get("save", "None"))
    return runlog.summary(checkpoint_dir=Path(save) if isinstance(save, str) else None)


def default_output_dir(targets: Sequence[Path]) -> Path:
    """RUN_DIR/plots for a run directory; plots/<first log's name> in the current directory for log files
    (a log's own folder may be read-only or shared)."""
    first = Path(targets[0])
    if len(targets) == 1 and first.is_dir():
        return first / PLOTS_DIR
    return Path(PLOTS_DIR) / first.stem


def make_report(targets: Sequence[Path], output_dir: Path | None = None, allow_partial: bool = False) -> Report:
    """Report on one run directory, or on one or more log files (read in the given order)."""
    if not targets:
        raise UserError(Problem("nothing to report on", "give a run directory or log files"))
    targets = [Path(t) for t in targets]
    first = targets[0]
    out = output_dir or default_output_dir(targets)
    if len(targets) == 1 and first.is_dir():
        return _report_run_dir(first, out, allow_partial)
    for target in targets:
        if target.is_dir():
            raise UserError(Problem(f"{target} is a directory; give one run directory, or log files only"))
        if not target.exists():
            raise UserError(Problem(f"{target} does not exist", "give a run directory or log files"))
    skipped: list[str] = []
    runlog = runlog_from_logs(targets, allow_partial=allow_partial, skipped=skipped)
    save = lp.argument_value(runlog.arguments.get("save", "None"))
    summary = runlog.summary(checkpoint_dir=Path(save) if isinstance(save, str) else None)
    plots = write_plots(series_from_runlog(runlog), out, PlotInfo(first.stem))
    return Report(summary, plots, targets, skipped=skipped)


def _report_run_dir(run_dir: Path, out: Path, allow_partial: bool) -> Report:
    run = open_run_dir(run_dir)  # UserError when it is not one
    seq = (run.preset.get("megatron") or {}).get("seq_length")
    logs = run_logs(run_dir)
    checkpoint_dir = Path(run.checkpoint_dir)
    slurm_logs = [] if logs else slurm_log.job_logs(run_dir)
    skipped: list[str] = []
    if slurm_logs:  # a Slurm job: one log per job, holding every attempt (requeues append to it)
        runlog = RunLog(seq_length=seq if isinstance(seq, int) else None)
        parser = lp.LogParser()
        readers: list[triage.AttemptReader] = []  # each attempt's facts for its failure class

        def start(_: slurm_log.SlurmAttempt) -> None:  # as RunLog.feed_attempt does for each attempt's lines
            nonlocal parser
            runlog.start_attempt()
            parser = lp.LogParser()
            readers.append(triage.AttemptReader())

        def take(line: str) -> None:
            if (event := parser.feed(line)) is not None:
                runlog.feed(event)
            readers[-1].feed(line)

        attempts = [attempt for path in slurm_logs
                    for attempt in slurm_log.read_attempts(_split_lines(path, skipped, _job_of(path)), start, take)]
        # each attempt's standard error (tracebacks, torchrun's root cause, srun's errors) for its failure class
        by_attempt = {(attempt.job, attempt.number): reader for attempt, reader in zip(attempts, readers, strict=True)}

        def take_stderr(job: str, number: int, line: str) -> None:
            if (reader := by_attempt.get((job, number))) is not None:
                reader.feed(line)

        for path in slurm_logs:
            if (err := slurm_log.stderr_log(path)).is_file():
                slurm_log.stderr_lines(_split_lines(err, skipped, _job_of(path)), take_stderr)
        summary = runlog.summary(checkpoint_dir=checkpoint_dir)
        accounting = slurm_accounting.job_accounting(list(dict.fromkeys(attempt.job for attempt in attempts)))
        ends = [_triage(attempt, reader, accounting) for attempt, reader in zip(attempts, readers, strict=True)]
        if ends and not summary.ok:
            summary.failure = ends[-1].as_dict()
        plots = write_plots(series_from_runlog(runlog), out, _plot_info(run))
        _write_summary(run_dir, summary)
        return Report(summary, plots, slurm_logs,
                      [_with_record(attempt, accounting) for attempt in attempts],
                      accounting.describe(), failures=[end.as_dict() for end in ends], skipped=skipped)
    if logs:
        runlog = runlog_from_logs(logs, seq_length=seq if isinstance(seq, int) else None,
                                  allow_partial=allow_partial, skipped=skipped)
        summary = runlog.summary(checkpoint_dir=checkpoint_dir)
        series = series_from_runlog(runlog)
    elif (run_dir / METRICS_FILE).exists():
        series = series_from_metrics(run_dir / METRICS_FILE)
        summary = _summary_from_file(run_dir)
    else:
        raise _never_started(run_dir)
    failures = [triage.triage_lines(_split_lines(log)).as_dict() for log in logs]  # read as the logs above
    if failures and not summary.ok and summary.failure is None:
        summary.failure = failures[-1]
    plots = write_plots(series, out, _plot_info(run))
    _write_summary(run_dir, summary)
    return Report(summary, plots, logs or [run_dir / METRICS_FILE], failures=failures, skipped=skipped)


def _job_of(path: Path) -> str:
    """The job id in a Slurm log's name (slurm-JOB.out), for the attempt line that opens a cut log's tail."""
    digits = path.stem.removeprefix("slurm-")
    return digits if digits.isascii() and digits.isdigit() and len(digits) <= 18 else "0"


def _triage(attempt: slurm_log.SlurmAttempt, reader: triage.AttemptReader,
            accounting: slurm_accounting.Accounting) -> triage.Triage:
    record = accounting.attempt(attempt.job, attempt.number)
    return reader.verdict(triage.exit_status(record.exit_code) if record else None, record.state if record else None)


def _with_record(attempt: slurm_log.SlurmAttempt, accounting: slurm_accounting.Accounting) -> str:
    record = accounting.attempt(attempt.job, attempt.number)
    return attempt.describe() + (f" ({record.describe()})" if record else "")


def _plot_info(run) -> PlotInfo:
    settings = run.preset.get("launcher") or {}
    return PlotInfo(run.path.name, run.manifest.get("preset") or run.preset.get("name"),
                    settings.get("gpu") if isinstance(settings, dict) else None)


def _write_summary(run_dir: Path, summary: RunSummary) -> None:
    try:
        write_text_atomic(run_dir / SUMMARY_FILE, json.dumps(summary.to_dict(), indent=2, allow_nan=False) + "\n")
    except OSError as error:  # a read-only run directory: the report is still printed
        print(f"warning: cannot write {run_dir / SUMMARY_FILE}: {error.strerror or error}", file=sys.stderr)


def _summary_from_file(run_dir: Path) -> RunSummary:
    try:
        summary = RunSummary.from_record(untrusted.read_json(run_dir / SUMMARY_FILE, "run summary"))
    except UserError:
        summary = None
    if summary is None:
        raise UserError(Problem(f"{run_dir} has no logs and no readable {SUMMARY_FILE}",
                                "nothing to summarise; the plots need the logs"))
    return summary
