"""The SQL backends' one store: SQLite and PostgreSQL share its methods (store.py and the mixins
it is made of), its statements (written once, compiled per dialect: dialect.py) and its schema
(numbered migrations in peloton/store/migrations: migrate.py)."""
