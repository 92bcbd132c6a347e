"""NEXMark Q1, currency conversion: every bid with its price in euros, ``0.908 * price`` (the
Flink nexmark form, a decimal with 3 places; Beam's suite multiplies by 89/100 in integers)."""

from __future__ import annotations

import pandas as pd

from bench.nexmark.query import Projection

__all__ = ["Q1"]

#: euros per dollar, as the public query states it
RATE_MILLI = 908


class Q1(Projection):
    name = "q1"
    title = "currency conversion"
    columns = ("auction", "bidder", "price", "dateTime", "extra")

    def select(self, bids):
        from pyspark.sql import functions as F

        euros = (F.col("price") * F.lit(RATE_MILLI / 1000).cast("decimal(4,3)")).cast("double")
        return bids.select("auction", "bidder", euros.alias("price"), bids["ts_ms"].alias("dateTime"), "extra")

    def select_local(self, bids: pd.DataFrame) -> pd.DataFrame:
        return bids.assign(price=bids["price"] * RATE_MILLI / 1000)[list(self.columns)]

    def native_results(self, frame):
        return sorted((a, b, round(float(p), 3), t, x) for a, b, p, t, x in super().native_results(frame))
