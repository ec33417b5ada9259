"""Which OpenSearch Dashboards `evalctl dashboards install` imports into, and with which credentials.

The URL: `--url`, else EVALCTL_DASHBOARDS_URL, else the config file's `dashboards: url`, else
http://127.0.0.1:5601 (as docker-compose publishes it). Credentials are sent only when given:
EVALCTL_DASHBOARDS_USER / EVALCTL_DASHBOARDS_PASSWORD, the config's `dashboards: username / password`,
or a user:password@ written into the URL, which is taken out of it as for the OpenSearch URL (the
explicit settings win). They are never printed: messages show the URL without them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evalctl.opensearch.connection import build_settings, check, read_section, redact

DEFAULT_URL = "http://127.0.0.1:5601"
ENV = {"url": "EVALCTL_DASHBOARDS_URL", "username": "EVALCTL_DASHBOARDS_USER",
       "password": "EVALCTL_DASHBOARDS_PASSWORD"}


@dataclass(frozen=True)
class DashboardsSettings:
    url: str = DEFAULT_URL
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    def __post_init__(self):
        problem = check("url", self.url)
        if problem:
            raise ValueError(f"url {redact(repr(self.url))}: {problem}")

    @property
    def auth(self) -> tuple[str, str] | None:
        return (self.username, self.password or "") if self.username else None

    def describe(self) -> str:
        return self.url + (f" as {self.username} (password set)" if self.username else "")


def load_dashboards_settings(url: str | None = None) -> DashboardsSettings:
    """The settings, `url` (the --url option) overriding the environment and the config file."""
    data, origin = read_section("dashboards", ENV, {"url": ("--url", url)} if url else None)
    return build_settings(DashboardsSettings, data, origin, "dashboards", "EVALCTL_DASHBOARDS_*")
