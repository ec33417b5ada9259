"""`evalctl`: a thin click layer; each command calls one library function."""

from __future__ import annotations

import os
import sys

import click

from evalctl.errors import EvalctlError, UserError
from evalctl.opensearch.cluster_info import cluster_status
from evalctl.opensearch.connection import forget_answers, load_settings, node_answered, redact, resolve_url
from evalctl.opensearch.local_cluster import LocalCluster, stop_members
from evalctl.opensearch.node import ManagedNode, NodeError
from evalctl.quiet import quiet_libraries


def main() -> None:
    try:
        cli(standalone_mode=True)
    except EvalctlError as e:  # raised outside any command (e.g. while loading a config)
        click.echo(f"Error: {_redact(str(e))}", err=True)
        sys.exit(e.exit_code)


def _redact(text: str) -> str:
    return redact(text, os.environ.get("EVALCTL_OPENSEARCH_PASSWORD"), os.environ.get("EVALCTL_DASHBOARDS_PASSWORD"))


def _node() -> tuple[str, bool]:
    """The configured cluster's URL, and whether it is a configured one (not the managed node)."""
    try:
        settings = load_settings()
        return resolve_url(settings), settings.external
    except Exception:  # noqa: BLE001 - only for the message; the original error is what matters
        return "the configured URL", False


def explain(e: BaseException) -> tuple[str, int] | None:
    """The message and exit code for an error evalctl knows (2: bad input, 1: failure); None for a bug."""
    from opensearchpy.exceptions import (AuthenticationException, AuthorizationException,  # opensearchpy
                                         ConnectionError as OSConnectionError, NotFoundError, TransportError)

    if isinstance(e, EvalctlError):
        return str(e), e.exit_code
    if isinstance(e, OSConnectionError):
        url, external = _node()
        if node_answered():
            return (f"OpenSearch at {url} stopped answering during the command ({e.__class__.__name__}); what was "
                    "finished before is kept (indexed documents, stored runs and results): start the node again "
                    "(`evalctl opensearch start`) and rerun the same command to continue", 1)
        hint = ("check that cluster, or unset EVALCTL_OPENSEARCH_URL (and the config file's opensearch url) to use "
                "the managed local node" if external else
                "start it with `evalctl opensearch start`, or point EVALCTL_OPENSEARCH_URL at a running cluster")
        return f"OpenSearch at {url} does not answer ({e.__class__.__name__}): {hint}", 1
    if isinstance(e, NotFoundError):
        return f"OpenSearch at {_node()[0]}: not found ({e.error}); `evalctl index status` lists the indexes", 2
    if isinstance(e, (AuthenticationException, AuthorizationException)):
        return (f"OpenSearch at {_node()[0]} refused the request ({e.status_code}): set EVALCTL_OPENSEARCH_USER and "
                "EVALCTL_OPENSEARCH_PASSWORD (or the config file's opensearch: section) to an account allowed "
                "to manage evalctl-* indexes", 2)
    if isinstance(e, TransportError) and isinstance(e.status_code, int):
        # any other answer the node refused past the retries: what it said, never a traceback
        return (f"OpenSearch at {_node()[0]} refused a request ({e.status_code} {_reason(e)}); what was finished "
                "before is kept. `evalctl opensearch logs` shows the node's side, `evalctl --debug` the request's", 1)
    if isinstance(e, OSError) and e.filename is not None:
        return f"{e.filename}: {e.strerror or e}", 1
    return None


def _reason(e) -> str:
    """The node's own words: the first root cause of an error answer, else its error type."""
    info = e.info if isinstance(e.info, dict) else {}
    err = info.get("error")
    if isinstance(err, dict):
        cause = (err.get("root_cause") or [err])[0]
        if isinstance(cause, dict):
            return f"{cause.get('type', '?')}: {cause.get('reason', '')}".strip(": ")
    return str(e.error)


class Explained(click.ClickException):
    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


