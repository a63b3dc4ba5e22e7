"""How pelotonctl reaches the cluster: through the API when one is configured (PELOTON_API_URL,
a running dev stack's by default), as the user its token names; otherwise directly, with the
store's and the broker's own credentials (an operator on the cluster's machines, and the tests).
Both answer the same calls with the same shapes (pelotonctl/shapes.py) and the same errors."""

from __future__ import annotations

from peloton.config import Settings
from pelotonctl.client.direct import DirectClient
from pelotonctl.client.http import ApiClient, ApiUnavailable, NotPermitted

__all__ = ["ApiClient", "ApiUnavailable", "DirectClient", "NotPermitted", "connect"]


def connect(settings: Settings) -> ApiClient | DirectClient:
    if settings.api_url:
        return ApiClient(settings.api_url, settings.token)
    return DirectClient(settings)
