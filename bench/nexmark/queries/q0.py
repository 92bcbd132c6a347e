"""NEXMark Q0, pass-through: every bid as it is (``SELECT auction, bidder, price, dateTime, extra
FROM bid``). Measures the source and the sink: nothing to compute, no order to respect."""

from __future__ import annotations

import pandas as pd

from bench.nexmark.query import Projection

__all__ = ["Q0"]


class Q0(Projection):
    name = "q0"
    title = "pass-through"
    columns = ("auction", "bidder", "price", "dateTime", "extra")

    def select(self, bids):
        return bids.select("auction", "bidder", "price", bids["ts_ms"].alias("dateTime"), "extra")

    def select_local(self, bids: pd.DataFrame) -> pd.DataFrame:
        return bids[list(self.columns)]
