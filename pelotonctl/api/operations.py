"""What the operators' routes (routes/operations.py) keep across requests: one lag sampler per API
instance, and the limits of what they may sample and replay."""

from __future__ import annotations

from fastapi import Request

from peloton.config import Settings
from pelotonctl.lag_sampler import LagSampler

# The most a caller's --window may say. The status words are the sampler's, over its own window
# (STATUS_WINDOW), the same for every caller; the bound stays for the clients that send it.
LAG_WINDOW = 60
# The topics a replay through the API may write: the API writes job commands and no stage's topic.
REPLAYABLE = frozenset({"job-commands"})


class Operations:
    """One lag sampler per API instance (pelotonctl.lag_sampler), sampling every stage group once
    a second from the brokers and exporting the peloton_group_* series on the API's /metrics.
    `pelotonctl lag`, the dashboard and `job status` read its one view.

    The served API starts it with the app (make_app(sample_lag=True)); an app made without that
    (the tests') starts it on the first read."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.lag_sampler = LagSampler(settings, export=True)

    def start(self) -> None:
        self.lag_sampler.start()

    def lag(self, stages: tuple[str, ...]) -> dict:
        """The sampler's last report of `stages` (pelotonctl.lag's shape, each group with since when
        it has had its status); LagUnavailable (a ConnectionError) when the broker is away."""
        self.lag_sampler.start()  # where the app did not start it
        return self.lag_sampler.view(stages)

    def stage_health(self) -> dict[str, tuple[str, float, str]]:
        """Per stage, (status, since_epoch_s, detail): LagSampler.stage_health. STOP or STALL: the
        stage's group has no live member reading while messages wait. Never waits or raises."""
        self.lag_sampler.start()  # where the app did not start it
        return self.lag_sampler.stage_health()

    def close(self) -> None:
        self.lag_sampler.close()


async def operations_of(request: Request) -> Operations:
    # async: read on the event loop, without a worker thread of its own
    return request.app.state.operations
