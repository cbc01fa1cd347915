"""Which requests are the ORS front's, and their route below the mount (see ``mount`` for the two ways in)."""

from __future__ import annotations

from typing import Any

from ngym.server.sessions.routing import ORS_MOUNT_PATH, ORS_ROOT_SEGMENTS

MOUNT_PATH = ORS_MOUNT_PATH
#: First path segments of the ORS routes a root request may be (``/<env_name>/...`` forms aside: the SDK sends
#: bare paths for an environment named by a base URL); shared with the proxy's routing rule.
ROOT_SEGMENTS = ORS_ROOT_SEGMENTS


def is_ors_request(scope: Any) -> bool:
    """Whether a root request is the ``openreward`` SDK's: its first path segment is an ORS route and it carries
    ``X-Session-ID`` or asks for an event stream (NeMo Gym's wire sends neither; see ``mount``)."""
    return _is_ors_root(scope["path"], scope.get("headers", ()))


def _is_ors_root(path: str, headers: Any) -> bool:
    if path.partition("/")[2].partition("/")[0] not in ROOT_SEGMENTS:
        return False
    for name, value in headers:
        if name == b"x-session-id" or (name == b"accept" and b"text/event-stream" in value):
            return True
    return False


def ors_route(path: str, headers: Any) -> str | None:
    """The front's route of a request (``/ors/ping`` and the SDK's ``/ors//ping`` → ``/ping``; a root ORS request
    → its path), or None when the request is not ORS's."""
    mounted = mounted_route(path)
    if mounted is not None:
        return mounted
    return path if _is_ors_root(path, headers) else None


def mounted_route(path: str) -> str | None:
    """The route of a path under the mount (``/ors/ping``, the SDK's ``/ors//ping`` → ``/ping``), else None."""
    if path.startswith(MOUNT_PATH) and (len(path) == len(MOUNT_PATH) or path[len(MOUNT_PATH)] == "/"):
        # "/ors//ping": the SDK's "{base_url}/ping" with a base URL ending in "/"
        return "/" + path[len(MOUNT_PATH) :].lstrip("/")
    return None


def is_ors_root(path: str, headers: Any) -> bool:
    """Whether a request at ``path`` (not under the mount) is ORS's (``is_ors_request``)."""
    return _is_ors_root(path, headers)
