"""The Airflow plugin of the provider: the Streams pages in Airflow's UI.

Airflow's API server mounts the FastAPI app at /streamstate (`fastapi_apps`), and the UI's
navigation shows the Streams page under Browse, inside the UI (`external_views` with a
`url_route`: /plugin/streams). Airflow's UI keeps its address bar in step with the page shown
in its frame by appending the page's path to `/plugin/<url_route>`: with the route named
`streamstate` like the mount, every page read `/plugin/streamstate/streamstate/streams...`;
`streams` gives `/plugin/streams/streamstate/streams`. Registered in the provider info
(`plugins:`).
"""

from __future__ import annotations

from airflow.configuration import conf
from airflow.plugins_manager import AirflowPlugin

from airflow_provider_streamstate.plugins.app import URL_PREFIX, create_app

URL_ROUTE = "streams"  # the page inside Airflow's UI: /plugin/streams (not the mount's name: see above)


def _base_url_path(path: str) -> str:
    """`path` below the API server's base URL path (`[api] base_url`)."""
    from urllib.parse import urlsplit

    base = conf.get("api", "base_url", fallback="/") or "/"
    return urlsplit(base).path.rstrip("/") + path


class StreamstatePlugin(AirflowPlugin):
    """The Streams pages: every stream's state, history and snapshots (read-only)."""

    name = "streamstate"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "streamstate Streams"}]
    external_views = [
        {
            "name": "Streams",
            "href": _base_url_path(f"{URL_PREFIX}/streams"),
            "destination": "nav",
            "category": "browse",
            "url_route": URL_ROUTE,
            "icon": _base_url_path(f"{URL_PREFIX}/static/icon.svg"),
        }
    ]
