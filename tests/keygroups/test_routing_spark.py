"""with_key_groups: data to one group by key, markers to every group, errors kept."""

import pytest

pytestmark = pytest.mark.spark


def test_key_groups_route_data_and_replicate_markers(spark):
    from keygroups import with_key_groups

    rows = [("data", "k%d" % (i % 10)) for i in range(100)] + [("punctuation", None), ("modification", None),
                                                               ("error", None)]
    df = spark.createDataFrame(rows, "kind string, key string")
    out = with_key_groups(df, "key", 4).collect()
    data = [r for r in out if r.kind == "data"]
    assert len(data) == 100
    group_of = {}
    for r in data:
        assert 0 <= r.key_group < 4
        assert group_of.setdefault(r.key, r.key_group) == r.key_group   # one group per key
    assert len(set(group_of.values())) > 1
    assert sorted(r.key_group for r in out if r.kind == "punctuation") == [0, 1, 2, 3]
    assert sorted(r.key_group for r in out if r.kind == "modification") == [0, 1, 2, 3]
    assert [r.key_group for r in out if r.kind == "error"] == [0]
    with pytest.raises(ValueError, match="num_key_groups must be a positive int, got 0"):
        with_key_groups(df, "key", 0)
