"""`evalctl dashboards`: search templates in OpenSearch and saved objects for OpenSearch Dashboards."""

from __future__ import annotations

from pathlib import Path

import click

from evalctl.errors import UserError

URL_ENV = "EVALCTL_DASHBOARDS_URL"


def _objects_ndjson(client) -> tuple[str, int]:
    from evalctl.dashboards.objects import index_properties, saved_objects, to_ndjson

    indexes = index_properties(client)
    if not indexes:
        raise UserError("there are no evalctl indexes to make Dashboards objects for; run `evalctl index` first")
    objects = saved_objects(indexes)
    return to_ndjson(objects), len(indexes)


@click.group()
def dashboards() -> None:
    """Ad-hoc search: search templates (BM25, k-NN, hybrid) and OpenSearch Dashboards saved objects."""


@dashboards.command()
@click.option("--url", envvar=URL_ENV, show_envvar=True, default=None,
              help="OpenSearch Dashboards URL (default http://127.0.0.1:5601, as docker-compose publishes it).")
@click.option("--templates-only", is_flag=True, help="Store the search templates; import no saved objects.")
def install(url, templates_only) -> None:
    """Store the search templates, then import index patterns, saved searches and visualisations."""
    from evalctl.opensearch.connection import make_client
    from evalctl.dashboards.objects import DEFAULT_URL, DashboardsError, import_objects
    from evalctl.dashboards.search_templates import install_templates

    client = make_client()
    click.echo("search templates: " + ", ".join(install_templates(client)))
    if templates_only:
        return
    ndjson, n_indexes = _objects_ndjson(client)
    try:
        n = import_objects(ndjson, url or DEFAULT_URL)
    except DashboardsError as e:
        raise UserError(str(e)) from None
    click.echo(f"imported {n} saved objects for {n_indexes} index(es) into {url or DEFAULT_URL}")


@dashboards.command()
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="NDJSON file to write (import it in Dashboards: Management > Saved objects > Import).")
def export(out) -> None:
    """Write the saved objects for the existing evalctl indexes as NDJSON (no Dashboards server needed)."""
    from evalctl.opensearch.connection import make_client

    ndjson, n_indexes = _objects_ndjson(make_client())
    out.write_text(ndjson, encoding="utf-8")
    click.echo(f"wrote {ndjson.count(chr(10))} saved objects for {n_indexes} index(es) to {out}")
