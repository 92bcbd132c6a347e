"""The NEXMark queries of this suite, one module each, registered by name.

To add a query (Q3 and Q8 come with multi-input stages): write ``queries/qN.py`` with a
:class:`~bench.nexmark.query.Query` subclass (its reference, its variants' stages, its Spark-native
form) and add it to :data:`REGISTRY`; the tests (``tests/nexmark``) and the benchmark
(``python -m bench.nexmark``) run every registered query.

:data:`JOINS` holds the queries that join persons and auctions (Q3, Q8: a
:class:`~bench.nexmark.queries.q3.PersonAuctionJoin` reads two event kinds, where the suite's
runners and tests read bids): their own tests (``tests/nexmark/test_nexmark_joins.py``) and
benchmark (``python -m bench.nexmark.queries.q8``) run them.
"""

from __future__ import annotations

from bench.nexmark.query import Query
from bench.nexmark.queries.q0 import Q0
from bench.nexmark.queries.q1 import Q1
from bench.nexmark.queries.q2 import Q2
from bench.nexmark.queries.q3 import Q3
from bench.nexmark.queries.q5 import Q5
from bench.nexmark.queries.q7 import Q7
from bench.nexmark.queries.q8 import Q8
from bench.nexmark.queries.q11 import Q11

__all__ = ["REGISTRY", "JOINS", "get"]

REGISTRY: dict[str, Query] = {q.name: q for q in (Q0(), Q1(), Q2(), Q5(), Q7(), Q11())}
#: Queries over persons and auctions (two event kinds; module docstring).
JOINS: dict[str, Query] = {q.name: q for q in (Q3(), Q8())}


def get(name: str) -> Query:
    try:
        return {**REGISTRY, **JOINS}[name.lower()]
    except KeyError:
        raise ValueError(f"no NEXMark query {name!r}; registered: {sorted(REGISTRY) + sorted(JOINS)}") from None
