"""Who a bearer token names: one of our own tokens (plt_..., checked against the store), or a
JWT of the configured OIDC issuer. The API and the dashboard ask this one place."""

from __future__ import annotations

from peloton.auth.oidc import OidcVerifier, looks_like_jwt
from peloton.auth.tokens import Principal, TokenError, token_id_of, verify
from peloton.config import Settings
from peloton.store.base import TokenStore


class Identities:
    def __init__(self, tokens: TokenStore, oidc: OidcVerifier | None = None):
        self.tokens, self.oidc = tokens, oidc

    @classmethod
    def from_settings(cls, settings: Settings, tokens: TokenStore) -> Identities:
        oidc = None
        if settings.oidc_issuer:
            oidc = OidcVerifier(settings.oidc_issuer, settings.oidc_audience, settings.oidc_jwks_url,
                                settings.oidc_user_claim, settings.oidc_groups_claim)
        return cls(tokens, oidc)

    def principal(self, token: str) -> Principal:
        """The principal; TokenError saying why not."""
        if looks_like_jwt(token):
            if self.oidc is None:
                raise TokenError("a JWT, but no OIDC issuer is configured here (PELOTON_OIDC_ISSUER)")
            return self.oidc.verify(token)
        return verify(token, self.tokens.get_token(token_id_of(token)))
