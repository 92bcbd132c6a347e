"""The parsers of :mod:`bench.nexmark.jvm_profile` on text in ``jfr print``'s format."""

from __future__ import annotations

from bench.nexmark.jvm_profile import compiler_totals, process_starts, samples

_SAMPLE = '''jdk.ExecutionSample {
  startTime = 14:58:01.100
  sampledThread = "Executor task launch worker for task 3.0 in stage 7.0 (TID 31)" (javaThreadId = 88)
  state = "STATE_RUNNABLE"
  stackTrace = [
    java.nio.Buffer.<init>(int, int, int, int, MemorySegmentProxy) line: 222
    org.apache.spark.sql.catalyst.json.CreateJacksonParser$.utf8String(JsonFactory, UTF8String) line: 41
    org.apache.spark.rdd.RDD.iterator(Partition, TaskContext) line: 338
    ...
  ]
}

jdk.ExecutionSample {
  startTime = 14:58:01.120
  sampledThread = "Thread-12" (javaThreadId = 19)
  state = "STATE_RUNNABLE"
  stackTrace = [
    java.util.HashMap.get(Object) line: 5
    java.lang.Thread.run() line: 833
  ]
}
'''

_STARTS = '''jdk.ProcessStart {
  startTime = 14:57:41.465
  pid = 5036
  command = "readlink file:/tmp/ck/offsets/.3.tmp"
}

jdk.ProcessStart {
  pid = 5037
  command = "/usr/bin/chmod 0644 /tmp/ck/offsets/.3.tmp"
}

jdk.ProcessStart {
  pid = 5038
  command = "readlink file:/tmp/ck/commits/3"
}
'''


def test_samples_name_the_thread_kind_and_the_innermost_spark_frame_past_the_task_plumbing():
    threads, frames = samples(_SAMPLE)
    assert threads == {"Executor task launch worker for task N.N in stage N.N (TID N)": 1, "Thread-N": 1}
    assert frames == {"org.apache.spark.sql.catalyst.json.CreateJacksonParser$.utf8String": 1,
                      "(no Spark frame) java.lang.Thread.run": 1}


def test_process_starts_count_programs_and_compiler_totals_read_the_last_event():
    assert process_starts(_STARTS) == {"readlink": 2, "chmod": 1}
    text = ("jdk.CompilerStatistics {\n  compileCount = 10\n  totalTimeSpent = 1.0 s\n}\n\n"
            "jdk.CompilerStatistics {\n  compileCount = 43342\n  totalTimeSpent = 3 m 9 s\n}\n")
    assert compiler_totals(text) == {"compileCount": "43342", "totalTimeSpent": "3 m 9 s"}
    assert compiler_totals("") == {}
