"""`evalctl`: a thin click layer; each command calls one library function."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from evalctl.errors import UserError
from evalctl.specs import SpecError


def main() -> None:
    try:
        cli(standalone_mode=True)
    except SpecError as e:  # config problems raised outside a command's own handling
        click.echo(f"Error: {e}", err=True)
        sys.exit(2)


@click.group()
@click.version_option(package_name="evalctl")
def cli() -> None:
    """Evaluate patent embeddings on OpenSearch: retrieval, classification, clustering."""


# --------------------------------------------------------------------------- opensearch


@cli.group()
def opensearch() -> None:
    """Manage the local OpenSearch node, or inspect the configured cluster."""


@opensearch.command()
@click.option("--heap", default=None, help="JVM heap, e.g. 1g (default from configs/opensearch.yaml).")
@click.option("--port", type=int, default=None, help="HTTP port on 127.0.0.1 (default 9200).")
@click.option("--plugin-zip", "plugin_zips", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A local plugin zip to install (e.g. opensearch-neural-search when Maven does not serve it).")
@click.option("--timeout", type=float, default=180.0, show_default=True, help="Seconds to wait for health.")
def start(heap, port, plugin_zips, timeout) -> None:
    """Provision (once, from Maven Central) and start the local node."""
    from evalctl.node import ManagedNode, NodeError

    try:
        st = ManagedNode(heap=heap, http_port=port, plugin_zips=plugin_zips).start(timeout=timeout, echo=click.echo)
    except NodeError as e:
        raise UserError(str(e)) from None
    click.echo(f"OpenSearch {st.version} is up at {st.url} (pid {st.pid}, started in {st.start_seconds}s)")
    for name, why in st.missing_plugins.items():
        click.echo(f"  without {name}: {why}")


@opensearch.command()
def status() -> None:
    """Version, health and installed plugins of the configured cluster."""
    from evalctl.cluster_info import ClusterUnavailable, cluster_status

    try:
        info = cluster_status()
    except ClusterUnavailable as e:
        raise UserError(str(e)) from None
    click.echo(f"cluster:  {info['where']}")
    click.echo(f"url:      {info['url']}")
    click.echo(f"version:  {info['version']} ({info['distribution']})")
    click.echo(f"health:   {info['health']} ({info['nodes']} node(s), {info['indices']} indices)")
    click.echo("plugins:  " + (", ".join(info["plugins"]) or "(none)"))
    if info.get("pid"):
        click.echo(f"pid:      {info['pid']}  logs: {info['log']}")


@opensearch.command()
def stop() -> None:
    """Stop the node that `evalctl opensearch start` started (and nothing else)."""
    from evalctl.node import ManagedNode

    pid = ManagedNode().stop()
    click.echo(f"stopped OpenSearch (pid {pid})" if pid else "no managed OpenSearch node is running")


@opensearch.command()
@click.option("-n", "--lines", type=int, default=50, show_default=True)
def logs(lines) -> None:
    """Print the end of the managed node's log."""
    from evalctl.node import ManagedNode

    node = ManagedNode()
    click.echo(f"# {node.log_file}")
    click.echo(node.tail_log(lines))


# Each command group lives in its own module; registered here so `evalctl --help` lists them all.
from evalctl.cli_corpus import corpus  # noqa: E402
from evalctl.cli_dashboards import dashboards  # noqa: E402
from evalctl.cli_finetune import finetune, pairs, recipes, transfer  # noqa: E402
from evalctl.cli_index import index  # noqa: E402
from evalctl.cli_models import encode, models  # noqa: E402
from evalctl.cli_referee import referee  # noqa: E402
from evalctl.cli_retrieval import compare, evaluate, fusion_sweep, retrieve  # noqa: E402
from evalctl.cli_run import report, run  # noqa: E402
from evalctl.cli_tasks import classify, cluster_cmd, tables, vectors  # noqa: E402

for _command in (corpus, models, encode, index, run, report, dashboards, vectors, classify, cluster_cmd, tables,
                 finetune, recipes, pairs, transfer, retrieve, evaluate, compare, fusion_sweep, referee):
    cli.add_command(_command)
