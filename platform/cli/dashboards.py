"""`evalctl dashboards`: search templates in OpenSearch and saved objects for OpenSearch Dashboards."""

from __future__ import annotations

from pathlib import Path

import click

from evalctl.dashboards.objects import import_objects, index_properties, missing_fields, saved_objects, to_ndjson
from evalctl.dashboards.search_templates import install_templates
from evalctl.dashboards.settings import load_dashboards_settings
from evalctl.errors import UserError
from evalctl.opensearch.connection import make_client
from evalctl.output_folder import check_file, write_into


def _objects_ndjson(client) -> tuple[str, int]:
    indexes = index_properties(client)
    if not indexes:
        raise UserError("there are no evalctl indexes to make Dashboards objects for; run `evalctl index` first")
    for index, fields in missing_fields(indexes).items():
        click.echo(f"note: index {index} has no field {', '.join(fields)} (made before evalctl indexed it): its "
                   f"chart(s) on it are left out; to get them, delete the index (evalctl index delete {index}) "
                   "and index it again", err=True)
    objects = saved_objects(indexes)
    return to_ndjson(objects), len(indexes)


@click.group()
def dashboards() -> None:
    """Ad-hoc search: search templates (BM25, k-NN, hybrid) and OpenSearch Dashboards saved objects."""


@dashboards.command()
@click.option("--url", default=None,
              help="OpenSearch Dashboards URL (default: EVALCTL_DASHBOARDS_URL, else `dashboards: url` in the config "
                   "file, else http://127.0.0.1:5601, as docker-compose publishes it). Credentials are sent only when "
                   "given: EVALCTL_DASHBOARDS_USER / EVALCTL_DASHBOARDS_PASSWORD, the config file's dashboards: "
                   "username / password, or user:password@ in the URL.")
@click.option("--templates-only", is_flag=True, help="Store the search templates; import no saved objects.")
def install(url, templates_only) -> None:
    """Store the search templates, then import index patterns, saved searches and visualisations."""
    target = None if templates_only else load_dashboards_settings(url)  # a bad URL is refused before any write
    client = make_client()
    click.echo("search templates: " + ", ".join(install_templates(client)))
    if target is None:
        return
    ndjson, n_indexes = _objects_ndjson(client)
    n = import_objects(ndjson, target.url, auth=target.auth)
    click.echo(f"imported {n} saved objects for {n_indexes} index(es) into {target.describe()}")


@dashboards.command()
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="NDJSON file to write (import it in Dashboards: Management > Saved objects > Import).")
def export(out) -> None:
    """Write the saved objects for the existing evalctl indexes as NDJSON (no Dashboards server needed)."""
    check_file(out)
    ndjson, n_indexes = _objects_ndjson(make_client())
    write_into(out.parent, out.name, ndjson)  # atomic: a full disk leaves no half file, and is one message naming --out
    click.echo(f"wrote {ndjson.count(chr(10))} saved objects for {n_indexes} index(es) to {out}")
