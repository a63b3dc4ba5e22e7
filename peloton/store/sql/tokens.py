"""The API's tokens (peloton.auth.tokens), their secrets kept hashed."""

from __future__ import annotations

from peloton.auth.tokens import TokenRow
from peloton.store.rows import TOKEN_COLUMNS, placeholders, token_from_row, token_params
from peloton.store.sql.base import MAIN, SqlBase


class TokensSql(SqlBase):
    SQL = {
        "add_token": f"INSERT INTO tokens ({TOKEN_COLUMNS}) VALUES ({placeholders(TOKEN_COLUMNS, '?')})",
        "get_token": f"SELECT {TOKEN_COLUMNS} FROM tokens WHERE token_id = ?",
        "revoke_token": "UPDATE tokens SET revoked_ms = ? WHERE token_id = ? AND revoked_ms IS NULL",
        "list_tokens": f"SELECT {TOKEN_COLUMNS} FROM tokens ORDER BY created_ms",
    }

    def add_token(self, row: TokenRow) -> None:
        self._count(MAIN, self.q.add_token, token_params(row))

    def get_token(self, token_id: str) -> TokenRow | None:
        rows = self._rows(MAIN, self.q.get_token, (token_id,))
        return token_from_row(rows[0]) if rows else None

    def revoke_token(self, token_id: str, at_ms: int) -> bool:
        return self._count(MAIN, self.q.revoke_token, (at_ms, token_id)) > 0

    def list_tokens(self) -> list[TokenRow]:
        return [token_from_row(r) for r in self._rows(MAIN, self.q.list_tokens)]
