"""JWTs of an OIDC issuer as identities: an issuer served over real HTTP (discovery document and
JWKS) on this machine, tokens signed with its key. A good token names the user and groups and
passes the pools' permissions like one of our own; anything else is refused with the reason."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi.testclient import TestClient

from peloton.auth.identities import Identities
from peloton.auth.oidc import OidcVerifier
from peloton.auth.tokens import TokenError
from peloton.config import Settings
from peloton.model.pool import parse_pool_config
from peloton.runtime import RecordingEmitter, StaticView
from peloton.store import open_store
from pelotonctl.api.app import make_app
from pelotonctl.api.audit import Audit
from tests.builders.api import HOST, JOB, RESOURCES

AUDIENCE = "peloton-test"


@pytest.fixture(scope="module")
def issuer():
    """An OIDC issuer: its address, and a function that signs claims with its key."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update({"kid": "k1", "use": "sig", "alg": "RS256"})
    documents = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps(documents[self.path]).encode() if self.path in documents else b"{}"
            self.send_response(200 if self.path in documents else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    documents["/.well-known/openid-configuration"] = {"issuer": url, "jwks_uri": f"{url}/keys"}
    documents["/keys"] = {"keys": [jwk]}
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def sign(claims: dict, signer=key, kid: str = "k1", algorithm: str = "RS256") -> str:
        now = int(time.time())
        return jwt.encode({"iss": url, "aud": AUDIENCE, "iat": now, "exp": now + 300, **claims}, signer,
                          algorithm=algorithm, headers={"kid": kid})
    yield url, sign
    server.shutdown()


def test_a_good_token_names_its_user_and_groups_and_bad_ones_say_what_is_wrong(issuer) -> None:
    url, sign = issuer
    oidc = OidcVerifier(url, AUDIENCE)  # the keys found through discovery
    who = oidc.verify(sign({"sub": "u-1", "preferred_username": "alice", "groups": ["team-a", "bad group!"]}))
    assert (who.user, who.groups, who.admin) == ("alice", frozenset({"team-a"}), False)
    assert oidc.verify(sign({"sub": "bob"})).user == "bob"  # no username claim: the subject
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    refused = {
        "expired": sign({"sub": "alice", "exp": int(time.time()) - 3600}),
        "audience": sign({"sub": "alice", "aud": "someone-else"}),
        "issuer": sign({"sub": "alice", "iss": "https://elsewhere.example"}),
        "Signature verification failed": sign({"sub": "alice"}, signer=other_key),
        "signing key": sign({"sub": "alice"}, signer=other_key, kid="k9"),
    }
    for reason, token in refused.items():
        with pytest.raises(TokenError, match=f"(?i){reason}"):
            oidc.verify(token)
    # Without an issuer configured, a JWT is refused by name; our own tokens still work.
    with pytest.raises(TokenError, match="no OIDC issuer"):
        Identities(tokens=None).principal(sign({"sub": "alice"}))


def test_the_api_takes_an_issuers_token_and_applies_the_pools_permissions(issuer, tmp_path) -> None:
    url, sign = issuer
    store = open_store(tmp_path / "peloton.db")
    store.put_pool("/a", parse_pool_config("name: a\nowningTeam: team-a\n" + RESOURCES, "/a"))
    store.put_pool("/b", parse_pool_config("name: b\nowningTeam: team-b\n" + RESOURCES, "/b"))
    settings = Settings(home=tmp_path, store=str(tmp_path / "peloton.db"), oidc_issuer=url, oidc_audience=AUDIENCE,
                        admin_groups="ops")
    app = make_app(settings, store, RecordingEmitter("api"), Audit(RecordingEmitter("api"), 1.0),
                   StaticView({"h0": HOST}))
    alice = {"Authorization": "Bearer " + sign({"preferred_username": "alice", "groups": ["team-a"]})}
    ops = {"Authorization": "Bearer " + sign({"preferred_username": "carol", "groups": ["ops"]})}
    with TestClient(app) as api:
        assert api.post("/v1/jobs", json={"pool": "/a", "config": JOB}, headers=alice).status_code == 201
        refused = api.post("/v1/jobs", json={"pool": "/b", "config": JOB}, headers=alice)
        assert refused.status_code == 403 and "alice is in none of team-b" in refused.json()["detail"]
        # an admin group
        assert api.post("/v1/jobs", json={"pool": "/b", "config": JOB}, headers=ops).status_code == 201
        expired = {"Authorization": "Bearer " + sign({"sub": "alice", "exp": int(time.time()) - 3600})}
        answer = api.get("/v1/jobs", headers=expired)
        assert answer.status_code == 401 and "expired" in answer.json()["detail"]
    store.close()
