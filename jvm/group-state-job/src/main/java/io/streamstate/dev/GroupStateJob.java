package io.streamstate.dev;

import java.util.Collections;
import java.util.Iterator;
import java.util.concurrent.TimeUnit;

import org.apache.spark.api.java.function.FlatMapGroupsWithStateFunction;
import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.api.java.function.MapGroupsWithStateFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.KeyValueGroupedDataset;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.streaming.GroupState;
import org.apache.spark.sql.streaming.GroupStateTimeout;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.Trigger;

/**
 * A stream with Scala/Java arbitrary state, for the tests: rows of Spark's rate source
 * grouped by value % 13, a count per group kept in a GroupState (mapGroupsWithState or
 * flatMapGroupsWithState), with or without a processing-time timeout, written to the noop sink.
 *
 * <p>Arguments: CHECKPOINT map|flatMap STATE_FORMAT(1|2) hdfs|rocksdb BATCHES processing|none.
 * Runs until BATCHES more batches have committed (at most three minutes: a loaded machine
 * starts slowly), stops the query and exits 0 (1 when the query failed or did not get there). Spark 4.1 cannot
 * restart its own checkpoint of state format 1 with a timeout (it validates the timeout
 * as an int): run format 1 without one.
 */
public final class GroupStateJob {
  private static final String HDFS =
      "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider";
  private static final String ROCKSDB =
      "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider";

  private GroupStateJob() {}

  /** Adds the group's new rows to its count in `state`; the group's output line. */
  private static String count(Long key, Iterator<Long> rows, GroupState<Long> state, boolean timeout) {
    long n = state.exists() ? state.get() : 0L;
    while (rows.hasNext()) {
      rows.next();
      n++;
    }
    state.update(n);
    if (timeout) {
      state.setTimeoutDuration(3_600_000L);
    }
    return key + ":" + n;
  }

  public static void main(String[] args) throws Exception {
    String checkpoint = args[0];
    boolean flat = "flatMap".equals(args[1]);
    boolean timeout = "processing".equals(args[5]);
    GroupStateTimeout kind = timeout ? GroupStateTimeout.ProcessingTimeTimeout() : GroupStateTimeout.NoTimeout();
    SparkSession spark = SparkSession.builder()
        .appName("streamstate-group-state-job")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion", args[2])
        .config("spark.sql.streaming.stateStore.providerClass", "rocksdb".equals(args[3]) ? ROCKSDB : HDFS)
        .config("spark.ui.enabled", "false")
        .getOrCreate();
    spark.sparkContext().setLogLevel("ERROR");
    Dataset<Long> values = spark.readStream().format("rate").option("rowsPerSecond", 30).load()
        .selectExpr("value").as(Encoders.LONG());
    KeyValueGroupedDataset<Long, Long> groups =
        values.groupByKey((MapFunction<Long, Long>) v -> v % 13, Encoders.LONG());
    Dataset<String> out;
    if (flat) {
      out = groups.flatMapGroupsWithState(
          (FlatMapGroupsWithStateFunction<Long, Long, Long, String>) (key, rows, state) ->
              Collections.singletonList(count(key, rows, state, timeout)).iterator(),
          OutputMode.Update(), Encoders.LONG(), Encoders.STRING(), kind);
    } else {
      out = groups.mapGroupsWithState(
          (MapGroupsWithStateFunction<Long, Long, Long, String>) (key, rows, state) ->
              count(key, rows, state, timeout),
          Encoders.LONG(), Encoders.STRING(), kind);
    }
    StreamingQuery query = out.writeStream().format("noop").outputMode("update")
        .option("checkpointLocation", checkpoint)
        .trigger(Trigger.ProcessingTime(500, TimeUnit.MILLISECONDS)).start();
    long wanted = Long.parseLong(args[4]);
    long first = -1;
    long last = -1;
    long deadline = System.currentTimeMillis() + 180_000L;
    while (query.isActive() && System.currentTimeMillis() < deadline) {
      if (query.lastProgress() != null) {
        last = query.lastProgress().batchId();
        first = first < 0 ? last : first;
        if (last - first + 1 >= wanted) {
          break;
        }
      }
      Thread.sleep(200);
    }
    boolean failed = query.exception().isDefined() || last - first + 1 < wanted;
    query.stop();
    spark.stop();
    System.exit(failed ? 1 : 0);
  }
}
