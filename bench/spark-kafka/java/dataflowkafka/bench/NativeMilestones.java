package dataflowkafka.bench;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.Iterator;
import java.util.List;

import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.ExpiredTimerInfo;
import org.apache.spark.sql.streaming.ListState;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * The latency experiment's two order-sensitive stages (posting lists by word, then document
 * frequency milestones by word; optimistic/workload.py) written the way a Spark user writes them
 * on the JVM: one transformWithState keyed by the word, event-time timers, Spark's watermark.
 * Benchmarks only (bench/latency_experiment.py, variant "spark-jvm").
 *
 * Input rows (built in Spark SQL from format("kafka")): word, event_time (timestamp, the
 * watermark column), ts, part, off, j (the word's index among the document's distinct words),
 * doc_id, positions. Each word buffers its rows and keeps one event-time timer at the smallest
 * buffered time; when Spark's watermark passes it, the rows at or below the watermark are sorted
 * (ts, part, off, j), appended to the posting list, and the document frequency counted; when it
 * reaches a power of two the processor emits (word, milestone, doc_id) with the key the project's
 * pipeline gives the same item (optimistic.order.Meta.sort_key, path (j, 0, 0)), so both outputs
 * compare with one reference.
 */
public final class NativeMilestones extends StatefulProcessor<String, Row, Row> {
  private static final long serialVersionUID = 1L;

  static final StructType BUFFER = new StructType()
      .add("ts", DataTypes.LongType).add("part", DataTypes.IntegerType).add("off", DataTypes.LongType)
      .add("j", DataTypes.IntegerType).add("doc_id", DataTypes.LongType)
      .add("positions", DataTypes.createArrayType(DataTypes.IntegerType));
  static final StructType POSTING = new StructType()
      .add("doc_id", DataTypes.LongType).add("positions", DataTypes.createArrayType(DataTypes.IntegerType));
  public static final StructType OUTPUT = new StructType()
      .add("key", DataTypes.BinaryType).add("value", DataTypes.BinaryType);

  private transient ListState<Row> buffer;
  private transient ListState<Row> postings;
  private transient ValueState<Long> df;
  private transient ValueState<Long> timer;

  @Override
  public void init(OutputMode outputMode, TimeMode timeMode) {
    buffer = getHandle().getListState("buffer", Encoders.row(BUFFER), TTLConfig.NONE());
    postings = getHandle().getListState("postings", Encoders.row(POSTING), TTLConfig.NONE());
    df = getHandle().getValueState("df", Encoders.LONG(), TTLConfig.NONE());
    timer = getHandle().getValueState("timer", Encoders.LONG(), TTLConfig.NONE());
  }

  @Override
  public scala.collection.Iterator<Row> handleInputRows(String word, scala.collection.Iterator<Row> rows,
                                                         TimerValues timerValues) {
    long first = Long.MAX_VALUE;
    List<Row> add = new ArrayList<>();
    while (rows.hasNext()) {
      Row r = rows.next();
      long ts = r.getLong(r.fieldIndex("ts"));
      first = Math.min(first, ts);
      add.add(RowFactory.create(ts, r.getInt(r.fieldIndex("part")), r.getLong(r.fieldIndex("off")),
          r.getInt(r.fieldIndex("j")), r.getLong(r.fieldIndex("doc_id")), r.get(r.fieldIndex("positions"))));
    }
    for (Row r : add) {
      buffer.appendValue(r);
    }
    retime(first);
    return scala.collection.Iterator$.MODULE$.empty();
  }

  private void retime(long first) {
    Long current = timer.exists() ? timer.get() : null;
    if (first == Long.MAX_VALUE || (current != null && current <= first)) {
      return;
    }
    if (current != null) {
      getHandle().deleteTimer(current);
    }
    getHandle().registerTimer(first);
    timer.update(first);
  }

  @Override
  public scala.collection.Iterator<Row> handleExpiredTimer(String word, TimerValues timerValues,
                                                            ExpiredTimerInfo expiredTimerInfo) {
    long wm = timerValues.getCurrentWatermarkInMs();
    List<Row> ready = new ArrayList<>();
    List<Row> rest = new ArrayList<>();
    scala.collection.Iterator<Row> it = buffer.get();
    while (it.hasNext()) {
      Row r = it.next();
      (r.getLong(0) <= wm ? ready : rest).add(r);
    }
    ready.sort(Comparator.<Row>comparingLong(r -> r.getLong(0)).thenComparingInt(r -> r.getInt(1))
        .thenComparingLong(r -> r.getLong(2)).thenComparingInt(r -> r.getInt(3)));
    long n = df.exists() ? df.get() : 0L;
    List<Row> out = new ArrayList<>();
    for (Row r : ready) {
      postings.appendValue(RowFactory.create(r.getLong(4), r.get(5)));
      n += 1;
      if ((n & (n - 1)) == 0) {
        out.add(RowFactory.create(sortKey(r.getLong(0), r.getInt(1), r.getLong(2), r.getInt(3)),
            ("[\"" + word + "\"," + n + "," + r.getLong(4) + "]").getBytes(StandardCharsets.UTF_8)));
      }
    }
    df.update(n);
    buffer.clear();
    timer.clear();
    long first = Long.MAX_VALUE;
    for (Row r : rest) {
      buffer.appendValue(r);
      first = Math.min(first, r.getLong(0));
    }
    retime(first);
    Iterator<Row> javaIt = out.iterator();
    return scala.jdk.javaapi.CollectionConverters.asScala(javaIt);
  }

  /** optimistic.order.Meta(ts, part, off, (j, 0, 0)).sort_key(). */
  static byte[] sortKey(long ts, int part, long off, int j) {
    ByteBuffer b = ByteBuffer.allocate(8 + 4 + 8 + 3 * 4);
    b.putLong(ts ^ Long.MIN_VALUE).putInt(part ^ Integer.MIN_VALUE).putLong(off ^ Long.MIN_VALUE);
    b.putInt(j ^ Integer.MIN_VALUE).putInt(Integer.MIN_VALUE).putInt(Integer.MIN_VALUE);
    return b.array();
  }

  /** withWatermark(event_time, delay) -> groupByKey(word) -> transformWithState(EventTime): key, value rows. */
  public static Dataset<Row> apply(Dataset<Row> words, long delayMs) {
    return words.withWatermark("event_time", delayMs + " milliseconds")
        .groupByKey((MapFunction<Row, String>) r -> r.getString(r.fieldIndex("word")), Encoders.STRING())
        .transformWithState(new NativeMilestones(), TimeMode.EventTime(), OutputMode.Append(), Encoders.row(OUTPUT));
  }
}
