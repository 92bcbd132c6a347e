"""with_key_groups: data to one group by key, markers to every group, errors kept."""

import pytest


def test_key_groups_route_data_and_replicate_markers(spark):
    from dataflow_kafka.keygroups import with_key_groups

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


def test_python_routing_equals_the_jvm_routing(spark):
    """key_group_of (Python) puts every key where with_key_groups (JVM) does, for the key types
    stages use: strings, binary, bigint, int, double, boolean, nulls and several key columns."""
    import random

    from dataflow_kafka.keygroups import key_group_of, key_groups_of, with_key_groups

    rnd = random.Random(3)
    rows = [("data", f"u{rnd.randrange(10**6)}", bytes([rnd.randrange(256) for _ in range(rnd.randrange(9))]),
             rnd.randrange(-10**12, 10**12), rnd.randrange(-10**6, 10**6), rnd.uniform(-1e3, 1e3),
             rnd.random() < 0.5) for _ in range(300)]
    rows += [("data", None, None, None, None, None, None), ("data", "", b"", 0, 0, -0.0, False)]
    df = spark.createDataFrame(rows, "kind string, s string, b binary, l long, i int, d double, f boolean")
    for n in (1, 7, 64):
        for cols, widths in ((["s"], [8]), (["b"], [8]), (["l"], [8]), (["i"], [4]), (["d"], [8]), (["f"], [8]),
                             (["s", "l"], [8, 8]), (["i", "b", "f"], [4, 8, 8])):
            got = with_key_groups(df, cols, n).collect()
            python = key_groups_of([[r[c] for r in got] for c in cols], n, widths)
            assert [r.key_group for r in got] == python.tolist(), (n, cols)
            if len(cols) == 1 and widths == [8]:
                assert [key_group_of(r[cols[0]], n) for r in got] == python.tolist()
