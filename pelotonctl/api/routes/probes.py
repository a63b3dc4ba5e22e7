"""What load balancers and Prometheus ask, open to anyone: no token, no audit."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

router = APIRouter(tags=["probes"])


@router.get("/healthz", summary="Liveness: the process answers")
def healthz() -> dict:
    return {"status": "ok"}


@router.get("/metrics", summary="Prometheus metrics of this instance", response_class=PlainTextResponse)
def metrics() -> str:
    from prometheus_client import generate_latest

    return generate_latest().decode()
