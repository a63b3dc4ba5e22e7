"""The API's tokens, the TokenStore role: one partition (bucket 0), read whole to list them."""

from __future__ import annotations

from peloton.auth.tokens import TokenRow
from peloton.store.cassandra.session import TS, CassandraSession, insert_cql
from peloton.store.rows import TOKEN_COLUMNS, token_from_row, token_params


class TokensMixin(CassandraSession):
    """A token is revoked once: a lightweight transaction on its revoked_ms."""

    # -- tokens -----------------------------------------------------------------------------
    def add_token(self, row: TokenRow) -> None:
        self._write(insert_cql("tokens", f"bucket, {TOKEN_COLUMNS}"), [(0, *token_params(row), TS)])

    def get_token(self, token_id: str) -> TokenRow | None:
        rows = self._rows(f"SELECT {TOKEN_COLUMNS} FROM tokens WHERE bucket = 0 AND token_id = ?", (token_id,))
        return token_from_row(rows[0]) if rows else None

    def revoke_token(self, token_id: str, at_ms: int) -> bool:
        if self.get_token(token_id) is None:
            return False
        return self._applied_each("UPDATE tokens SET revoked_ms = ? WHERE bucket = 0 AND token_id = ? "
                                  "IF revoked_ms = null", [(at_ms, token_id)])[0]

    def list_tokens(self) -> list[TokenRow]:
        rows = self._rows(f"SELECT {TOKEN_COLUMNS} FROM tokens WHERE bucket = 0")
        return sorted((token_from_row(r) for r in rows), key=lambda t: t.created_ms)
