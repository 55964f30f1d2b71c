"""The PostgreSQL server of the PostgresStore tests (see tests/store/pg.py)."""

from .pg import postgres_dsn

__all__ = ["postgres_dsn"]
