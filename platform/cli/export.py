"""`evalctl export mteb`: stored results written in another tool's result format."""

from __future__ import annotations

from pathlib import Path

import click

from evalctl.config_files import SpecError
from evalctl.errors import UserError
from evalctl.evaluators.referee.mteb_export import (RESULTS, MtebScore, NotExported, collect, listing, stored_entries,
                                                   write_export)
from evalctl.evaluators.scoring.runs import RunNotFound
from evalctl.output_folder import check_folder, claim_folder
from evalctl.study.plan.loading import experiment_path, load_experiment
from evalctl.study.report.mteb_entries import study_entries

KIND = "MTEB export"  # the output folder's mark


@click.group()
def export() -> None:
    """Write stored results in another tool's result format."""


@export.command("mteb")
@click.argument("sources", nargs=-1, required=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder to write results/<org__model>/<revision>/<Task>.json and not_exported.md into: new, empty "
                   "or an earlier MTEB export (an MTEB results cache with --force); mteb.ResultCache(cache_path=OUT) "
                   "loads it.")
@click.option("--force", is_flag=True, help="Write into a folder holding files that are not an evalctl MTEB export "
              "(replacing the files of the same names).")
def mteb(sources, out_dir, force) -> None:
    """Write the retrieval, classification and clustering scores of SOURCES (study specs, as `evalctl report` takes
    them, or stored run or metrics result ids) as MTEB v2 result files, and list what they cannot hold."""
    check_folder(out_dir, KIND, force=force)
    result = collect(entry for source in sources for entry in _entries(source))
    claim_folder(out_dir, KIND)
    written = write_export(out_dir, result)
    for file in result.files:
        scores = ", ".join(f"{split} {s.main_score:.4f}" for split, s in file.splits.items())
        click.echo(f"{file.model.name} @ {file.model.revision}  {file.task}: main score {scores}")
    click.echo(f"wrote {len(result.files)} result files under {out_dir / RESULTS}\n")
    click.echo(listing(result).rstrip())
    click.echo(f"\n(written to {out_dir / written[-1]})")


def _entries(source: str) -> list[MtebScore | NotExported]:
    """A spec's name or path (its study's steps), else a stored run or metrics result's id."""
    try:
        experiment_path(source)
    except SpecError as not_spec:
        try:
            return stored_entries(source)
        except RunNotFound as not_run:
            raise UserError(f"{not_spec}; nor is {source!r} a stored metrics result's id, and {not_run}") from None
    try:
        return study_entries(load_experiment(source))
    except SpecError as e:
        raise UserError(str(e)) from None
