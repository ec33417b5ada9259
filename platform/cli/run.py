"""`evalctl run SPEC`: run an experiment spec end to end (resumable)."""

from __future__ import annotations

from pathlib import Path

import click

from evalctl.cli.runtime_options import runtime_options
from evalctl.config_files import SpecError
from evalctl.errors import UserError
from evalctl.indexers.encode_options import DEVICE_HELP
from evalctl.indexers.runtime import Runtime, precision_line, using
from evalctl.results_store import results_root
from evalctl.study.plan.cost_plan import cost_plan, parse_sizes
from evalctl.study.report.write import write_report
from evalctl.study.plan.runner import check_expected, execute, plan
from evalctl.study.plan.loading import load_experiment, missing_sources


@click.command()
@click.argument("spec_name")
@click.option("--dry-run", is_flag=True, help="Print the plan (what is done, what would run) and stop.")
@click.option("--device", default=None, help=DEVICE_HELP)
@click.option("--corpus-size", "corpus_sizes", multiple=True, metavar="NAME=N",
              help="--dry-run's cost plan: records of a corpus not imported yet (repeatable).")
@click.option("--gpu", default=None, help="--dry-run's cost plan: a GPU of configs/cost_plan.yaml (default there).")
@click.option("--utilisation", type=click.FloatRange(0, 1, min_open=True), default=None,
              help="--dry-run's cost plan: model FLOP utilisation assumed (default in configs/cost_plan.yaml).")
@runtime_options
def run(spec_name, dry_run, device, corpus_sizes, gpu, utilisation) -> None:
    """Plan and run every step of SPEC (a name in configs/experiments/ or a YAML path)."""
    try:
        spec = load_experiment(spec_name)
        steps = plan(spec)
    except SpecError as e:
        raise UserError(str(e)) from None
    missing = missing_sources(spec)
    if missing and not dry_run:  # before any step runs: a wrong path is the spec's error, not a failed step
        raise UserError("\n".join(missing))
    click.echo(f"experiment {spec.name}: {len(steps)} steps")
    for line in missing:
        click.echo(f"missing source (the plan below imports nothing until it is there): {line}")
    # every step that encodes: the spec's runtime section beneath the options given here
    with using(Runtime(device=device)), using(spec.runtime, beneath=True) as runtime:
        if spec.models:
            click.echo(precision_line(runtime))
        report = execute(steps, echo=click.echo, dry_run=dry_run)
    if dry_run:
        try:
            costs = cost_plan(spec, steps, parse_sizes(corpus_sizes), gpu=gpu, utilisation=utilisation)
        except SpecError as e:
            raise UserError(str(e)) from None
        click.echo("\n".join(costs.lines()))
        return
    report.checks = check_expected(spec, steps)
    for line in report.checks:
        click.echo(line)
    counts = {s: sum(o.status == s for o in report.outcomes) for s in ("done", "ok", "failed", "skipped")}
    click.echo(f"summary: {counts['ok']} ran, {counts['done']} already done, {counts['failed']} failed, "
               f"{counts['skipped']} skipped")
    for o in report.failed:
        click.echo(f"  {o.status}: {o.key}: {o.detail.splitlines()[0]}")
    if not report.ok:
        raise SystemExit(1)


@click.command()
@click.argument("spec_name")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for report.md, report.html and the PNG plots (default: the results store).")
@click.option("--force", is_flag=True, help="Rewrite the report even when its inputs are unchanged, and write it into "
              "a folder holding files that are not an evalctl report.")
def report(spec_name, out, force) -> None:
    """Write the report of SPEC (Markdown + HTML, PNG plots) from the stored results."""
    try:
        spec = load_experiment(spec_name)
    except SpecError as e:
        raise UserError(str(e)) from None
    md, page, written = write_report(spec, out or results_root() / "reports" / spec.name, force=force)
    click.echo(f"report: {page}\n        {md}" + ("" if written else "\n        (up to date: no stored result changed)"))