class EvalctlGroup(click.Group):
    """Catches every known error of every command once: one message, exit code 2 or 1, no traceback.

    With `evalctl --debug` the original exception (and its traceback) goes through unchanged.
    """

    def invoke(self, ctx):
        forget_answers()  # "the node answered earlier" means earlier in this command
        try:
            return super().invoke(ctx)
        except click.ClickException as e:  # UserError and click's own usage errors: only scrubbed
            e.message = _redact(e.message)
            raise
        except (click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as e:
            known = None if ctx.params.get("debug") else explain(e)
            if known is None:
                raise
            raise Explained(_redact(known[0]), known[1]) from None


@click.group(cls=EvalctlGroup)
@click.version_option(package_name="evalctl")
@click.option("--debug", is_flag=True, help="Show the full traceback of an error instead of its message.")
@click.option("--verbose", is_flag=True, help="Show the libraries' own warnings and progress bars (transformers, "
              "torch, sentence-transformers, the Hugging Face hub), which evalctl keeps quiet.")
def cli(debug, verbose) -> None:
    """Evaluate patent embeddings on OpenSearch: retrieval, classification, clustering."""
    if not verbose:
        quiet_libraries()


# --------------------------------------------------------------------------- opensearch


@cli.group()
def opensearch() -> None:
    """Manage the local OpenSearch node, or inspect the configured cluster."""


@opensearch.command()
@click.option("--heap", default=None, help="JVM heap, e.g. 1g (default from configs/opensearch.yaml).")
@click.option("--port", type=int, default=None, help="HTTP port on 127.0.0.1 (default 9200).")
@click.option("--plugin-zip", "plugin_zips", multiple=True, metavar="PATH|URL[#sha256=HEX]",
              help="A plugin zip to install (e.g. opensearch-neural-search, not on Maven Central): a local path or an "
                   "http(s) URL, optionally pinned by sha256. Installed into the node on this start (restarting it).")
@click.option("--timeout", type=float, default=180.0, show_default=True, help="Seconds to wait for health.")
@click.option("--nodes", type=click.IntRange(1, 9), default=1, show_default=True,
              help="More than 1: a local cluster of that many nodes (HTTP ports from --port, default 9400; 512m heap "
                   "each), beside the single node, to try shards, replicas and host lists on.")
def start(heap, port, plugin_zips, timeout, nodes) -> None:
    """Provision (once, from Maven Central) and start the local node (or a local cluster: --nodes)."""
    settings = load_settings()
    if settings.external:  # a configured cluster is used as it is: there is no local node to start
        if plugin_zips:
            raise UserError(f"--plugin-zip installs into the managed local node, but the configured cluster is "
                            f"{settings.describe()}; install plugins there, or unset EVALCTL_OPENSEARCH_URL")
        info = cluster_status()  # a cluster that does not answer is reported with its URL
        click.echo(f"using the configured cluster {settings.describe()} (OpenSearch {info['version']}, health "
                   f"{info['health']}): nothing to start")
        return
    if nodes > 1:
        cluster = LocalCluster(nodes, heap=heap or "512m", http_port=port or 9400, plugin_sources=plugin_zips)
        try:
            seconds = cluster.start(timeout=max(timeout, 300.0), echo=click.echo)
        except NodeError as e:
            raise UserError(str(e)) from None
        click.echo(f"a local cluster of {nodes} nodes is up in {seconds:.0f}s; use it with\n"
                   f"  export EVALCTL_OPENSEARCH_URL={','.join(cluster.urls)}")
        return
    try:
        st = ManagedNode(heap=heap, http_port=port, plugin_sources=plugin_zips).start(timeout=timeout, echo=click.echo)
    except NodeError as e:
        raise UserError(str(e)) from None
    click.echo(f"OpenSearch {st.version} is up at {st.url} (pid {st.pid}, started in {st.start_seconds}s)")
    for name, why in st.missing_plugins.items():
        click.echo(f"  without {name}: {why}")


@opensearch.command()
def status() -> None:
    """Version, health and installed plugins of the configured cluster."""
    info = cluster_status()
    click.echo(f"cluster:  {info['where']}")
    click.echo(f"url:      {info['url']}")
    click.echo(f"version:  {info['version']} ({info['distribution']})")
    click.echo(f"health:   {info['health']} ({info['nodes']} node(s), {info['indices']} indices)")
    click.echo("vectors:  " + {True: "Lucene's SIMD code (scores can differ in the last bits from build to build)",
                               False: "Lucene's plain Java code (the same scores every build)",
                               None: "unknown (this user may not read the nodes' JVM arguments)"}[info["simd_vectors"]])
    click.echo("plugins:  " + ("" if info["plugins"] else "(none)"))
    for name, p in info["plugins"].items():
        click.echo(f"  {name} {p['version']}" + (f"  from {p['source']}" if p.get("source") else ""))
    if info.get("pid"):
        click.echo(f"pid:      {info['pid']}  logs: {info['log']}")


@opensearch.command()
def stop() -> None:
    """Stop the node (and the local cluster's nodes) that `evalctl opensearch start` started, and nothing else."""
    pid = ManagedNode().stop()
    click.echo(f"stopped OpenSearch (pid {pid})" if pid else "no managed OpenSearch node is running")
    for name, member_pid in stop_members().items():
        click.echo(f"stopped local cluster node {name} (pid {member_pid})")


@opensearch.command()
@click.option("-n", "--lines", type=int, default=50, show_default=True)
def logs(lines) -> None:
    """Print the end of the managed node's log."""
    node = ManagedNode()
    click.echo(f"# {node.log_file}")
    click.echo(node.tail_log(lines))


# Each command group lives in its own module; registered here so `evalctl --help` lists them all.
from evalctl.cli.corpus import corpus  # noqa: E402
from evalctl.cli.dashboards import dashboards  # noqa: E402
from evalctl.cli.data import data  # noqa: E402
from evalctl.cli.export import export  # noqa: E402
from evalctl.cli.finetune import finetune, pairs, recipes, transfer  # noqa: E402
from evalctl.cli.index import index  # noqa: E402
from evalctl.cli.models import encode, models  # noqa: E402
from evalctl.cli.referee import referee  # noqa: E402
from evalctl.cli.retrieval import compare, evaluate, fusion_sweep, latency, retrieve  # noqa: E402
from evalctl.cli.run import report, run  # noqa: E402
from evalctl.cli.runs import qrels, runs  # noqa: E402
from evalctl.cli.tasks import classify, cluster_cmd, tables, vectors  # noqa: E402

for _command in (data, corpus, qrels, models, encode, index, run, report, dashboards, vectors, classify, cluster_cmd,
                 tables, finetune, recipes, pairs, transfer, retrieve, runs, evaluate, compare, fusion_sweep, latency,
                 referee, export):
    cli.add_command(_command)
