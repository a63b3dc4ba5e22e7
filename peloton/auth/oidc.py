"""Identities from an OIDC issuer: a JWT it signed names the user and their groups. The
signature is checked against the issuer's published keys (JWKS: fetched once, cached, fetched
again when a token names a key not seen yet, as issuers rotate keys), then the issuer, the
audience and the expiry. PyJWT does the checking.

Configured by PELOTON_OIDC_ISSUER (the `iss` every token must carry) and PELOTON_OIDC_AUDIENCE
(the `aud`: this cluster's client id at the issuer); the keys' address comes from the issuer's
discovery document unless PELOTON_OIDC_JWKS_URL gives it. The user is the
PELOTON_OIDC_USER_CLAIM (preferred_username, else sub), the groups the PELOTON_OIDC_GROUPS_CLAIM
(groups). Admins are the members of PELOTON_ADMIN_GROUPS, as for tokens.
"""

from __future__ import annotations

import json
import threading
import urllib.request

import jwt

from peloton.auth.tokens import USER_NAME, Principal, TokenError

# Asymmetric only: a shared-secret algorithm (HS256) would let anyone holding the public key sign.
ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "PS256"]
LEEWAY_S = 30  # clocks of the issuer and this machine differ a little


def looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2 and not token.startswith("plt_")


class OidcVerifier:
    def __init__(self, issuer: str, audience: str, jwks_url: str = "", user_claim: str = "preferred_username",
                 groups_claim: str = "groups"):
        self.issuer, self.audience = issuer, audience
        self.user_claim, self.groups_claim = user_claim, groups_claim
        self._jwks_url = jwks_url
        self._keys: jwt.PyJWKClient | None = None
        self._lock = threading.Lock()

    def _client(self) -> jwt.PyJWKClient:
        with self._lock:
            if self._keys is None:
                url = self._jwks_url or _discover_jwks(self.issuer)
                self._keys = jwt.PyJWKClient(url, cache_keys=True, lifespan=3600, timeout=10)
            return self._keys

    def verify(self, token: str) -> Principal:
        """The principal a valid token names; TokenError saying what is wrong otherwise."""
        try:
            key = self._client().get_signing_key_from_jwt(token)
            claims = jwt.decode(token, key.key, algorithms=ALGORITHMS, audience=self.audience, issuer=self.issuer,
                                leeway=LEEWAY_S, options={"require": ["exp", "iss", "aud"]})
        except jwt.PyJWKClientConnectionError as exc:
            raise TokenError(f"the OIDC issuer's keys could not be fetched: {exc}") from None
        except jwt.PyJWKClientError as exc:
            raise TokenError(f"the token's signing key is not one of the issuer's: {exc}") from None
        except jwt.ExpiredSignatureError:
            raise TokenError("the OIDC token has expired") from None
        except jwt.InvalidTokenError as exc:
            raise TokenError(f"the OIDC token is not valid here: {exc}") from None
        user = claims.get(self.user_claim) or claims.get("sub")
        if not isinstance(user, str) or not USER_NAME.fullmatch(user):
            raise TokenError(f"the OIDC token names no usable user in {self.user_claim!r} or 'sub'")
        groups = claims.get(self.groups_claim) or []
        if isinstance(groups, str):
            groups = [groups]
        return Principal(user, frozenset(g for g in groups if isinstance(g, str) and USER_NAME.fullmatch(g)))


def _discover_jwks(issuer: str) -> str:
    """jwks_uri of the issuer's discovery document (OpenID Connect Discovery 1.0)."""
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return json.loads(answer.read())["jwks_uri"]
    except (OSError, ValueError, KeyError) as exc:
        raise TokenError(f"the OIDC issuer's discovery document ({url}) gave no jwks_uri: {exc}") from None
