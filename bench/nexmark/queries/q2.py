"""NEXMark Q2, selection: the auction and price of the bids on every 123rd auction
(``SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0``, the Flink nexmark form; Beam's
suite takes the same ``auctionSkip`` of 123)."""

from __future__ import annotations

import pandas as pd

from bench.nexmark.query import Projection

__all__ = ["Q2"]

AUCTION_SKIP = 123


class Q2(Projection):
    name = "q2"
    title = "selection"
    columns = ("auction", "price")
    identity = ("auction", "price")

    def select(self, bids):
        from pyspark.sql import functions as F

        return bids.where(F.pmod("auction", F.lit(AUCTION_SKIP)) == 0).select("auction", "price")

    def select_local(self, bids: pd.DataFrame) -> pd.DataFrame:
        return bids[bids["auction"] % AUCTION_SKIP == 0][list(self.columns)]
